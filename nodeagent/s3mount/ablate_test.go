package s3mount

import (
	"testing"
)

// Each of the bench's ablation switches (Options.Ablate, bench only) turns its mechanism off,
// and the restore still happens; the shipped agent's side of each is its own test
// (TestRestoreRemountsContainers' prefetch, TestBridgePassAsksTheBridgeAndWritesTheRecordOnce).

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
	a, err := ParseAblations("prefetch, held-records")
	if err != nil || a != (Ablations{Prefetch: true, HeldRecords: true}) || a.String() != "prefetch,held-records" {
		t.Errorf("ParseAblations = %+v (%q), %v", a, a.String(), err)
	}
	if _, err := ParseAblations("nope"); err == nil {
		t.Error("an unknown name was accepted")
	}
	if a, err := ParseAblations(""); err != nil || a != (Ablations{}) {
		t.Errorf("empty: %+v, %v; want the shipped agent", a, err)
	}
}
