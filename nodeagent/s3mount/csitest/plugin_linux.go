//go:build linux

package csitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// Options of the plugin.
type Options struct {
	// Socket is the unix socket to serve on (<kubelet>/plugins/<driver>/csi.sock).
	Socket string
	// StateDir holds passwd files.
	StateDir string
	// Stage selects the staging layout (STAGE_UNSTAGE; s3fs at the staging path, binds to targets).
	Stage bool
	// S3fs is the program (default "s3fs").
	S3fs string
	// RegistrationSocket, when set, is served as node-driver-registrar serves
	// <kubelet>/plugins_registry/<driver>-reg.sock: GetInfo names Driver and Socket.
	RegistrationSocket string
	// Driver is the name GetInfo reports.
	Driver string
}

// Plugin is a running node plugin.
type Plugin struct {
	csi.UnimplementedNodeServer
	opts  Options
	srv   *grpc.Server
	reg   *grpc.Server
	mu    sync.Mutex
	procs map[string]*exec.Cmd // by mount path
	// Calls counts NodeStage and NodePublish calls.
	Calls map[string]int
}

// Start serves the plugin until Stop.
func Start(opts Options) (*Plugin, error) {
	if opts.S3fs == "" {
		opts.S3fs = "s3fs"
	}
	if err := os.MkdirAll(filepath.Dir(opts.Socket), 0o755); err != nil { //nolint:gosec // test support: a plugin socket directory like kubelet's
		return nil, err
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(opts.Socket)
	ln, err := net.Listen("unix", opts.Socket)
	if err != nil {
		return nil, err
	}
	p := &Plugin{opts: opts, srv: grpc.NewServer(), procs: map[string]*exec.Cmd{}, Calls: map[string]int{}}
	csi.RegisterNodeServer(p.srv, p)
	go func() { _ = p.srv.Serve(ln) }()
	if opts.RegistrationSocket != "" {
		if err := os.MkdirAll(filepath.Dir(opts.RegistrationSocket), 0o755); err != nil { //nolint:gosec // test support: kubelet's plugins_registry is 0755 too
			p.srv.Stop()
			return nil, err
		}
		_ = os.Remove(opts.RegistrationSocket)
		rln, err := net.Listen("unix", opts.RegistrationSocket)
		if err != nil {
			p.srv.Stop()
			return nil, err
		}
		p.reg = grpc.NewServer()
		registerapi.RegisterRegistrationServer(p.reg, registration{opts: opts})
		go func() { _ = p.reg.Serve(rln) }()
	}
	return p, nil
}

// registration is the plugin-registration service (what node-driver-registrar serves).
type registration struct {
	registerapi.UnimplementedRegistrationServer
	opts Options
}

func (r registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.opts.Driver, Endpoint: r.opts.Socket,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (registration) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Stop stops serving (the s3fs children keep running, as after a plugin crash).
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
		_ = c.Process.Signal(syscall.SIGKILL)
		delete(p.procs, path)
	}
}

// Pids returns the pids of the plugin's running s3fs.
func (p *Plugin) Pids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, c := range p.procs {
		out = append(out, c.Process.Pid)
	}
	return out
}

// CallCount returns how many times method was called.
func (p *Plugin) CallCount(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Calls[method]
}

func (p *Plugin) count(method string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Calls[method]++
}

// NodeGetCapabilities implements csi.NodeServer.
func (p *Plugin) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	if p.opts.Stage {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}})
	}
	return resp, nil
}

// NodeGetInfo implements csi.NodeServer.
func (p *Plugin) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: "node"}, nil
}

// NodeStageVolume implements csi.NodeServer.
func (p *Plugin) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	p.count("NodeStageVolume")
	if !p.opts.Stage {
		return nil, status.Error(codes.Unimplemented, "no staging")
	}
	if err := p.mount(ctx, req.GetVolumeId(), req.GetStagingTargetPath(), req.GetSecrets(), req.GetVolumeContext()); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodePublishVolume implements csi.NodeServer.
func (p *Plugin) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	p.count("NodePublishVolume")
	target := req.GetTargetPath()
	if p.opts.Stage {
		if err := checkPath(target); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(target, 0o750); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		flags := uintptr(unix.MS_BIND)
		if err := unix.Mount(req.GetStagingTargetPath(), target, "", flags, ""); err != nil {
			return nil, status.Errorf(codes.Internal, "bind %s: %v", target, err)
		}
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := p.mount(ctx, req.GetVolumeId(), target, req.GetSecrets(), req.GetVolumeContext()); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume implements csi.NodeServer: it unmounts the top mount only, as common
// drivers do.
func (p *Plugin) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	// Not mounted (EINVAL) or gone (ENOENT) is done; anything else (EBUSY) is reported, and
	// kubelet retries.
	if err := unix.Unmount(req.GetTargetPath(), 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", req.GetTargetPath(), err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// checkPath refuses a path whose mount check fails with ENOTCONN, as s3fs drivers do.
func checkPath(path string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); errors.Is(err, syscall.ENOTCONN) {
		return status.Errorf(codes.Internal, "check %s: %v", path, err)
	}
	return nil
}

func (p *Plugin) mount(ctx context.Context, volumeID, path string, secrets, volCtx map[string]string) error {
	if err := checkPath(path); err != nil {
		return err
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	bucket, prefix, _ := strings.Cut(volumeID, "/")
	source := bucket
	if prefix != "" {
		source += ":/" + prefix
	}
	endpoint := secrets["endpoint"]
	if endpoint == "" {
		endpoint = volCtx["endpoint"]
	}
	pw := filepath.Join(p.opts.StateDir, fmt.Sprintf("%d.passwd", time.Now().UnixNano()))
	if err := os.WriteFile(pw, []byte(secrets["accessKeyID"]+":"+secrets["secretAccessKey"]+"\n"), 0o600); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	cmd := exec.Command(p.opts.S3fs, source, path, "-f", "-o", "passwd_file="+pw, "-o", "url="+endpoint, //nolint:gosec // test support: the test's s3fs at the path kubelet gives
		"-o", "use_path_request_style", "-o", "allow_other")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	go func() { _ = cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if mounted(path) {
			var st unix.Statfs_t
			if unix.Statfs(path, &st) == nil {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = cmd.Process.Kill()
			return status.Errorf(codes.Internal, "s3fs did not mount %s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	p.procs[path] = cmd
	p.mu.Unlock()
	return nil
}

// mounted reports whether an s3fs mount is at path (from /proc/self/mountinfo).
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, m := range mountinfo.ParseLenient(string(b)) {
		if m.MountPoint == path && m.FSType == "fuse.s3fs" {
			return true
		}
	}
	return false
}
