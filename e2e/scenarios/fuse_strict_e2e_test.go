//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// lostFUSEMountStrictTeardown: a driver whose NodeUnpublishVolume is not idempotent (the test
// plugin's strict layout, as k8s-csi-s3: a plain umount of the target, codes.Internal on EINVAL
// when nothing is mounted there). The plugin goes down (its s3fs die with its pod; the agent
// bridges the live pod at once, s3.driverDownBridgeAfter 0), the app pod is deleted with the
// plugin down, and the plugin stays down until the agent has made two S3 passes over the gone
// pod's target (counted by its pass histogram, after no container of the pod runs). The agent must leave the target's last mount for the driver: the target holds
// the mounts it held at the deletion (unique mount IDs) while the plugin is down. The plugin
// comes back → kubelet's retried NodeUnpublishVolume succeeds, the pod is gone within 60 s, nothing
// is left on the node nor in the plugin's container, and the new plugin logged no failed
// unpublish.
func lostFUSEMountStrictTeardown(t *testing.T, e *env) {
	ctx := context.Background()
	l := &fieldLayout{
		name: "strict", driver: "ru.yandex.s3.csi", layout: csitest.LayoutStrict,
		ns: "e2e-fuse-strict", pv: "e2e-fuse-strict-pv", handle: s3Bucket + "/strict",
		attrs: map[string]string{"mounter": "s3fs"},
		files: map[string]string{"strict/app.txt": "strict app data\n"},
		want:  "strict app data\n", dataDir: "strict/", src: s3Bucket + ":/strict",
	}
	pod := fusePodSetup(t, e, l)
	uid := string(pod.UID)
	target := podTarget(e, uid, l.pv)
	before := mountsAt(target)
	if len(before) != 1 || !isFUSE(before[0].FSType) {
		t.Fatalf("before the failure: want the driver's one FUSE mount at %s, got %s", target, describeStack(before))
	}
	driverMount, driverID := before[0], mustStackIdentity(t, target)
	driverS3fs := pluginS3fs(l.plugin)
	if len(driverS3fs) != 1 {
		t.Fatalf("before the failure: the plugin runs s3fs %v, want exactly one", driverS3fs)
	}
	agent, helpBefore := teardownHelp(t, e)

	if err := l.plugin.Stop(ctx); err != nil {
		t.Fatalf("stop the plugin's DaemonSet: %v", err)
	}
	// A failure while the plugin is down must not leave the pod's teardown without its driver.
	t.Cleanup(func() { _ = l.plugin.Start(context.Background()) })
	// Evidence of the death: the driver's s3fs process is gone (not a failed stat, which the
	// agent may have undone already).
	waitFor(t, 30*time.Second, "the driver's s3fs to exit with its plugin pod", func() (bool, string) {
		if pidRuns(driverS3fs[0]) {
			return false, fmt.Sprintf("pid %d still runs", driverS3fs[0])
		}
		return true, ""
	})
	// The agent may bridge the live pod at once (s3.driverDownBridgeAfter 0): what stands at the
	// target when the pod is deleted is then its bridge, else the driver's dead mount. Either is
	// the last mount the driver's unpublish will take; the deletion waits until the agent is done
	// (the target answers through a bridge, or 10 s without one), so that the stack it leaves is
	// the one compared below.
	settled := pollEvery(250*time.Millisecond, 10*time.Second, func() bool { return onOurMount(target, l.pv) && hostReads(filepath.Join(target, "app.txt"), l.want) })
	atDel := mustStackIdentity(t, target)
	topAtDel := describeStack(mountsAt(target))
	tDel := time.Now()
	if err := e.c.Client.CoreV1().Pods(l.ns).Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s/app: %v", l.ns, err)
	}
	t.Logf("plugin %s (layout strict) down, its s3fs %v gone; pod %s/app (uid %s) deleted; the target then held %s (bridged by the agent: %v)", l.driver, driverS3fs, l.ns, uid, topAtDel, settled)

	// The plugin stays down: kubelet's NodeUnpublishVolume fails (driver not registered) and is
	// retried; the agent, which takes the pod for gone once no container of it runs, must leave
	// the mount kubelet's unpublish will need over two of its S3 passes after that (one began
	// after the pod was gone to it).
	waitGoneToAgent(t, e, l.ns, "app", uid, time.Minute)
	looked := waitS3Passes(t, e, 2, 3*time.Minute)
	downFor := time.Since(tDel).Round(100 * time.Millisecond)
	down := mountsAt(target)
	if len(down) == 0 {
		t.Errorf("%s after the deletion with the plugin down (two S3 passes over the gone pod in %s), the target %s is no mount point any more: the driver's plain-umount NodeUnpublish will fail with EINVAL for ever",
			downFor, looked.Round(100*time.Millisecond), target)
	}
	// Asserted, not only logged: the gone pod's target holds exactly the mounts it held at the
	// deletion (unique mount IDs) — the driver's own when the agent had not bridged, else its
	// bridge — left for the driver's unpublish.
	if now, err := stackIdentity(target); now != atDel {
		t.Errorf("the agent changed the gone pod's target while the plugin was down: %s %s at the deletion → %s %s (%v)", atDel, topAtDel, now, describeStack(down), err)
	}
	kept := !settled && atDel == driverID
	if !settled && !kept {
		t.Errorf("the agent did not bridge, yet the driver's own mount %d is not what stands at the target: %s", driverMount.ID, describeStack(down))
	}
	t.Logf("with the plugin down %s after the deletion: target %s (the driver's own mount %d still there: %v; the agent's bridge of the live pod: %v)",
		time.Since(tDel).Round(100*time.Millisecond), describeStack(down), driverMount.ID, kept, settled)

	t1 := time.Now()
	if err := l.plugin.Start(ctx); err != nil {
		t.Fatalf("bring the plugin's pod back: %v", err)
	}
	back := time.Since(t1).Round(100 * time.Millisecond)
	waitFor(t, 60*time.Second, fmt.Sprintf("pod %s/app (uid %s) to be gone once the plugin is back", l.ns, uid), func() (bool, string) {
		got, err := e.c.Client.CoreV1().Pods(l.ns).Get(ctx, "app", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && string(got.UID) != uid) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, framework.DescribePod(e.c.Client, got) + "\nmounts of the pod: " + strings.Join(mountsUnder(uid), "; ")
	})
	gone := time.Since(t1).Round(100 * time.Millisecond)
	checkPodLeftNothing(t, e, l.ns+"/app", uid)
	checkNothingLeft(t, e, l.pv, l.src)
	checkPluginMounts(t, e, l.plugin, "after the pod is gone")
	logCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if log := l.plugin.Log(logCtx); strings.Contains(log, "unpublish failed") {
		t.Errorf("the strict plugin's NodeUnpublishVolume failed after it came back (kubelet retries it for ever):\n%s", log)
	}
	agentAfter, helpAfter := teardownHelp(t, e)
	if kept {
		// Nothing of ours was at the target: the agent had nothing to remove, nor to finish.
		checkNoTeardownHelp(t, agent, agentAfter, helpBefore, helpAfter, "the strict pod's deletion")
	}
	held := "the driver's dead mount"
	if settled {
		held = "the agent's bridge of the live pod"
	}
	t.Logf("RESULT strict: pod deleted with the plugin down (its target holding %s, unchanged %s later, over two S3 passes of the agent after the pod was gone to it); plugin back (registered after %s) → pod gone %s later, nothing left; teardown help %v → %v",
		held, downFor, back, gone, helpBefore, helpAfter)
}

// pidRuns reports whether pid runs (a zombie does not).
func pidRuns(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}
