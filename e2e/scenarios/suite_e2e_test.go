//go:build e2e

// Package scenarios runs pvrescue's end-to-end scenarios on one real single-node cluster:
// lost local disk, lost FUSE mount, pods left alone, webhook down.
package scenarios

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// env is what every scenario shares.
type env struct {
	c   *cluster.Cluster
	s3  *stack.S3
	csi *stack.CSI
	in  *stack.Installed
}

// TestPVRescue brings the cluster up once, installs pvrescue from manifests/, and runs the
// scenarios in order (the API server outage next to last; the webhook-down scenario last: it
// removes the webhook's pods).
//
// The lost-local-disk scenarios run beside LostFUSEMountMounters (t.Run from two goroutines, so
// each keeps its name for -run): they share no plugin, device, namespace or PV — loop devices and
// local PVs on one side, the mounters' own test plugin, namespaces and S3 prefixes on the other —
// and no check of either reads what the other changes (loop devices, S3 series, Events of other
// namespaces). That takes their ~50 s off the suite's time.
func TestPVRescue(t *testing.T) {
	e := newEnv(t, "suite", true)

	var localDisk sync.WaitGroup
	localDisk.Go(func() {
		t.Run("LostLocalDisk", func(t *testing.T) { lostLocalDisk(t, e) })
		t.Run("LostLocalDiskProvisionerLayout", func(t *testing.T) { lostLocalDiskProvisionerLayout(t, e) })
		t.Run("LostLocalDiskEphemeral", func(t *testing.T) { lostLocalDiskEphemeral(t, e) })
	})
	t.Run("LostFUSEMountMounters", func(t *testing.T) { lostFUSEMountMounters(t, e) })
	localDisk.Wait()
	t.Run("ForeignClaims", func(t *testing.T) { foreignClaims(t, e) })
	t.Run("LostFUSEMount", func(t *testing.T) { lostFUSEMount(t, e) })
	t.Run("LostFUSEMountLayouts", func(t *testing.T) { lostFUSEMountLayouts(t, e) })
	t.Run("LostFUSEMountBridge", func(t *testing.T) { lostFUSEMountBridge(t, e) })
	t.Run("LostFUSEMountKilled10", func(t *testing.T) { lostFUSEMountKilled10(t, e) })
	t.Run("LostFUSEMountStrictTeardown", func(t *testing.T) { lostFUSEMountStrictTeardown(t, e) })
	t.Run("LostFUSEMountHung", func(t *testing.T) { lostFUSEMountHung(t, e) })
	t.Run("LostFUSEMountOpenFile", func(t *testing.T) { lostFUSEMountOpenFile(t, e) })
	t.Run("BusyBridge", func(t *testing.T) { busyBridge(t, e) })
	t.Run("HostileTenant", func(t *testing.T) { hostileTenant(t, e) })
	t.Run("HostileTenantRacing", func(t *testing.T) { hostileTenantRacing(t, e) })
	t.Run("HostileTenantNestedUserNS", func(t *testing.T) { hostileTenantNestedUserNS(t, e) })
	t.Run("HostileTenantImpostorFUSE", func(t *testing.T) { hostileTenantImpostorFUSE(t, e) })
	t.Run("LeftAlone", func(t *testing.T) { leftAlone(t, e) })
	t.Run("APIServerAway", func(t *testing.T) { apiServerAway(t, e) })
	t.Run("WebhookDown", func(t *testing.T) { webhookDown(t, e) })
}

// newEnv brings a cluster up (named for its work dir), starts the S3 server, deploys the test CSI
// plugin as a DaemonSet and installs pvrescue from manifests/ (with cert-manager's controllers
// when certManager is set; else package certs makes the webhook's certificate).
func newEnv(t testing.TB, name string, certManager bool) *env {
	start := time.Now()
	c := framework.Up(t, name)
	// Lives as long as the test: what starts under it (S3 server, cert-manager) may be tied to it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	t.Cleanup(cancel)
	e := &env{c: c}
	var err error
	vgw := testenv.Binary(t, "versitygw", "versitygw")
	if e.s3, err = stack.StartS3(ctx, c, vgw); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	if e.csi, err = stack.BuildCSI(ctx, c, filepath.Join(testenv.RepoRoot(), "e2e")); err != nil {
		t.Fatalf("build the test CSI plugin: %v", err)
	}
	if err := e.csi.Start(ctx); err != nil {
		t.Fatalf("deploy the test CSI plugin (DaemonSet %s/%s): %v", stack.CSINamespace, e.csi.Name(), err)
	}
	installStart := time.Now()
	e.in, err = stack.Install(ctx, c, testenv.RepoRoot(), stack.InstallOptions{CertManager: certManager, E2EDir: filepath.Join(testenv.RepoRoot(), "e2e")})
	if e.in != nil && e.in.CertManager != nil {
		t.Cleanup(e.in.CertManager.Stop)
	}
	if err != nil {
		t.Fatalf("install pvrescue from manifests/: %v", err)
	}
	t.Logf("pvrescue installed in %s; deviations from `kubectl apply -k manifests/`:", time.Since(installStart).Round(100*time.Millisecond))
	for _, d := range e.in.Deviations {
		t.Logf("  - %s", d)
	}
	t.Logf("setup done in %s", time.Since(start).Round(100*time.Millisecond))
	return e
}
