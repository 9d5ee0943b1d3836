package s3mount

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// A check that runs while the staging s3fs exits: the first target checked still answers, the
// next is dead. Both are binds of one staging mount (one FUSE connection, one device), so the
// first is checked again at once and the same pass restores both — not a second pass after the
// whole first one.
func TestTargetsOfOneConnectionRestoredTogether(t *testing.T) {
	w := newWorld(t, append(standard(false), podObj("app2", "uid-2", "data", false))...)
	w.remount = &fakeRemounter{}
	first := w.publish("uid-1", "pv-a")
	second := csiclient.TargetPath(testKubelet, "uid-2", "pv-a")
	vd, _ := json.Marshal(csiclient.VolData{SpecVolID: "pv-a", VolumeHandle: "bkt/pv-a", DriverName: testDriver, NodeName: testNode})
	w.node.SetFile(filepath.Join(filepath.Dir(second), csiclient.VolDataFile), vd)
	if err := w.node.Mounter().Bind(first, second, false); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	checks := 0
	w.node.BeforeStatfs = func(path string) {
		if path != first && path != second {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if checks++; checks == 2 {
			w.node.KillMount(first) // the daemon exits between the two checks
		}
	}
	w.start()

	for _, p := range []string{first, second} {
		if top, _ := w.node.Table().Top(p); top.Source != stack.FSName("pv-a") {
			t.Errorf("top at %s is %+v after the first check, want our bridge", p, top)
		}
	}
	w.remount.mu.Lock()
	passes := slices.Clone(w.remount.passes)
	w.remount.mu.Unlock()
	if len(passes) != 1 || passes[0] != 2 {
		t.Errorf("container remount passes (requests each): %v; want one pass over both pods", passes)
	}
}

// A target of the PV found dead while its pass is already starting the bridge (another s3fs of
// the plugin exits a moment later) is left to the next pass, which the end of the first wakes at
// once: the first binds only what it was started with, the second binds the other, one bridge
// serves both. Dead targets joining the pass in flight were removed (issue 52: the ablation
// bench found them inside the run-to-run spread at 20 and 100 pods), so there are two container
// remount passes, one per pass, not one over both pods.
func TestTargetFoundDuringThePassWakesTheNext(t *testing.T) {
	w := newWorld(t, append(standard(false), podObj("app2", "uid-2", "data", false))...)
	w.remount = &fakeRemounter{}
	first, second := w.publish("uid-1", "pv-a"), w.publish("uid-2", "pv-a") // two daemons
	w.node.KillMount(first)
	var once sync.Once
	w.node.BeforeStatfs = func(path string) {
		if path != w.r.layout.MountPoint("pv-a") {
			return
		}
		once.Do(func() { // the bridge is starting: the second daemon exits, a check runs
			w.node.KillMount(second)
			if err := w.r.Sync(w.ctx); err != nil {
				t.Errorf("Sync during the pass: %v", err)
			}
		})
	}
	w.start()
	if top, _ := w.node.Table().Top(first); top.Source != stack.FSName("pv-a") {
		t.Errorf("top at %s is %+v after the pass, want our bridge", first, top)
	}
	if top, _ := w.node.Table().Top(second); top.Source == stack.FSName("pv-a") {
		t.Fatalf("the target found dead during the pass was bound by it (%+v)", top)
	}
	select {
	case <-w.r.kick:
	default:
		t.Fatal("the pass ended with a dead target found during it and woke no pass: it waited for the timed check")
	}
	w.sync()
	if top, _ := w.node.Table().Top(second); top.Source != stack.FSName("pv-a") {
		t.Errorf("the woken pass left %s on %+v, want our bridge", second, top)
	}
	if n := len(w.node.Started()); n != 1 {
		t.Errorf("%d s3fs started, want one bridge", n)
	}
	w.remount.mu.Lock()
	passes := slices.Clone(w.remount.passes)
	w.remount.mu.Unlock()
	if len(passes) != 2 {
		t.Errorf("container remount passes: %v; want two (one per pass)", passes)
	}
	w.r.mu.Lock()
	left := len(w.r.deadDuring)
	w.r.mu.Unlock()
	if left != 0 {
		t.Errorf("%d PVs still noted with dead targets found during a pass after the passes", left)
	}
}

// A target found dead while its PV's pass is a replay through the driver (a hand-back to the
// driver likewise) is not left to a timed pass: the end of
// that pass wakes the next at once, and it restores the target.
func TestDeathDuringAReplayWakesAPassAtItsEnd(t *testing.T) {
	w, first := replayWorld(t, false, podObj("app2", "uid-2", "data", false))
	second := w.publish("uid-2", "pv-a") // a second daemon
	secondDead, _ := w.node.Table().Top(second)
	w.node.KillMount(first)
	var once sync.Once
	during := false
	w.node.BeforeStatfs = func(path string) {
		if !strings.HasPrefix(path, testKubelet+"/pods/uid-1/pvrescue~s3/") {
			return
		}
		once.Do(func() { // the replay checks what the driver published: the second daemon exits
			during = true
			w.node.KillMount(second)
			if err := w.r.Sync(w.ctx); err != nil {
				t.Errorf("Sync during the replay: %v", err)
			}
		})
	}
	w.start()
	if !during {
		t.Fatal("the replay never checked its fresh directory: the test did not run the death during the pass")
	}
	if top, _ := w.node.Table().Top(second); top.Dev != secondDead.Dev {
		t.Fatalf("second target restored during the first pass already (%+v): the test did not exercise a death during the pass", top)
	}
	select {
	case <-w.r.kick:
	default:
		t.Fatal("the replay pass ended with a dead target found during it and woke no pass: it waited for the timed check")
	}
	w.sync()
	if top, _ := w.node.Table().Top(second); top.Dev == secondDead.Dev {
		t.Errorf("second target still on its dead mount after the woken pass: %+v", top)
	}
}

// The replay's mount dies as it is put (the plugin restarted again: its new daemon killed right
// after it answered): a new death of the driver's daemons, bridged at once as when the driver
// does not answer — not a refused replay backed off for 2 s (a stress incident took 3.4 s).
func TestReplayedMountDyingAsItIsPutIsBridgedAtOnce(t *testing.T) {
	w, target := replayWorld(t, false)
	w.node.KillMount(target)
	dead, _ := w.node.Table().Top(target)
	var mu sync.Mutex
	killed := false
	w.node.BeforeStatfs = func(path string) {
		if path != target {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		// The check of the replayed mount just put there: its daemon exits first.
		if top, _ := w.node.Table().Top(target); !killed && top.Dev != dead.Dev {
			killed = true
			w.node.KillMount(target)
		}
	}
	w.start()
	if !killed {
		t.Fatal("the replay never put its mount at the target: the test did not run the death")
	}
	if top, _ := w.node.Table().Top(target); top.Source != stack.FSName("pv-a") {
		t.Errorf("top at the target is %+v, want our bridge at once", top)
	}
	w.r.mu.Lock()
	_, backingOff := w.r.retry["pv-a"]
	w.r.mu.Unlock()
	if backingOff {
		t.Error("the PV backs off: the death was taken for a refused replay")
	}
}
