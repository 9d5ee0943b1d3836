//go:build linux

package csitest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The registrar asks the plugin for its name over the plugin's socket and answers kubelet's
// GetInfo with that name and the node's path of the socket.
func TestRegistrarRegistersThePlugin(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o := NewOptions()
	o.Driver, o.NodeID, o.Layout = "ru.yandex.s3.csi", "node-1", LayoutYandex
	o.Socket, o.StateDir = "unix://"+filepath.Join(dir, "csi.sock"), filepath.Join(dir, "state")
	pluginDone := make(chan error, 1)
	go func() { pluginDone <- Run(ctx, o) }()
	ro := NewRegistrarOptions()
	ro.CSIAddress, ro.RegistrationDir = filepath.Join(dir, "csi.sock"), dir
	ro.KubeletRegistrationPath = "/var/lib/kubelet/plugins/ru.yandex.s3.csi/csi.sock"
	regCtx, regCancel := context.WithCancel(ctx)
	regDone := make(chan error, 1)
	go func() { regDone <- RunRegistrar(regCtx, ro) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, RegistrationSocketName(o.Driver)), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }() // test connection
	var info *registerapi.PluginInfo
	for info == nil {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		info, err = registerapi.NewRegistrationClient(conn).GetInfo(cctx, &registerapi.InfoRequest{})
		ccancel()
		if ctx.Err() != nil {
			t.Fatalf("GetInfo on the registration socket: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if info.Name != o.Driver || info.Endpoint != ro.KubeletRegistrationPath || info.Type != registerapi.CSIPlugin {
		t.Errorf("GetInfo = %+v, want name %s, endpoint %s, type CSIPlugin", info, o.Driver, ro.KubeletRegistrationPath)
	}
	regCancel()
	if err := <-regDone; err != nil {
		t.Errorf("registrar: %v", err)
	}
	cancel()
	if err := <-pluginDone; err != nil {
		t.Errorf("plugin: %v", err)
	}
}
