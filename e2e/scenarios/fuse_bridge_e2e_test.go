//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// fusePodSetup makes the layout's objects and a pod "app" (createAppPod), and waits until both
// containers read.
func fusePodSetup(t testing.TB, e *env, l *fieldLayout) *corev1.Pod {
	t.Helper()
	createAppPod(t, e, l)
	p := framework.WaitPod(t, e.c.Client, l.ns, "app", 2*time.Minute, "Running", framework.Running)
	waitReads(t, e, time.Now(), 30*time.Second, "before the failure", l.readers("app")...)
	return p
}

// lostFUSEMountBridge: the plugin stays down → after s3.bridgeAfter the agent bridges with its own
// s3fs (ctrox layout: bucket:/<prefix>/csi-fs, the app reads its own file); the plugin comes
// back → the volume moves to the driver's mount and our s3fs is gone, depth ≤ 2.
func lostFUSEMountBridge(t *testing.T, e *env) {
	ctx := context.Background()
	l := &fieldLayout{
		name: "bridge", driver: "ch.ctrox.csi.s3-driver", layout: csitest.LayoutCtrox,
		ns: "e2e-fuse-bridge", pv: "e2e-fuse-bridge-pv", handle: s3Bucket + "/bridge",
		attrs: map[string]string{"bucket": s3Bucket, "prefix": "bridge", "mounter": "s3fs"},
		files: map[string]string{
			"bridge/csi-fs/app.txt": "bridged app data\n",
			"bridge/app.txt":        "DECOY: the prefix level, one above csi-fs\n",
		},
		want: "bridged app data\n", dataDir: "bridge/csi-fs/", src: s3Bucket + ":/bridge/csi-fs",
	}
	pod := fusePodSetup(t, e, l)
	restarts := map[string]map[string]int32{"app": restartCounts(pod)}
	target := podTarget(e, string(pod.UID), l.pv)
	bridgeAfter := config.Default().S3.BridgeAfter.Duration

	t0 := time.Now()
	if err := l.plugin.Stop(ctx); err != nil {
		t.Fatalf("stop the plugin's DaemonSet: %v", err)
	}
	// A failure while the plugin is down must not leave the pod's teardown without its driver.
	t.Cleanup(func() { _ = l.plugin.Start(context.Background()) })
	t.Logf("plugin %s pod deleted and kept down; the agent should bridge after %s", l.driver, bridgeAfter)
	const whileDown = "put on the S3 server's side while the plugin was down\n"
	putInBucket(t, e, l.dataDir+"while-down.txt", whileDown)
	at := rescueReads(t, e, t0, bridgeAfter+90*time.Second, "through the agent's bridge while the plugin is down", nil,
		append(l.readers("app"), reader{l.ns, "app", "app", "/data/while-down.txt", whileDown})...)
	checkKubeletMounts(t, e, "while bridged")
	writeReachesBucket(t, e, l.ns, "app", "app", "/data/bridged-write.txt", l.dataDir+"bridged-write.txt", "while bridged")
	ours := ourS3fs(l.pv)
	down := mountsAt(target)
	if len(ours) == 0 {
		t.Errorf("the app reads again with the plugin down, but no s3fs of the agent (fsname %s) runs", ourFSName(l.pv))
	}
	if len(down) == 0 || down[len(down)-1].Source != ourFSName(l.pv) {
		t.Errorf("top mount at the target is not the agent's bridge: %s", describeStack(down))
	}
	if len(down) > 2 {
		t.Errorf("depth %d at the target while bridged: %s", len(down), describeStack(down))
	}
	checkRestarts(t, e, l.ns, restarts)
	t.Logf("RESULT bridge: plugin down → app reads through the bridge after %s, pinned (None) %s (bridgeAfter %s); agent s3fs pids %v; depth %d %s",
		at[l.ns+"/app/app"], at[l.ns+"/app/pinned"], bridgeAfter, ours, len(down), describeStack(down))

	// The bridge outlives the agent: its pod deleted, then the DaemonSet rolled, while the app
	// reads through the bridge (plugin still down) → no failed read, no restart, still exactly one
	// s3fs of ours (the new agent adopts it, starts no second one), depth ≤ 2.
	t.Run("AgentRestartWhileBridged", func(t *testing.T) {
		agentRestarts(t, e, func(t *testing.T) any {
			rc := checkRestarts(t, e, l.ns, restarts)
			ours, st := ourS3fs(l.pv), mountsAt(target)
			if len(ours) != 1 || !onOurMount(target, l.pv) || len(st) > 2 {
				t.Errorf("after the agent restart: want exactly one s3fs of ours serving the top of the target, depth ≤ 2; agent s3fs %v, target %s", ours, describeStack(st))
			}
			return fmt.Sprintf("restarts %v, agent s3fs %v, depth %d %s", rc, ours, len(st), describeStack(st))
		}, l.readers("app")...)
	})

	t1 := time.Now()
	if err := l.plugin.Start(ctx); err != nil {
		t.Fatalf("bring the plugin's pod back: %v", err)
	}
	// Retiring the bridge detaches it lazily and never signals its s3fs: it exits once nothing
	// uses it any more; here once the pod's binds go (the bridge binds stay covered by the
	// driver's mount while the pod runs), checked after the pod's deletion below.
	waitHandedBack(t, target, l.pv, l.plugin)
	back := time.Since(t1).Round(100 * time.Millisecond)
	const afterBack = "put on the S3 server's side after the hand-back\n"
	putInBucket(t, e, l.dataDir+"after-back.txt", afterBack)
	after := rescueReads(t, e, t1, 30*time.Second, "on the driver's mount again", []*stack.CSI{l.plugin},
		append(l.readers("app"), reader{l.ns, "app", "app", "/data/after-back.txt", afterBack})...)
	checkTopFUSE(t, target, "after the hand-back")
	checkKubeletMounts(t, e, "after the hand-back")
	checkPluginMounts(t, e, l.plugin, "after the hand-back")
	writeReachesBucket(t, e, l.ns, "app", "app", "/data/after-back-write.txt", l.dataDir+"after-back-write.txt", "after the hand-back")
	st := mountsAt(target)
	if len(st) > 2 {
		t.Errorf("depth %d at the target after the hand-back: %s", len(st), describeStack(st))
	}
	final := checkRestarts(t, e, l.ns, restarts)
	t.Logf("RESULT bridge retired: plugin back → volume on the driver's mount after %s (app reads %s, pinned %s); plugin s3fs pids %v; depth %d %s; restarts %v → %v",
		back, after[l.ns+"/app/app"], after[l.ns+"/app/pinned"], pluginS3fs(l.plugin), len(st), describeStack(st), restarts, final)

	// Handed back, the target holds the driver's mount alone: the driver's top-only
	// NodeUnpublish leaves nothing and kubelet's teardown completes without the agent's help.
	agent, helpBefore := teardownHelp(t, e)
	gone := deletePodGone(t, e, l.ns, "app", 30*time.Second)
	waitBridgeExited(t, l.pv)
	checkNothingLeft(t, e, l.pv, l.src)
	checkPluginMounts(t, e, l.plugin, "after the pod is gone")
	agentAfter, helpAfter := teardownHelp(t, e)
	checkNoTeardownHelp(t, agent, agentAfter, helpBefore, helpAfter, "the handed-back pod's deletion")
	t.Logf("RESULT bridge: pod deleted and gone in %s, nothing left, without the agent's teardown help (pvrescue_s3_teardown_help_total %v → %v)", gone, helpBefore, helpAfter)
}
