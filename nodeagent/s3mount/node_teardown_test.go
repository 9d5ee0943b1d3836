//go:build node

package s3mount_test

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Teardown never worse than without us, with a driver whose NodeUnpublishVolume is k8s-csi-s3's
// (the test plugin's strict layout: a plain umount of the target, Internal on EINVAL). Two pods of
// one PV, published by the real plugin; the plugin goes down and its s3fs die; the pods are
// deleted. Target A holds the driver's dead mount only (the case of issue 33); target B holds a
// bind of ours on top of it (our fsname, as an earlier agent's stacked bridge bind). The agent
// removes our bind from B and nothing else: both driver mounts stay, so when the plugin is back
// its plain umount succeeds at both targets and leaves nothing.
func TestNodeStrictTeardownLeavesTheDriversMounts(t *testing.T) {
	e := newNodeEnv(t)
	socket := csiclient.PluginSocket(e.kubelet, driver)
	opts := csitest.Options{Socket: socket, StateDir: filepath.Join(e.dir, "plugin"), Layout: csitest.LayoutStrict}
	plugin, err := csitest.Start(opts)
	must(t, err)
	t.Cleanup(func() { plugin.KillMounts(); plugin.Stop() })
	e.volume("pv-s", nil, false)
	podA, podB := e.pod("app-a", "pv-s"), e.pod("app-b", "pv-s")
	targetA := e.publishViaPlugin(string(podA.UID), "pv-s")
	targetB := e.publishViaPlugin(string(podB.UID), "pv-s")

	// The plugin goes down; its s3fs die with it.
	plugin.KillMounts()
	plugin.Stop()
	for _, target := range []string{targetA, targetB} {
		waitFor(t, 5*time.Second, "driver mount dead at "+target, func() bool {
			var st unix.Statfs_t
			return errors.Is(unix.Statfs(target, &st), syscall.ENOTCONN)
		})
	}
	// An earlier agent's bind of ours stacked on B (our fsname is what makes a mount ours).
	must(t, unix.Mount(stack.FSName("pv-s"), targetB, "tmpfs", 0, "size=1m"))
	driverMount := map[string]stack.Mount{}
	for _, target := range []string{targetA, targetB} {
		st := stackAt(target)
		if len(st) == 0 || st[0].FSType != "fuse.s3fs" || st[0].Source != "s3fs" {
			t.Fatalf("%s: want the driver's s3fs mount at the bottom, got %+v", target, st)
		}
		driverMount[target] = st[0]
	}
	for _, p := range []string{podA.Name, podB.Name} {
		must(t, e.client.CoreV1().Pods(ns).Delete(context.Background(), p, *metav1.NewDeleteOptions(0)))
	}

	r, stop := e.agent(30 * time.Second)
	emptied := r.Metrics().TeardownHelp.WithLabelValues(s3mount.TeardownEmptied)
	waitFor(t, 10*time.Second, "the agent removes its own bind from B", func() bool { return counterValue(t, emptied) >= 1 })
	time.Sleep(time.Second) // five more passes (check interval 200 ms): nothing more may go
	stop()
	for _, target := range []string{targetA, targetB} {
		// Nothing of the agent's can be a fuse.s3fs mount of source "s3fs" here: its bridge
		// mounts as pvrescue-s3:<pv>, and a replay needs the plugin, which is down. So this is
		// the driver's own dead mount, the one mounted before (same mount ID).
		st := stackAt(target)
		if len(st) != 1 || st[0].ID != driverMount[target].ID || st[0].FSType != "fuse.s3fs" || st[0].Source != "s3fs" {
			t.Errorf("%s after the agent's teardown help: %+v, want exactly the driver's dead mount %d", target, st, driverMount[target].ID)
		}
	}
	if got := counterValue(t, emptied); got != 1 {
		t.Errorf("teardown_help_total{emptied} = %v, want 1 (our bind at B)", got)
	}
	if got := counterValue(t, r.Metrics().TeardownHelp.WithLabelValues(s3mount.TeardownFinished)); got != 0 {
		t.Errorf("teardown_help_total{finished} = %v, want 0 (kubelet's teardown is still to come)", got)
	}

	// The plugin is back; kubelet's NodeUnpublishVolume (plain umount) succeeds at both targets.
	plugin, err = csitest.Start(opts)
	must(t, err)
	t.Cleanup(plugin.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, target := range []string{targetA, targetB} {
		if err := unpublish(ctx, socket, target); err != nil {
			t.Errorf("the strict driver's NodeUnpublishVolume at %s: %v (kubelet would retry it for ever)", target, err)
		}
		if st := stackAt(target); len(st) != 0 {
			t.Errorf("%s holds %d mounts after the driver's unpublish: %+v", target, len(st), st)
		}
	}
}
