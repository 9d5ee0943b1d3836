//go:build linux

package csitest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// RegistrarOptions configures the registrar, the suite's node-driver-registrar: a sidecar that
// asks the plugin for its name over CSI and registers it with kubelet's plugin watcher.
type RegistrarOptions struct {
	// CSIAddress is the plugin's socket as the registrar's container sees it (/csi/csi.sock).
	CSIAddress string
	// KubeletRegistrationPath is the same socket as the node sees it, the endpoint kubelet (and
	// the pvrescue agent) dial: <kubelet>/plugins/<driver>/csi.sock.
	KubeletRegistrationPath string
	// RegistrationDir is kubelet's plugins_registry as the container sees it (/registration).
	RegistrationDir string
	// Timeout bounds the wait for the plugin's socket to answer.
	Timeout time.Duration
}

// NewRegistrarOptions returns node-driver-registrar's usual container paths.
func NewRegistrarOptions() *RegistrarOptions {
	return &RegistrarOptions{CSIAddress: "/csi/csi.sock", RegistrationDir: "/registration", Timeout: 2 * time.Minute}
}

// AddFlags registers the options.
func (o *RegistrarOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.CSIAddress, "csi-address", o.CSIAddress, "the plugin's CSI socket in this container")
	fs.StringVar(&o.KubeletRegistrationPath, "kubelet-registration-path", o.KubeletRegistrationPath, "the plugin's CSI socket on the node")
	fs.StringVar(&o.RegistrationDir, "registration-dir", o.RegistrationDir, "kubelet's plugins_registry in this container")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound of the wait for the plugin's socket")
}

// Validate checks the options.
func (o *RegistrarOptions) Validate() error {
	if o.CSIAddress == "" || o.KubeletRegistrationPath == "" || o.RegistrationDir == "" {
		return fmt.Errorf("%w: --csi-address, --kubelet-registration-path and --registration-dir are required", ErrInvalidOptions)
	}
	return nil
}

// registrar serves kubelet's Registration API for one driver.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	driver, endpoint string
	log              logr.Logger
}

// GetInfo answers kubelet's plugin watcher.
func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type: registerapi.CSIPlugin, Name: r.driver, Endpoint: r.endpoint, SupportedVersions: []string{"1.0.0"},
	}, nil
}

// NotifyRegistrationStatus logs kubelet's verdict (the suite waits for "registered"=true).
func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.log.Info("registration status from kubelet", "registered", s.PluginRegistered, "error", s.Error)
	return &registerapi.RegistrationStatusResponse{}, nil
}

// RunRegistrar waits until the plugin answers GetPluginInfo, then serves the registration socket
// until ctx ends, and removes it then (kubelet unregisters the plugin).
func RunRegistrar(ctx context.Context, o *RegistrarOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	log := logr.FromContextOrDiscard(ctx)
	driver, err := pluginName(ctx, o.CSIAddress, o.Timeout)
	if err != nil {
		return err
	}
	sock := filepath.Join(o.RegistrationDir, RegistrationSocketName(driver))
	ln, err := listenUnix(sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registrar{driver: driver, endpoint: o.KubeletRegistrationPath, log: log})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("registering", "driver", driver, "endpoint", o.KubeletRegistrationPath, "socket", sock)
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	srv.Stop()
	_ = os.Remove(sock)
	return err
}

// ErrPluginNotAnswering: the plugin's socket did not answer GetPluginInfo in time.
var ErrPluginNotAnswering = errors.New("the CSI plugin does not answer")

// pluginName asks the plugin at addr for its driver name, retrying until timeout.
func pluginName(ctx context.Context, addr string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+strings.TrimPrefix(addr, "unix://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("dial %s: %w", addr, err)
	}
	defer func() { _ = conn.Close() }() // a probe connection; nothing to report
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := csi.NewIdentityClient(conn).GetPluginInfo(cctx, &csi.GetPluginInfoRequest{})
		ccancel()
		if err == nil && resp.GetName() != "" {
			return resp.GetName(), nil
		}
		last = err
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w at %s: %w", ErrPluginNotAnswering, addr, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
