// Package csis3 is a small S3 CSI node plugin for the end-to-end suite. It does what the s3fs
// drivers in the field do on a node: on NodePublishVolume it runs s3fs as its own child process on
// the target path, so when the plugin restarts its mounts die ("Transport endpoint is not
// connected") — the failure pvrescue's agent repairs. It registers with kubelet through the
// plugin-registration socket, and kubelet does the real NodePublish/NodeUnpublish calls.
package csis3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/pvrescue/pvrescue/internal/config"
)

// Options configures the plugin.
type Options struct {
	Driver     string
	NodeID     string
	KubeletDir string
	StateDir   string
	S3fs       string
	// MountTimeout bounds the wait for s3fs to show up at the target.
	MountTimeout time.Duration
	// Layout is the field layout the plugin imitates (LayoutDirect, LayoutYandex, LayoutCtrox).
	Layout string
}

// Field layouts of the plugin.
const (
	// LayoutDirect: s3fs of bucket[:/prefix] directly at the target; NodeUnpublish unmounts
	// everything stacked there.
	LayoutDirect = "direct"
	// LayoutYandex: as ru.yandex.s3.csi — STAGE_UNSTAGE, s3fs at kubelet's staging path, a bind
	// to each target; NodeUnpublish unmounts the top mount only.
	LayoutYandex = "yandex"
	// LayoutCtrox: as ch.ctrox.csi.s3-driver — s3fs of bucket:/<prefix>/csi-fs (bucket:/<prefix>
	// with usePrefix) directly at the target; NodeUnpublish unmounts the top mount only.
	LayoutCtrox = "ctrox"
)

// NewOptions returns defaults: the first S3 driver name pvrescue knows, /var/lib/kubelet.
func NewOptions() *Options {
	d := config.Default()
	return &Options{
		Driver:       d.S3.Drivers[0],
		KubeletDir:   d.KubeletDir,
		StateDir:     "/run/csi-s3-test",
		S3fs:         "s3fs",
		MountTimeout: 30 * time.Second,
		Layout:       LayoutDirect,
	}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Driver, "driver", o.Driver, "CSI driver name")
	fs.StringVar(&o.NodeID, "node-id", o.NodeID, "node id reported to kubelet (the node name)")
	fs.StringVar(&o.KubeletDir, "kubelet-dir", o.KubeletDir, "kubelet root directory")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "directory for s3fs password files")
	fs.StringVar(&o.S3fs, "s3fs", o.S3fs, "s3fs executable")
	fs.DurationVar(&o.MountTimeout, "mount-timeout", o.MountTimeout, "bound of the wait for s3fs to mount")
	fs.StringVar(&o.Layout, "layout", o.Layout, "field layout: direct, yandex (staging + bind, top-only unpublish) or ctrox (<prefix>/csi-fs, top-only unpublish)")
}

// ErrInvalidOptions is wrapped by Validate's errors.
var ErrInvalidOptions = errors.New("invalid csi-s3-test options")

// Validate checks the options.
func (o *Options) Validate() error {
	if o.Driver == "" || o.NodeID == "" || o.KubeletDir == "" || o.StateDir == "" {
		return fmt.Errorf("%w: --driver, --node-id, --kubelet-dir and --state-dir are required", ErrInvalidOptions)
	}
	switch o.Layout {
	case LayoutDirect, LayoutYandex, LayoutCtrox:
	default:
		return fmt.Errorf("%w: --layout %q (direct, yandex or ctrox)", ErrInvalidOptions, o.Layout)
	}
	return nil
}

// CSISocket is where the plugin serves CSI.
func (o *Options) CSISocket() string {
	return filepath.Join(o.KubeletDir, "plugins", o.Driver, "csi.sock")
}

// RegistrationSocket is where kubelet's plugin watcher finds the plugin.
func (o *Options) RegistrationSocket() string {
	return filepath.Join(o.KubeletDir, "plugins_registry", o.Driver+"-reg.sock")
}

// Plugin is the CSI Identity + Node server and the registration server.
type Plugin struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	registerapi.UnimplementedRegistrationServer

	o   *Options
	log logr.Logger

	mu     sync.Mutex
	mounts map[string]*exec.Cmd // by target path
}

// Run serves until ctx ends. Children (s3fs) are killed with the plugin, on purpose.
func Run(ctx context.Context, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	p := &Plugin{o: o, log: logr.FromContextOrDiscard(ctx), mounts: map[string]*exec.Cmd{}}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return err
	}
	csiLn, err := listenUnix(o.CSISocket())
	if err != nil {
		return err
	}
	regLn, err := listenUnix(o.RegistrationSocket())
	if err != nil {
		csiLn.Close()
		return err
	}
	csiSrv, regSrv := grpc.NewServer(), grpc.NewServer()
	csi.RegisterIdentityServer(csiSrv, p)
	csi.RegisterNodeServer(csiSrv, p)
	registerapi.RegisterRegistrationServer(regSrv, p)
	errc := make(chan error, 2)
	go func() { errc <- csiSrv.Serve(csiLn) }()
	go func() { errc <- regSrv.Serve(regLn) }()
	p.log.Info("serving", "driver", o.Driver, "csi", o.CSISocket(), "registration", o.RegistrationSocket())
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	regSrv.Stop()
	csiSrv.Stop()
	os.Remove(o.RegistrationSocket())
	os.Remove(o.CSISocket())
	return err
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}

// GetInfo answers kubelet's plugin watcher.
func (p *Plugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type: registerapi.CSIPlugin, Name: p.o.Driver, Endpoint: p.o.CSISocket(), SupportedVersions: []string{"1.0.0"},
	}, nil
}

// NotifyRegistrationStatus logs kubelet's verdict.
func (p *Plugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p.log.Info("registration status from kubelet", "registered", s.PluginRegistered, "error", s.Error)
	return &registerapi.RegistrationStatusResponse{}, nil
}

// GetPluginInfo names the driver.
func (p *Plugin) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: p.o.Driver, VendorVersion: "e2e"}, nil
}

// GetPluginCapabilities: node service only.
func (p *Plugin) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe reports ready.
func (p *Plugin) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// NodeGetCapabilities: STAGE_UNSTAGE in the yandex layout; else kubelet calls NodePublishVolume
// directly.
func (p *Plugin) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	if p.o.Layout == LayoutYandex {
		resp.Capabilities = []*csi.NodeServiceCapability{{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}}}
	}
	return resp, nil
}

// NodeGetInfo returns the node id.
func (p *Plugin) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: p.o.NodeID}, nil
}

// MountArgs builds the s3fs command line for a volume, the way csi-s3 style drivers do:
// bucket[:/prefix] from the attributes or the handle, endpoint from the attributes or the secret.
// It is pure; passwdFile holds the credentials.
func MountArgs(layout, handle string, attrs, secrets map[string]string, target, passwdFile string) ([]string, error) {
	keys := config.Default().S3
	bucket, prefix := attrs[keys.Parameters.Bucket], attrs[keys.Parameters.Prefix]
	if bucket == "" {
		bucket, prefix, _ = strings.Cut(handle, "/")
	}
	if bucket == "" {
		return nil, fmt.Errorf("no bucket in attributes or handle %q", handle)
	}
	endpoint := attrs[keys.Parameters.Endpoint]
	if e := secrets[keys.SecretKeys.Endpoint]; e != "" {
		endpoint = e
	}
	if endpoint == "" {
		return nil, errors.New("no endpoint in attributes or secret")
	}
	prefix = strings.Trim(prefix, "/")
	if layout == LayoutCtrox && attrs["usePrefix"] != "true" {
		prefix = strings.Trim(prefix+"/csi-fs", "/")
	}
	src := bucket
	if prefix != "" {
		src += ":/" + prefix
	}
	args := []string{src, target, "-f",
		"-o", "passwd_file=" + passwdFile, "-o", "url=" + endpoint, "-o", "use_path_request_style", "-o", "allow_other"}
	for _, o := range strings.Fields(attrs[keys.Parameters.MountOptions]) {
		if o = strings.TrimPrefix(o, "-o"); o != "" {
			args = append(args, "-o", o)
		}
	}
	return args, nil
}

// NodePublishVolume starts s3fs on the target as a child process and waits for the mount
// (yandex layout: binds the staging mount onto the target).
func (p *Plugin) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" || req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and target path are required")
	}
	if err := checkPath(target); err != nil {
		return nil, err
	}
	if isMountPoint(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if p.o.Layout == LayoutYandex {
		if err := os.MkdirAll(target, 0o750); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := unix.Mount(req.GetStagingTargetPath(), target, "", unix.MS_BIND, ""); err != nil {
			return nil, status.Error(codes.Internal, fmt.Sprintf("bind %s: %v", target, err))
		}
		p.log.Info("published (bind of the staging mount)", "volume", req.GetVolumeId(), "target", target)
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := p.mountS3fs(ctx, req.GetVolumeId(), req.GetVolumeContext(), req.GetSecrets(), target); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeStageVolume (yandex layout) starts s3fs at kubelet's staging path.
func (p *Plugin) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if p.o.Layout != LayoutYandex {
		return nil, status.Error(codes.Unimplemented, "no staging in this layout")
	}
	path := req.GetStagingTargetPath()
	if path == "" || req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and staging path are required")
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	if isMountPoint(path) {
		return &csi.NodeStageVolumeResponse{}, nil
	}
	if err := p.mountS3fs(ctx, req.GetVolumeId(), req.GetVolumeContext(), req.GetSecrets(), path); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume (yandex layout) unmounts the top mount at the staging path and stops s3fs.
func (p *Plugin) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if p.o.Layout != LayoutYandex {
		return nil, status.Error(codes.Unimplemented, "no staging in this layout")
	}
	p.unmountTop(req.GetStagingTargetPath())
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// unmountTop unmounts the top mount at path only (as ru.yandex.s3.csi and ctrox do) and stops
// the s3fs started there.
func (p *Plugin) unmountTop(path string) {
	if isMountPoint(path) {
		if err := unix.Unmount(path, 0); err != nil {
			p.log.Info("unmount failed", "path", path, "err", err.Error())
		}
	}
	p.mu.Lock()
	if cmd := p.mounts[path]; cmd != nil {
		_ = cmd.Process.Kill()
		delete(p.mounts, path)
	}
	p.mu.Unlock()
}

// mountS3fs starts s3fs at path as a child process and waits for the mount.
func (p *Plugin) mountS3fs(ctx context.Context, volumeID string, volCtx, secrets map[string]string, target string) error {
	keys := config.Default().S3.SecretKeys
	ak, sk := secrets[keys.AccessKeyID], secrets[keys.SecretAccessKey]
	if ak == "" || sk == "" {
		return status.Error(codes.InvalidArgument, "the secret lacks the access keys")
	}
	sum := sha256.Sum256([]byte(target))
	passwd := filepath.Join(p.o.StateDir, hex.EncodeToString(sum[:8])+".passwd")
	if err := os.WriteFile(passwd, []byte(ak+":"+sk), 0o600); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	args, err := MountArgs(p.o.Layout, volumeID, volCtx, secrets, target, passwd)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	cmd := exec.Command(p.o.S3fs, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// The mount lives exactly as long as the plugin, like a driver whose container restarts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return status.Error(codes.Internal, fmt.Sprintf("start s3fs: %v", err))
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.After(p.o.MountTimeout)
	for !isMountPoint(target) {
		select {
		case <-exited:
			return status.Error(codes.Internal, fmt.Sprintf("s3fs exited before mounting: %s", stderr.String()))
		case <-deadline:
			_ = cmd.Process.Kill()
			return status.Error(codes.DeadlineExceeded, "s3fs did not mount in time")
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return status.FromContextError(ctx.Err()).Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	p.mu.Lock()
	p.mounts[target] = cmd
	p.mu.Unlock()
	p.log.Info("mounted", "volume", volumeID, "path", target, "pid", cmd.Process.Pid)
	return nil
}

// NodeUnpublishVolume unmounts every mount stacked on the target (pvrescue's binds included)
// and stops s3fs.
func (p *Plugin) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if p.o.Layout != LayoutDirect {
		// As the field drivers do: only the top mount goes; a dead mount below stays.
		p.unmountTop(target)
		if !isMountPoint(target) {
			_ = os.Remove(target)
		}
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	for i := 0; i < 10 && isMountPoint(target); i++ {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return nil, status.Error(codes.Internal, fmt.Sprintf("unmount %s: %v", target, err))
		}
	}
	p.mu.Lock()
	if cmd := p.mounts[target]; cmd != nil {
		_ = cmd.Process.Kill()
		delete(p.mounts, target)
	}
	p.mu.Unlock()
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	sum := sha256.Sum256([]byte(target))
	_ = os.Remove(filepath.Join(p.o.StateDir, hex.EncodeToString(sum[:8])+".passwd"))
	p.log.Info("unpublished", "volume", req.GetVolumeId(), "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// checkPath refuses a path whose mount check fails with ENOTCONN (a dead FUSE mount), as the
// s3fs drivers in the field do (their IsLikelyNotMountPoint fails): a dead path is never
// reported as published.
func checkPath(path string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED) {
		return status.Error(codes.Internal, fmt.Sprintf("check %s: %v", path, err))
	}
	return nil
}

// isMountPoint reports whether path is a mount point in /proc/self/mountinfo (dead FUSE mounts
// included, which a stat-based check cannot see).
func isMountPoint(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	return MountInfoHas(string(b), filepath.Clean(path))
}

// MountInfoHas reports whether mountinfo lists path as a mount point.
func MountInfoHas(table, path string) bool {
	for _, m := range mountinfo.ParseLenient(table) {
		if m.MountPoint == path {
			return true
		}
	}
	return false
}
