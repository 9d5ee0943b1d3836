package s3mount

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
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
	if err := fakeOS(w.node).Mounter.Unmount(target, false); err != nil {
		t.Fatal(err)
	}
	w.sync()
	if !slices.Contains(w.node.Removed(), volDir) || len(w.node.Table().Stack(target)) != 0 {
		t.Errorf("after kubelet's teardown: removed %q, stack %d", w.node.Removed(), len(w.node.Table().Stack(target)))
	}
}

// A bridged target whose pod goes: the agent removes its own bind and the dead driver mount
// itself, before kubelet's teardown, so kubelet's teardown finds the target empty and cleans up
// itself: the agent leaves kubelet's files alone.
func TestTeardownLeftToKubeletWhenWeEmptiedFirst(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bridged", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	w.view.DeletePod("default", "app")
	w.sync()
	if n := len(w.node.Table().Stack(target)); n != 0 {
		t.Errorf("target stack %d, want 0", n)
	}
	volDir := filepath.Dir(target)
	if got := w.node.Removed(); slices.Contains(got, volDir) || slices.Contains(got, filepath.Join(volDir, csiclient.VolDataFile)) {
		t.Errorf("removed kubelet's files although kubelet's teardown is still to come: %q", got)
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
