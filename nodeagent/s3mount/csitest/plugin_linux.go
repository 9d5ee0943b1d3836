//go:build linux

package csitest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// Plugin is the CSI Identity + Node server.
type Plugin struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	o   Options
	log logr.Logger
	// dieWithPlugin gives each s3fs SIGKILL as its parent-death signal (the container way: the
	// mounts live exactly as long as the plugin). In process it stays off: the signal follows
	// the OS thread that started the child, and a Go thread can end long before the process.
	dieWithPlugin bool
	srv, reg      *grpc.Server

	mu    sync.Mutex
	procs map[string]*exec.Cmd // s3fs by mount path
	calls map[string]int
}

func newPlugin(o Options, log logr.Logger) *Plugin {
	return &Plugin{o: o, log: log, procs: map[string]*exec.Cmd{}, calls: map[string]int{}}
}

// Start serves the plugin in process until Stop (and, with opts.RegistrationSocket, its
// registration). Empty options take NewOptions' values.
func Start(opts Options) (*Plugin, error) {
	o := opts.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	p := newPlugin(o, logr.Discard())
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, err
	}
	ln, err := listenUnix(o.CSISocket())
	if err != nil {
		return nil, err
	}
	p.srv = p.server()
	go func() { _ = p.srv.Serve(ln) }() // ends with Stop
	if o.RegistrationSocket != "" {
		rln, err := listenUnix(o.RegistrationSocket)
		if err != nil {
			p.srv.Stop()
			return nil, err
		}
		p.reg = grpc.NewServer()
		registerapi.RegisterRegistrationServer(p.reg, &registrar{driver: o.Driver, endpoint: o.CSISocket(), log: p.log})
		go func() { _ = p.reg.Serve(rln) }() // ends with Stop
	}
	return p, nil
}

// Run serves the plugin until ctx ends (the container's process). Its s3fs are killed with it,
// on purpose.
func Run(ctx context.Context, opts *Options) error {
	o := opts.withDefaults()
	if err := o.Validate(); err != nil {
		return err
	}
	p := newPlugin(o, logr.FromContextOrDiscard(ctx))
	p.dieWithPlugin = true
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return err
	}
	ln, err := listenUnix(o.CSISocket())
	if err != nil {
		return err
	}
	p.srv = p.server()
	errc := make(chan error, 1)
	go func() { errc <- p.srv.Serve(ln) }()
	p.log.Info("serving", "driver", o.Driver, "layout", o.Layout, "csi", o.CSISocket())
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	p.srv.Stop()
	_ = os.Remove(o.CSISocket()) // the next start removes a leftover socket anyway
	return err
}

func (p *Plugin) server() *grpc.Server {
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, p)
	csi.RegisterNodeServer(srv, p)
	return srv
}

// listenUnix listens on a unix socket at path, replacing a socket an earlier run left.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	_ = os.Remove(path) // a socket left by an earlier run; Listen reports what matters
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}

// Stop stops serving; the s3fs children keep running, as after a plugin crash.
func (p *Plugin) Stop() {
	p.srv.Stop()
	if p.reg != nil {
		p.reg.Stop()
	}
}

// KillMounts kills every s3fs of the plugin with SIGKILL (what a plugin restart does to them).
func (p *Plugin) KillMounts() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for path, c := range p.procs {
		_ = c.Process.Signal(syscall.SIGKILL) // one that already exited is as good as killed
		delete(p.procs, path)
	}
}

// Pids returns the pids of the plugin's s3fs started since the last KillMounts.
func (p *Plugin) Pids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, c := range p.procs {
		out = append(out, c.Process.Pid)
	}
	return out
}

// CallCount returns how many times method (NodeStageVolume, NodePublishVolume,
// NodeUnpublishVolume; NodeUnpublishVolumeFailed for the strict layout's failures) was called.
func (p *Plugin) CallCount(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

func (p *Plugin) count(method string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[method]++
}

// GetPluginInfo names the driver.
func (p *Plugin) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: p.o.Driver, VendorVersion: "test"}, nil
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

// NodePublishVolume starts s3fs on the target as a child process and waits for the mount
// (yandex layout: binds the staging mount onto the target). A target already mounted is done.
func (p *Plugin) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	p.count("NodePublishVolume")
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
	p.count("NodeStageVolume")
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

// NodeUnpublishVolume unmounts the target and waits for its FUSE process (fuseUnmount). The
// direct layout unmounts every mount stacked there (pvrescue's binds included); the others only
// the top one, as the field drivers do, so a dead mount below stays. The strict layout does it
// as k8s-csi-s3 does: umount without looking first, codes.Internal on any error (EINVAL when the
// target is no mount point), so a target someone else emptied fails for ever.
func (p *Plugin) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	p.count("NodeUnpublishVolume")
	target := req.GetTargetPath()
	if target == "" || req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and target path are required")
	}
	if p.o.Layout == LayoutStrict {
		if err := p.fuseUnmount(target, 0); err != nil {
			p.count("NodeUnpublishVolumeFailed")
			p.log.Info("unpublish failed (strict: plain umount)", "volume", req.GetVolumeId(), "target", target, "err", err.Error())
			return nil, status.Error(codes.Internal, err.Error())
		}
		p.log.Info("unpublished (plain umount)", "volume", req.GetVolumeId(), "target", target)
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if p.o.Layout != LayoutDirect {
		if isMountPoint(target) {
			if err := p.fuseUnmount(target, 0); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
		if !isMountPoint(target) {
			_ = os.Remove(target) // kubelet removes it too; a non-empty directory stays
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
	_ = os.Remove(p.passwdFile(target)) // gone already when the mount came from elsewhere
	p.log.Info("unpublished", "volume", req.GetVolumeId(), "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
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

func (p *Plugin) passwdFile(path string) string {
	sum := sha256.Sum256([]byte(path))
	return filepath.Join(p.o.StateDir, hex.EncodeToString(sum[:8])+".passwd")
}

// mountS3fs starts s3fs at path as a child process and waits until the path's top mount is an
// s3fs mount that answers.
func (p *Plugin) mountS3fs(ctx context.Context, volumeID string, volCtx, secrets map[string]string, path string) error {
	keys := config.Default().S3.SecretKeys
	ak, sk := secrets[keys.AccessKeyID], secrets[keys.SecretAccessKey]
	if ak == "" || sk == "" {
		return status.Error(codes.InvalidArgument, "the secret lacks the access keys")
	}
	passwd := p.passwdFile(path)
	if err := os.WriteFile(passwd, []byte(ak+":"+sk), 0o600); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	args, err := MountArgs(p.o.Layout, volumeID, volCtx, secrets, path, passwd)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	cmd := exec.Command(p.o.S3fs, args...) //nolint:gosec // test support: the test's s3fs at the path kubelet gives
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// Its own process group: a signal to the test's group (^C) is not a plugin restart.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.dieWithPlugin {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return status.Error(codes.Internal, fmt.Sprintf("start s3fs: %v", err))
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // how it ended shows at the mount
	fsType, _ := MountType(volCtx)                // checked by MountArgs
	deadline := time.After(p.o.MountTimeout)
	for !s3fsAnswers(path, fsType) {
		select {
		case <-exited:
			return status.Error(codes.Internal, fmt.Sprintf("s3fs exited before mounting: %s", stderr.String()))
		case <-deadline:
			_ = cmd.Process.Kill() // gone already is as good
			return status.Error(codes.DeadlineExceeded, fmt.Sprintf("s3fs did not mount %s in time", path))
		case <-ctx.Done():
			_ = cmd.Process.Kill() // gone already is as good
			return status.FromContextError(ctx.Err()).Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.mu.Lock()
	p.procs[path] = cmd
	p.mu.Unlock()
	p.log.Info("mounted", "volume", volumeID, "path", path, "pid", cmd.Process.Pid)
	return nil
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

// mountTable reads this process's mount table; an unreadable one reads as empty.
func mountTable() []mountinfo.Mount {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	return mountinfo.ParseLenient(string(b))
}

// isMountPoint reports whether path is a mount point.
func isMountPoint(path string) bool {
	_, ok := TopAt(mountTable(), filepath.Clean(path))
	return ok
}

// s3fsAnswers reports whether the top mount at path is our s3fs mount (of type fsType) whose
// statfs answers.
func s3fsAnswers(path, fsType string) bool {
	top, ok := TopAt(mountTable(), filepath.Clean(path))
	var st unix.Statfs_t
	return ok && top.FSType == fsType && unix.Statfs(path, &st) == nil
}
