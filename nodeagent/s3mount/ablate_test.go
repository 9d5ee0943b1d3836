package s3mount

import (
	"slices"
	"sync"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Each of the bench's ablation switches (Options.Ablate, bench only) turns its mechanism off,
// and the restore still happens; the shipped agent's side of each is its own test
// (TestRestoreRemountsContainers' prefetch, TestTargetFoundDuringThePassJoinsIt,
// TestBridgePassAsksTheBridgeAndWritesTheRecordOnce).

func TestAblatePrefetch(t *testing.T) {
	w := newWorld(t, standard(false)...)
	w.remount = &fakeRemounter{}
	w.ablate = Ablations{Prefetch: true}
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.remount.mu.Lock()
	pre, reqs := len(w.remount.prefetched), len(w.remount.reqs)
	w.remount.mu.Unlock()
	if pre != 0 || reqs != 1 {
		t.Errorf("prefetch ablated: %d PrefetchPods calls, %d remount requests; want 0 and 1", pre, reqs)
	}
}

func TestAblateJoiners(t *testing.T) {
	w := newWorld(t, append(standard(false), podObj("app2", "uid-2", "data", false))...)
	w.remount = &fakeRemounter{}
	w.ablate = Ablations{Joiners: true}
	first, second := w.publish("uid-1", "pv-a"), w.publish("uid-2", "pv-a")
	w.node.KillMount(first)
	var once sync.Once
	w.node.BeforeStatfs = func(path string) {
		if path != w.r.layout.MountPoint("pv-a") {
			return
		}
		once.Do(func() {
			w.node.KillMount(second)
			if err := w.r.Sync(w.ctx); err != nil {
				t.Errorf("Sync during the pass: %v", err)
			}
		})
	}
	w.start()
	if top, _ := w.node.Table().Top(second); top.Source == stack.FSName("pv-a") {
		t.Fatalf("joiners ablated: the target found dead during the pass was bound by it (%+v)", top)
	}
	select {
	case <-w.r.kick:
	default:
		t.Fatal("joiners ablated: the pass ended without waking the next for the target left dead")
	}
	w.sync()
	if top, _ := w.node.Table().Top(second); top.Source != stack.FSName("pv-a") {
		t.Errorf("the next pass left %s on %+v, want our bridge", second, top)
	}
	w.remount.mu.Lock()
	passes := slices.Clone(w.remount.passes)
	w.remount.mu.Unlock()
	if len(passes) != 2 {
		t.Errorf("container remount passes: %v; want two (one per pass)", passes)
	}
}

func TestAblateHeldRecords(t *testing.T) {
	w, targets := deadPodsWorld(t, 8)
	w.replacer = &beneathReplacer{node: w.node}
	w.ablate = Ablations{HeldRecords: true}
	w.start()
	requireBridged(t, w, targets)
	if n := w.node.FileWrites(testState + "/s3/handed.json"); n < len(targets) {
		t.Errorf("held records ablated: the record written %d times for %d binds; want once per bind", n, len(targets))
	}
}

func TestParseAblations(t *testing.T) {
	a, err := ParseAblations("prefetch, joiners,held-records")
	if err != nil || a != (Ablations{Prefetch: true, Joiners: true, HeldRecords: true}) || a.String() != "prefetch,joiners,held-records" {
		t.Errorf("ParseAblations = %+v (%q), %v", a, a.String(), err)
	}
	if _, err := ParseAblations("nope"); err == nil {
		t.Error("an unknown name was accepted")
	}
	if a, err := ParseAblations(""); err != nil || a != (Ablations{}) {
		t.Errorf("empty: %+v, %v; want the shipped agent", a, err)
	}
}
