package csiclient

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Registry finds a CSI driver's node plugin endpoint as kubelet does: every socket in
// <kubelet>/plugins_registry is a registration socket (node-driver-registrar's), whose
// Registration.GetInfo names the plugin's type, name and endpoint.
type Registry interface {
	// Endpoint returns the endpoint the driver registered with kubelet; ok=false when no
	// registration socket names it (then the agent uses <kubelet>/plugins/<driver>/csi.sock).
	Endpoint(ctx context.Context, kubeletDir, driver string) (endpoint string, ok bool)
}

// RegistrationDir is kubelet's plugin-registration directory.
func RegistrationDir(kubeletDir string) string { return filepath.Join(kubeletDir, "plugins_registry") }

// EndpointPath turns a registered endpoint ("/path", "unix:///path", "unix:/path") into a
// socket path; ok=false for anything else.
func EndpointPath(ep string) (string, bool) {
	if p, ok := strings.CutPrefix(ep, "unix://"); ok {
		ep = p
	} else {
		ep = strings.TrimPrefix(ep, "unix:")
	}
	if !filepath.IsAbs(ep) {
		return "", false
	}
	return filepath.Clean(ep), true
}

// GRPCRegistry is the real Registry.
type GRPCRegistry struct{}

// getInfoTimeout bounds the GetInfo call on each registration socket.
const getInfoTimeout = 2 * time.Second

func (g GRPCRegistry) Endpoint(ctx context.Context, kubeletDir, driver string) (string, bool) {
	dir := RegistrationDir(kubeletDir)
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return "", false
	}
	var socks []string
	for _, e := range ents {
		switch name := e.Name(); {
		case name == driver+"-reg.sock": // node-driver-registrar's name for it: asked first
			socks = append([]string{filepath.Join(dir, name)}, socks...)
		case strings.HasSuffix(name, ".sock"):
			socks = append(socks, filepath.Join(dir, name))
		}
	}
	for _, s := range socks {
		info, err := getInfo(ctx, s)
		if err != nil || info.GetType() != registerapi.CSIPlugin || info.GetName() != driver {
			continue
		}
		if p, ok := EndpointPath(info.GetEndpoint()); ok {
			return p, true
		}
	}
	return "", false
}

func getInfo(ctx context.Context, socket string) (*registerapi.PluginInfo, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("registration socket %s: %w", socket, err)
	}
	defer func() { _ = conn.Close() }() // a client connection: closing it reports nothing we could act on
	cctx, cancel := context.WithTimeout(ctx, getInfoTimeout)
	defer cancel()
	return registerapi.NewRegistrationClient(conn).GetInfo(cctx, &registerapi.InfoRequest{})
}
