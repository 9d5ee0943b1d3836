package s3mount

import (
	"testing"
)

// Each of the bench's ablation switches (Options.Ablate, bench only) turns its mechanism off,
// and the restore still happens; the shipped agent's side of each is its own test
// (TestRestoreRemountsContainers' prefetch).

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

func TestParseAblations(t *testing.T) {
	a, err := ParseAblations(" prefetch")
	if err != nil || a != (Ablations{Prefetch: true}) || a.String() != "prefetch" {
		t.Errorf("ParseAblations = %+v (%q), %v", a, a.String(), err)
	}
	if _, err := ParseAblations("nope"); err == nil {
		t.Error("an unknown name was accepted")
	}
	if a, err := ParseAblations(""); err != nil || a != (Ablations{}) {
		t.Errorf("empty: %+v, %v; want the shipped agent", a, err)
	}
}
