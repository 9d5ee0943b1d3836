package s3mount

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// A driver whose NodeUnpublish unmounts only the top mount. The pod of a replayed target is
// deleted: kubelet's teardown takes the driver's replayed mount (the top), finds the dead
// driver mount below and leaves its directory and vol_data.json. The agent removes the dead
// mount and finishes kubelet's teardown (mount dir, vol_data.json, volume dir), so kubelet can
// remove the pod's directory.
func TestTeardownFinishedAfterTopOnlyUnpublish(t *testing.T) {
	w, target := replayWorld(t, false)
	w.node.KillMount(target)
	w.start()
	if n := len(w.node.Table().Stack(target)); n != 2 {
		t.Fatalf("replayed stack %d, want 2", n)
	}
	volDir := filepath.Dir(target)
	// The pod is being deleted; its containers still stop: the agent must not touch anything yet.
	w.view.DeletePod("default", "app")
	// ... kubelet's teardown: the driver unmounts the top (the replayed mount) only.
	if err := fakeOS(w.node).Mounter.Unmount(target, false); err != nil {
		t.Fatal(err)
	}
	w.sync()
	if n := len(w.node.Table().Stack(target)); n != 0 {
		t.Errorf("target stack %d after cleanup, want 0", n)
	}
	want := []string{target, filepath.Join(volDir, csiclient.VolDataFile), volDir}
	if got := w.node.Removed(); !containsInOrder(got, want) {
		t.Errorf("removed %q, want %q in this order", got, want)
	}
	if _, _, ok := w.node.File(filepath.Join(volDir, csiclient.VolDataFile)); ok {
		t.Error("vol_data.json left")
	}
	checkTeardownHelp(t, w, 0, 1)
}

// While the replayed mount is still at the deleted pod's target (kubelet has not torn it down),
// nothing of kubelet's is removed; once kubelet's teardown took the top, the rest goes.
func TestTeardownWaitsForKubelet(t *testing.T) {
	w, target := replayWorld(t, false)
	w.node.KillMount(target)
	w.start()
	volDir := filepath.Dir(target)
	w.view.DeletePod("default", "app")
	w.clock.Step(time.Second)
	w.sync()
	if n := len(w.node.Table().Stack(target)); n != 2 {
		t.Errorf("target stack %d while the driver's live mount is there, want 2 (untouched)", n)
	}
	if slices.Contains(w.node.Removed(), volDir) {
		t.Fatal("removed kubelet's volume directory before kubelet's teardown")
	}
	checkTeardownHelp(t, w, 0, 0)
	if err := fakeOS(w.node).Mounter.Unmount(target, false); err != nil {
		t.Fatal(err)
	}
	w.sync()
	if !slices.Contains(w.node.Removed(), volDir) || len(w.node.Table().Stack(target)) != 0 {
		t.Errorf("after kubelet's teardown: removed %q, stack %d", w.node.Removed(), len(w.node.Table().Stack(target)))
	}
	checkTeardownHelp(t, w, 0, 1)
}

// A bridged target whose pod goes: the agent removes its own bind before kubelet's teardown and
// leaves the driver's dead mount below it for the driver: a NodeUnpublish that is a plain umount
// of the target (k8s-csi-s3, Internal on EINVAL) then succeeds, and kubelet's teardown cleans up
// itself: the agent leaves kubelet's files alone.
func TestTeardownLeavesTheDriversDeadMount(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	dead, _ := w.node.Table().Top(target)
	w.node.KillMount(target)
	w.start()
	w.waitFor("bridged", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	w.view.DeletePod("default", "app")
	w.sync()
	w.clock.Step(time.Second)
	w.sync()
	if st := w.node.Table().Stack(target); len(st) != 1 || st[0].ID != dead.ID {
		t.Errorf("target stack %v, want exactly the driver's dead mount %d (ours removed, the driver's left)", sources(st), dead.ID)
	}
	strictUnpublish(t, w, target)
	w.sync()
	volDir := filepath.Dir(target)
	if got := w.node.Removed(); slices.Contains(got, volDir) || slices.Contains(got, filepath.Join(volDir, csiclient.VolDataFile)) {
		t.Errorf("removed kubelet's files although kubelet's teardown is still to come: %q", got)
	}
	checkTeardownHelp(t, w, 1, 0)
}

// With the driver's live mount put beneath the dead one (a Replacer), a replayed target holds one
// mount: the driver's top-only NodeUnpublish takes it, and kubelet's teardown needs no help —
// the agent removes nothing and pvrescue_s3_teardown_help_total stays 0.
func TestNoTeardownHelpAfterReplaceBeneath(t *testing.T) {
	w, target := replayWorld(t, false)
	w.remount = &fakeRemounter{}
	rep := &beneathReplacer{node: w.node}
	w.replacer = rep
	w.node.KillMount(target)
	w.start()
	if n := len(w.node.Table().Stack(target)); n != 1 || rep.calls != 1 {
		t.Fatalf("replayed target: stack %d, replacements %d, want 1 and 1", n, rep.calls)
	}
	w.view.DeletePod("default", "app")
	w.sync()
	if n := len(w.node.Table().Stack(target)); n != 1 {
		t.Fatalf("the agent touched the live driver mount of a deleted pod: stack %d, want 1", n)
	}
	// kubelet's teardown: the driver unmounts the top only, which is all there is.
	if err := fakeOS(w.node).Mounter.Unmount(target, false); err != nil {
		t.Fatal(err)
	}
	w.settle()
	if got := w.node.Removed(); slices.Contains(got, filepath.Dir(target)) || slices.Contains(got, target) {
		t.Errorf("the agent removed kubelet's files, kubelet's own teardown finds the target empty: %q", got)
	}
	checkTeardownHelp(t, w, 0, 0)
}

// beneathReplacer puts the source in place of the dead top as the kernel's MOVE_MOUNT_BENEATH
// and a detach of the old top leave it: one mount at the target, the source's filesystem.
type beneathReplacer struct {
	node  *s3mounttest.FakeNode
	calls int
}

func (b *beneathReplacer) Replace(source, target string, old int, readOnly, _ bool, _ stack.Table) (mountreplace.Result, error) {
	b.calls++
	m := b.node.Mounter()
	if err := m.Unmount(target, true); err != nil {
		return mountreplace.Result{}, err
	}
	if err := m.Bind(source, target, readOnly); err != nil {
		return mountreplace.Result{}, err
	}
	top, _ := b.node.Table().Top(target)
	return mountreplace.Result{Mode: mountreplace.Beneath, Old: old, New: top.ID}, nil
}

// The mount we replayed at a target (beneath the dead one: the only mount there) dies again and
// the pod is deleted while the driver is down: the agent leaves that last mount, dead and ours,
// for the driver's NodeUnpublish, whose plain umount then succeeds.
func TestTeardownLeavesTheLastMountEvenWhenOurs(t *testing.T) {
	w, target := replayWorld(t, false)
	w.remount = &fakeRemounter{}
	w.replacer = &beneathReplacer{node: w.node}
	w.node.KillMount(target)
	w.start()
	st := w.node.Table().Stack(target)
	if len(st) != 1 || !w.r.rules.Placed.Is(target, st[0]) {
		t.Fatalf("replayed target: stack %v, want one mount, recorded as ours", sources(st))
	}
	w.csi.Down = true
	w.node.KillMount(target)
	w.view.DeletePod("default", "app")
	w.sync()
	w.clock.Step(time.Second)
	w.sync()
	if got := w.node.Table().Stack(target); len(got) != 1 || got[0].ID != st[0].ID {
		t.Fatalf("target stack %v after the pod went, want our dead replayed mount %d left for the driver", sources(got), st[0].ID)
	}
	strictUnpublish(t, w, target)
	checkTeardownHelp(t, w, 0, 0)
}

// Our dead binds stacked on the driver's dead mount (left by earlier agents): all of ours go,
// top down, and the driver's stays.
func TestTeardownRemovesEveryMountOfOursAboveTheDrivers(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	dead, _ := w.node.Table().Top(target)
	w.node.KillMount(target)
	w.node.AddMount(target, "fuse", stack.FSName("pv-a"))
	w.node.KillMount(target)
	w.node.AddMount(target, "fuse", stack.FSName("pv-a"))
	w.node.KillMount(target)
	w.view.DeletePod("default", "app")
	w.start()
	w.settle()
	if st := w.node.Table().Stack(target); len(st) != 1 || st[0].ID != dead.ID {
		t.Errorf("target stack %v, want exactly the driver's dead mount %d", sources(st), dead.ID)
	}
	strictUnpublish(t, w, target)
	checkTeardownHelp(t, w, 1, 0)
}

// leftForTheDriver reports whether target holds exactly one mount, and not one of our bridge's:
// what the driver's NodeUnpublish (a plain umount of the target) must find.
func leftForTheDriver(w *world, target string) bool {
	st := w.node.Table().Stack(target)
	if len(st) != 1 {
		return false
	}
	_, ours := stack.PVFromFSName(st[0].Source)
	return !ours
}

// strictUnpublish is k8s-csi-s3's NodeUnpublishVolume: a plain umount of the target, an error
// (Internal, retried by kubelet for ever) when nothing is mounted there.
func strictUnpublish(t *testing.T, w *world, target string) {
	t.Helper()
	if err := fakeOS(w.node).Mounter.Unmount(target, false); err != nil {
		t.Fatalf("the driver's plain-umount NodeUnpublish at %s failed (kubelet would retry it for ever): %v", target, err)
	}
	if n := len(w.node.Table().Stack(target)); n != 0 {
		t.Errorf("after the driver's NodeUnpublish: %d mounts left at the target", n)
	}
}

// checkTeardownHelp compares pvrescue_s3_teardown_help_total by action.
func checkTeardownHelp(t *testing.T, w *world, emptied, finished float64) {
	t.Helper()
	th := w.r.Metrics().TeardownHelp
	if got := value(t, th.WithLabelValues(TeardownEmptied)); got != emptied {
		t.Errorf("teardown_help_total{action=%q} = %v, want %v", TeardownEmptied, got, emptied)
	}
	if got := value(t, th.WithLabelValues(TeardownFinished)); got != finished {
		t.Errorf("teardown_help_total{action=%q} = %v, want %v", TeardownFinished, got, finished)
	}
}

func containsInOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// Both actions are exported at 0 from the start, so "no help was needed" reads as 0, not as a
// missing series.
func TestTeardownHelpExportedFromTheStart(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if n := series(m.TeardownHelp); n != 2 {
		t.Errorf("teardown_help_total exports %d series at start, want 2 (emptied, finished)", n)
	}
	if got := value(t, m.TeardownHelp); got != 0 {
		t.Errorf("teardown_help_total = %v at start, want 0", got)
	}
}
