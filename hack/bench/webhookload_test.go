package main

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// The handlers take turns block by block, the first of each round rotating, and each gets its
// share of the step; the blocks merge into one result per handler.
func TestInterleave(t *testing.T) {
	var calls []string
	boom := errors.New("boom")
	run := func(url string, d time.Duration) loadResult {
		calls = append(calls, url)
		if d != 2*time.Second {
			t.Errorf("block of %s, want 2s", d)
		}
		r := loadResult{lat: []time.Duration{time.Duration(len(calls)) * time.Millisecond}, gcCycles: 1, allocated: 10, active: time.Second}
		if url == "b" && len(calls) > 3 {
			r.errors, r.firstErr = 1, boom
		}
		return r
	}
	got := interleave(3, 6*time.Second, []string{"a", "b", "c"}, run)
	if want := []string{"a", "b", "c", "b", "c", "a", "c", "a", "b"}; !slices.Equal(calls, want) {
		t.Errorf("order %v, want %v", calls, want)
	}
	for i, r := range got {
		if len(r.lat) != 3 || r.gcCycles != 3 || r.allocated != 30 || r.active != 3*time.Second || r.throughput != 1 {
			t.Errorf("handler %d: merged %+v, want 3 samples, 3 cycles, 30 bytes, 3s active, 1/s", i, r)
		}
	}
	if want := []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 9 * time.Millisecond}; !slices.Equal(got[1].lat, want) {
		t.Errorf("b's samples %v, want %v (in block order)", got[1].lat, want)
	}
	if got[1].errors != 2 || !errors.Is(got[1].firstErr, boom) || got[0].errors != 0 {
		t.Errorf("errors: a %d, b %d (%v); want 0 and 2 (boom)", got[0].errors, got[1].errors, got[1].firstErr)
	}
}
