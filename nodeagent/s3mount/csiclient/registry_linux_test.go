//go:build linux

package csiclient_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// The driver's endpoint is found through kubelet's plugin registration (GetInfo on the
// registration sockets), whichever path it serves on; another plugin's registration does not
// count; without a registration the driver is not found (the agent then uses the usual path).
func TestGRPCRegistryFindsTheRegisteredEndpoint(t *testing.T) {
	kubelet := t.TempDir()
	other, err := csitest.Start(csitest.Options{Socket: filepath.Join(kubelet, "elsewhere", "other.sock"), StateDir: t.TempDir(),
		RegistrationSocket: filepath.Join(csiclient.RegistrationDir(kubelet), "aaa-other-reg.sock"), Driver: "other.csi"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	sock := filepath.Join(kubelet, "elsewhere", "csi.sock")
	p, err := csitest.Start(csitest.Options{Socket: sock, StateDir: t.TempDir(),
		RegistrationSocket: filepath.Join(csiclient.RegistrationDir(kubelet), "ru.yandex.s3.csi-reg.sock"), Driver: "ru.yandex.s3.csi"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx := context.Background()
	if ep, ok := (csiclient.GRPCRegistry{}).Endpoint(ctx, kubelet, "ru.yandex.s3.csi"); !ok || ep != sock {
		t.Errorf("Endpoint = %q, %v; want %q", ep, ok, sock)
	}
	if ep, ok := (csiclient.GRPCRegistry{}).Endpoint(ctx, kubelet, "csi-s3"); ok {
		t.Errorf("unregistered driver found at %q", ep)
	}
}

func TestEndpointPath(t *testing.T) {
	for in, want := range map[string]string{
		"/var/lib/kubelet/plugins/d/csi.sock":        "/var/lib/kubelet/plugins/d/csi.sock",
		"unix:///var/lib/kubelet/plugins/d/csi.sock": "/var/lib/kubelet/plugins/d/csi.sock",
		"unix:/csi/csi.sock":                         "/csi/csi.sock",
		"tcp://127.0.0.1:10000":                      "",
		"csi.sock":                                   "",
	} {
		got, ok := csiclient.EndpointPath(in)
		if got != want || ok != (want != "") {
			t.Errorf("EndpointPath(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
