// Package csis3 is a small S3 CSI node plugin for the end-to-end suite. It does what the s3fs
// drivers in the field do on a node: on NodePublishVolume (NodeStageVolume in the yandex layout)
// it runs s3fs as its own child process, so when the plugin's container ends its mounts die
// ("Transport endpoint is not connected") — the failure pvrescue's agent repairs. It runs as a
// DaemonSet pod with the mounts of k8s-csi-s3's upstream node DaemonSet (see e2e/stack): Run is
// the node plugin's container, RunRegistrar the node-driver-registrar sidecar that registers the
// plugin with kubelet through <kubelet>/plugins_registry.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pvrescue/pvrescue/internal/config"
)

// Options configures the plugin.
type Options struct {
	Driver     string
	NodeID     string
	KubeletDir string
	// Endpoint is the CSI socket the plugin serves (in its container: /csi/csi.sock, the
	// host's <kubelet>/plugins/<driver>/csi.sock); empty means that host path.
	Endpoint string
	StateDir string
	S3fs     string
	// MountTimeout bounds the wait for s3fs to show up at the target.
	MountTimeout time.Duration
	// UnmountWait bounds the wait, after an unmount, for the FUSE process whose command line
	// names the path to exit (k8s-csi-s3's FuseUnmount); past it the call fails and kubelet retries.
	UnmountWait time.Duration
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
		UnmountWait:  10 * time.Second,
		Layout:       LayoutDirect,
	}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Driver, "driver", o.Driver, "CSI driver name")
	fs.StringVar(&o.NodeID, "node-id", o.NodeID, "node id reported to kubelet (the node name)")
	fs.StringVar(&o.KubeletDir, "kubelet-dir", o.KubeletDir, "kubelet root directory")
	fs.StringVar(&o.Endpoint, "endpoint", o.Endpoint, "CSI socket to serve (default <kubelet-dir>/plugins/<driver>/csi.sock)")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "directory for s3fs password files")
	fs.StringVar(&o.S3fs, "s3fs", o.S3fs, "s3fs executable")
	fs.DurationVar(&o.MountTimeout, "mount-timeout", o.MountTimeout, "bound of the wait for s3fs to mount")
	fs.DurationVar(&o.UnmountWait, "unmount-wait", o.UnmountWait, "bound of the wait for a FUSE process to exit after its unmount")
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
	if o.Endpoint != "" {
		return strings.TrimPrefix(o.Endpoint, "unix://")
	}
	return HostCSISocket(o.KubeletDir, o.Driver)
}

// HostCSISocket is the node's path of a driver's CSI socket, as kubelet and the agent dial it.
func HostCSISocket(kubeletDir, driver string) string {
	return filepath.Join(kubeletDir, "plugins", driver, "csi.sock")
}

// Plugin is the CSI Identity + Node server.
type Plugin struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	o   *Options
	log logr.Logger
}

// Run serves until ctx ends. Children (s3fs) are killed with the plugin, on purpose.
func Run(ctx context.Context, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	p := &Plugin{o: o, log: logr.FromContextOrDiscard(ctx)}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return err
	}
	csiLn, err := listenUnix(o.CSISocket())
	if err != nil {
		return err
	}
	csiSrv := grpc.NewServer()
	csi.RegisterIdentityServer(csiSrv, p)
	csi.RegisterNodeServer(csiSrv, p)
	errc := make(chan error, 1)
	go func() { errc <- csiSrv.Serve(csiLn) }()
	p.log.Info("serving", "driver", o.Driver, "layout", o.Layout, "csi", o.CSISocket())
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	csiSrv.Stop()
	_ = os.Remove(o.CSISocket()) // a socket left by an earlier run; Listen reports what matters
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

// NodeUnstageVolume (yandex layout) unmounts the top mount at the staging path, as
// ru.yandex.s3.csi does (FuseUnmount when it is a mount point).
func (p *Plugin) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if p.o.Layout != LayoutYandex {
		return nil, status.Error(codes.Unimplemented, "no staging in this layout")
	}
	path := req.GetStagingTargetPath()
	if isMountPoint(path) {
		if err := p.fuseUnmount(path, 0); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	p.log.Info("unstaged", "volume", req.GetVolumeId(), "path", path)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// fuseUnmount is k8s-csi-s3's FuseUnmount: unmount path (flags 0: the top mount only, failing
// when busy), then wait, up to UnmountWait, for the FUSE process whose command line names path to
// exit; it fails when that process outlives the wait (kubelet then retries the call).
func (p *Plugin) fuseUnmount(path string, flags int) error {
	if err := unix.Unmount(path, flags); err != nil {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	pid := findFuseProcess("/proc", path)
	if pid == 0 {
		return nil
	}
	deadline := time.Now().Add(p.o.UnmountWait)
	for wait := 100 * time.Millisecond; ; wait = min(wait*3/2, time.Second) {
		if !cmdlineNames("/proc", pid, path) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: pid %d of %s still runs %s after its unmount", ErrFuseProcessLingers, pid, path, p.o.UnmountWait)
		}
		time.Sleep(wait)
	}
}

// ErrFuseProcessLingers: a FUSE process did not exit after its mount was unmounted.
var ErrFuseProcessLingers = errors.New("FUSE process still runs")

// findFuseProcess returns the first process (other than this one) under procDir whose command
// line names path, or 0.
func findFuseProcess(procDir, path string) int {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return 0
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if cmdlineNames(procDir, pid, path) {
			return pid
		}
	}
	return 0
}

// cmdlineNames reports whether the command line of pid contains path (as upstream matches it).
func cmdlineNames(procDir string, pid int, path string) bool {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "cmdline"))
	return err == nil && bytes.Contains(b, []byte(path))
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
	p.log.Info("mounted", "volume", volumeID, "path", target, "pid", cmd.Process.Pid)
	return nil
}

// NodeUnpublishVolume unmounts the target and waits for its FUSE process (fuseUnmount). The
// direct layout unmounts every mount stacked there (pvrescue's binds included); the field layouts
// only the top one, as ru.yandex.s3.csi and ctrox do, so a dead mount below stays.
func (p *Plugin) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" || req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and target path are required")
	}
	if p.o.Layout != LayoutDirect {
		if isMountPoint(target) {
			if err := p.fuseUnmount(target, 0); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
		if !isMountPoint(target) {
			_ = os.Remove(target)
		}
		p.log.Info("unpublished (top mount)", "volume", req.GetVolumeId(), "target", target)
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	for i := 0; i < 10 && isMountPoint(target); i++ {
		if err := p.fuseUnmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
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
