//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// mounterVol is one volume of k8s-csi-s3's driver (ru.yandex.s3.csi) naming a FUSE program other
// than s3fs in its "mounter" attribute. The test plugin serves it with s3fs under that program's
// mount type (-o subtype=<mounter>), so the node and the agent see fuse.geesefs / fuse.rclone as
// with the real driver.
type mounterVol struct {
	mounter, ns, pv, prefix string
	uid, target             string
	restarts                map[string]map[string]int32
}

func (v *mounterVol) fsType() string { return "fuse." + v.mounter }
func (v *mounterVol) src() string    { return s3Bucket + ":/" + v.prefix }
func (v *mounterVol) readers(pod, path, want string) []reader {
	return []reader{{v.ns, pod, "app", path, want}, {v.ns, pod, "pinned", path, want}}
}

// lostFUSEMountMounters: geesefs (k8s-csi-s3's default) and rclone volumes, both on one instance
// of the test plugin in k8s-csi-s3's strict layout (its NodeUnpublish a plain umount):
//
//  1. the plugin kept down past the liveness probe's patience → the agent bridges both with its
//     own s3fs (the driver's s3fs gone, the target's top mount the agent's); 0 restarts;
//  2. the plugin back → each volume handed back to the driver's own mount of its program's type;
//  3. plugin down again, both pods deleted while their mounts are dead, plugin back → each pod gone
//     within 60 s, nothing left on the node nor in the plugin's container;
//  4. the geesefs PV deleted and recreated under the same name with other attributes (another
//     prefix, mounter rclone), a new pod, a loss (plugin restart) → the agent's replay passes the
//     new attributes: its Event names the new handle, PV uid and mounter, the driver's new mount
//     is fuse.rclone and the app reads the new prefix's file.
//
// Cluster time ≈ 2.5 min: one plugin deployment and one down phase serve both mounters.
func lostFUSEMountMounters(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	const driver = "ru.yandex.s3.csi"
	plugin := sibling(t, e, driver, csitest.LayoutStrict)
	vols := []*mounterVol{
		{mounter: "geesefs", ns: "e2e-fuse-geesefs", pv: "e2e-fuse-geesefs-pv", prefix: "mgeese"},
		{mounter: "rclone", ns: "e2e-fuse-rclone", pv: "e2e-fuse-rclone-pv", prefix: "mrclone"},
	}
	dir, err := e.s3.Bucket(s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		putInBucket(t, e, v.prefix+"/app.txt", v.mounter+" app data\n")
		t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(dir, v.prefix)) })
		fuseNamespace(t, e, v.ns, true)
		s3Volume(t, e, s3Vol{ns: v.ns, pv: v.pv, driver: driver, handle: s3Bucket + "/" + v.prefix, attrs: map[string]string{"mounter": v.mounter}})
		deletePVAtCleanup(t, e, v.pv)
		logAgentOnFailure(t, e, v.pv, driver)
		appPod(t, e, v.ns)
	}
	for _, v := range vols {
		p := framework.WaitPod(t, cs, v.ns, "app", 2*time.Minute, "Running", framework.Running)
		waitReads(t, e, time.Now(), 30*time.Second, "before the failure", v.readers("app", "/data/app.txt", v.mounter+" app data\n")...)
		v.uid, v.target = string(p.UID), podTarget(e, string(p.UID), v.pv)
		v.restarts = map[string]map[string]int32{"app": restartCounts(p)}
		st := mountsAt(v.target)
		if len(st) != 1 || st[0].FSType != v.fsType() {
			t.Fatalf("%s: before the failure want the driver's one %s mount at %s, got %s", v.mounter, v.fsType(), v.target, describeStack(st))
		}
	}

	// 1. Plugin kept down past the probe's patience → bridged, 0 restarts.
	driverS3fs := pluginS3fs(plugin)
	if len(driverS3fs) != len(vols) {
		t.Fatalf("before the failure: the plugin runs s3fs %v, want %d", driverS3fs, len(vols))
	}
	// Unique mount IDs: mountinfo's IDs are handed out again once freed.
	deadStacks := map[string]string{}
	for _, v := range vols {
		deadStacks[v.mounter] = mustStackIdentity(t, v.target)
	}
	t0 := time.Now()
	if err := plugin.Stop(ctx); err != nil {
		t.Fatalf("stop the plugin's DaemonSet: %v", err)
	}
	t.Cleanup(func() { _ = plugin.Start(context.Background()) })
	waitPidsGone(t, driverS3fs, "the driver's s3fs to exit with its plugin pod")
	var all []reader
	for _, v := range vols {
		want := "put on the S3 server's side for " + v.mounter + " while the plugin was down\n"
		putInBucket(t, e, v.prefix+"/while-down.txt", want)
		all = append(all, v.readers("app", "/data/while-down.txt", want)...)
	}
	bridgeAfter := config.Default().S3.BridgeAfter.Duration
	at := rescueReads(t, e, t0, bridgeAfter+90*time.Second, "through the agent's bridges while the plugin is down", nil, all...)
	for _, v := range vols {
		st := mountsAt(v.target)
		top := st[len(st)-1]
		// Evidence of the rescue that survives a faster agent: the driver's s3fs is gone (above),
		// the target's top is another mount (a new ID) of the agent's own filesystem, served by an
		// s3fs of the agent's, and the agent recorded it (its Event).
		if top.Source != ourFSName(v.pv) || mustStackIdentity(t, v.target) == deadStacks[v.mounter] {
			t.Errorf("%s: the target's top is not the agent's bridge: %s", v.mounter, describeStack(st))
		}
		if ours := ourS3fs(v.pv); len(ours) != 1 {
			t.Errorf("%s: agent s3fs for %s: %v, want exactly one", v.mounter, v.pv, ours)
		}
		waitFor(t, 30*time.Second, v.mounter+": the agent's "+contract.ReasonMountBridged+" Event", func() (bool, string) {
			return len(events(t, e, v.ns, contract.ReasonMountBridged)) > 0, fmt.Sprintf("events %v", events(t, e, v.ns, ""))
		})
		writeReachesBucket(t, e, v.ns, "app", "app", "/data/bridged-write.txt", v.prefix+"/bridged-write.txt", v.mounter+" while bridged")
	}
	// Past the probe's patience (period × failureThreshold + timeout) with the plugin still down.
	probe := config.Default().S3.Probe
	patience := time.Duration(probe.PeriodSeconds*probe.FailureThreshold+probe.TimeoutSeconds) * time.Second
	if wait := patience + 5*time.Second - time.Since(t0); wait > 0 {
		time.Sleep(wait)
	}
	for _, v := range vols {
		checkRestarts(t, e, v.ns, v.restarts)
		t.Logf("RESULT %s: plugin down → bridged, app reads after %s, pinned (None) %s; still 0 restarts %s after the stop (probe patience %s); target %s",
			v.mounter, at[v.ns+"/app/app"], at[v.ns+"/app/pinned"], time.Since(t0).Round(100*time.Millisecond), patience, describeStack(mountsAt(v.target)))
	}

	// 2. Plugin back → hand-back to the driver's mount of the program's type.
	t1 := time.Now()
	if err := plugin.Start(ctx); err != nil {
		t.Fatalf("bring the plugin's pod back: %v", err)
	}
	for _, v := range vols {
		waitHandedBack(t, v.target, v.pv, plugin)
	}
	handedBack := time.Now()
	back := time.Since(t1).Round(100 * time.Millisecond)
	all = all[:0]
	for _, v := range vols {
		want := "put on the S3 server's side for " + v.mounter + " after the hand-back\n"
		putInBucket(t, e, v.prefix+"/after-back.txt", want)
		all = append(all, v.readers("app", "/data/after-back.txt", want)...)
	}
	rescueReads(t, e, t1, 30*time.Second, "on the driver's mounts again", []*stack.CSI{plugin}, all...)
	// Two more S3 passes of the agent end (one began after the hand-back was seen), and the
	// Events they recorded are sent (eventSendSlack): a refusal of the driver's mount would be
	// in the API by then.
	looked := waitS3Passes(t, e, 2, 3*time.Minute)
	time.Sleep(eventSendSlack)
	t.Logf("two S3 passes of the agent %s after the hand-back (%s)", time.Since(handedBack).Round(100*time.Millisecond), looked.Round(100*time.Millisecond))
	for _, v := range vols {
		st := mountsAt(v.target)
		if top := st[len(st)-1]; top.FSType != v.fsType() || top.Source == ourFSName(v.pv) {
			t.Errorf("%s: after the hand-back the target's top is %s %s, want the driver's own %s mount; stack %s", v.mounter, top.FSType, top.Source, v.fsType(), describeStack(st))
		}
		if evs := events(t, e, v.ns, contract.ReasonReplayResultWrongFilesystem); len(evs) > 0 {
			t.Errorf("%s: the driver's mount was refused: %v", v.mounter, evs)
		}
		checkRestarts(t, e, v.ns, v.restarts)
		t.Logf("RESULT %s: plugin back → handed back to the driver's %s mount within %s; target %s", v.mounter, v.fsType(), back, describeStack(st))
	}
	checkPluginMounts(t, e, plugin, "after the hand-back")

	// 3. Pods deleted while their mounts are dead and the plugin down; plugin back → gone ≤ 60 s.
	driverS3fs = pluginS3fs(plugin)
	if err := plugin.Stop(ctx); err != nil {
		t.Fatalf("stop the plugin's DaemonSet again: %v", err)
	}
	waitPidsGone(t, driverS3fs, "the driver's s3fs to exit with its plugin pod (second stop)")
	for _, v := range vols {
		if err := cs.CoreV1().Pods(v.ns).Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete pod %s/app: %v", v.ns, err)
		}
	}
	// kubelet's unpublish fails meanwhile; the agent must leave the driver's mounts over two of
	// its S3 passes after the pods were gone to it (no container running).
	tDel := time.Now()
	for _, v := range vols {
		waitGoneToAgent(t, e, v.ns, "app", v.uid, time.Minute)
	}
	looked = waitS3Passes(t, e, 2, 3*time.Minute)
	for _, v := range vols {
		if len(mountsAt(v.target)) == 0 {
			t.Errorf("%s: %s after the deletion with the plugin down (two S3 passes over the gone pods in %s), the target is no mount point: the driver's plain-umount NodeUnpublish will fail for ever",
				v.mounter, time.Since(tDel).Round(100*time.Millisecond), looked.Round(100*time.Millisecond))
		}
	}
	t2 := time.Now()
	if err := plugin.Start(ctx); err != nil {
		t.Fatalf("bring the plugin's pod back: %v", err)
	}
	for _, v := range vols {
		waitFor(t, 60*time.Second-time.Since(t2), fmt.Sprintf("pod %s/app (uid %s) to be gone once the plugin is back", v.ns, v.uid), func() (bool, string) {
			got, err := cs.CoreV1().Pods(v.ns).Get(ctx, "app", metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && string(got.UID) != v.uid) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, framework.DescribePod(cs, got) + "\nmounts of the pod: " + strings.Join(mountsUnder(v.uid), "; ")
		})
	}
	gone := time.Since(t2).Round(100 * time.Millisecond)
	for _, v := range vols {
		checkPodLeftNothing(t, e, v.ns+"/app", v.uid)
		checkNothingLeft(t, e, v.pv, v.src())
	}
	checkPluginMounts(t, e, plugin, "after the pods are gone")
	logCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if log := plugin.Log(logCtx); strings.Contains(log, "unpublish failed") {
		t.Errorf("the strict plugin's NodeUnpublishVolume failed after it came back:\n%s", log)
	}
	t.Logf("RESULT geesefs+rclone: pods deleted with their mounts dead and the plugin down; plugin back → both gone within %s, nothing left", gone)

	// 4. The geesefs PV recreated under its name with other attributes; a loss replays the new ones.
	g := vols[0]
	if err := cs.CoreV1().PersistentVolumeClaims(g.ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete PVC %s/data: %v", g.ns, err)
	}
	old, err := cs.CoreV1().PersistentVolumes().Get(ctx, g.pv, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get PV %s: %v", g.pv, err)
	}
	if err := cs.CoreV1().PersistentVolumes().Delete(ctx, g.pv, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete PV %s: %v", g.pv, err)
	}
	waitFor(t, time.Minute, "PV "+g.pv+" to be gone", func() (bool, string) {
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, g.pv, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && pv.UID != old.UID) {
			return true, ""
		}
		return false, fmt.Sprint(err)
	})
	id := &mounterVol{mounter: "rclone", ns: "e2e-fuse-recreated", pv: g.pv, prefix: "mrecreated"}
	putInBucket(t, e, g.prefix+"/app.txt", "DECOY: the deleted PV's prefix\n")
	putInBucket(t, e, id.prefix+"/app.txt", "recreated PV data\n")
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(dir, id.prefix)) })
	fuseNamespace(t, e, id.ns, true)
	s3Volume(t, e, s3Vol{ns: id.ns, pv: id.pv, driver: driver, handle: s3Bucket + "/" + id.prefix, attrs: map[string]string{"mounter": id.mounter}})
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, id.pv, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the recreated PV %s: %v", id.pv, err)
	}
	appPod(t, e, id.ns)
	p := framework.WaitPod(t, cs, id.ns, "app", 2*time.Minute, "Running", framework.Running)
	id.uid, id.target = string(p.UID), podTarget(e, string(p.UID), id.pv)
	waitReads(t, e, time.Now(), 30*time.Second, "on the recreated PV", id.readers("app", "/data/app.txt", "recreated PV data\n")...)
	before := mountsAt(id.target)
	beforeStack := mustStackIdentity(t, id.target)
	t3 := time.Now()
	if _, err := plugin.Restart(ctx); err != nil {
		t.Fatalf("restart the plugin: %v", err)
	}
	putInBucket(t, e, id.prefix+"/after-loss.txt", "recreated PV after the loss\n")
	rescueReads(t, e, t3, 90*time.Second, "on the recreated PV after the loss", []*stack.CSI{plugin}, id.readers("app", "/data/after-loss.txt", "recreated PV after the loss\n")...)
	wantText := fmt.Sprintf("with volume %s/%s (PV uid %s), mounter rclone", s3Bucket, id.prefix, pv.UID)
	var replayed []string
	waitFor(t, 30*time.Second, "the agent's replay Event naming the recreated PV's attributes", func() (bool, string) {
		// Replayed at once, or bridged while the plugin restarted and handed back by a replay.
		replayed = append(events(t, e, id.ns, contract.ReasonMountReplayed), events(t, e, id.ns, contract.ReasonBridgeRetired)...)
		for _, ev := range replayed {
			if strings.Contains(ev, wantText) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("want %q in one of %v", wantText, replayed)
	})
	st := mountsAt(id.target)
	if top := st[len(st)-1]; top.FSType != id.fsType() || mustStackIdentity(t, id.target) == beforeStack {
		t.Errorf("recreated PV: after the loss the target's top is %s (ID %d), want a new fuse.rclone mount of the driver; before %s, now %s",
			top.FSType, top.ID, describeStack(before), describeStack(st))
	}
	// The agent sends its Events in the order it recorded them (client-go's broadcaster, one at
	// a time): with the replay's Event in the API, a refusal or failure recorded before it is too.
	if evs := append(events(t, e, id.ns, contract.ReasonReplayResultWrongFilesystem), events(t, e, id.ns, contract.ReasonMountRestoreFailed)...); len(evs) > 0 {
		t.Errorf("recreated PV: the agent refused or failed: %v", evs)
	}
	t.Logf("RESULT recreated PV %s (uid %s → %s, mounter geesefs → rclone, prefix %s → %s): loss → replayed with the new attributes in %s: %v",
		id.pv, old.UID, pv.UID, g.prefix, id.prefix, time.Since(t3).Round(100*time.Millisecond), replayed)
}

// appPod creates the pod "app" (an app container and a pinned one with propagation None) on the
// claim "data" in ns.
func appPod(t testing.TB, e *env, ns string) {
	t.Helper()
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: appContainers(e.c.BusyboxImage), Volumes: dataVolume(),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod in %s: %v", ns, err)
	}
}

// waitPidsGone waits (30 s) until none of pids runs: the evidence that the daemons died.
func waitPidsGone(t testing.TB, pids []int, what string) {
	t.Helper()
	waitFor(t, 30*time.Second, what, func() (bool, string) {
		for _, pid := range pids {
			if pidRuns(pid) {
				return false, fmt.Sprintf("pid %d still runs", pid)
			}
		}
		return true, ""
	})
}
