package localdisk

import (
	"path/filepath"
	"testing"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// A pass that starts watching a directory reports it, so Run makes one more pass: a path removed
// between the pass's read and the new watch produced no event and would wait for the resync.
func TestUpdateWatchesReportsNewDirectories(t *testing.T) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	a, b := t.TempDir(), t.TempDir()
	missing := filepath.Join(t.TempDir(), "not-there")
	watched := map[string]bool{}

	steps := []struct {
		dirs      []string
		wantAdded int
		wantSet   []string
	}{
		{dirs: []string{a}, wantAdded: 1, wantSet: []string{a}},
		{dirs: []string{a}, wantAdded: 0, wantSet: []string{a}},
		{dirs: []string{a, b, missing}, wantAdded: 1, wantSet: []string{a, b}},
		{dirs: []string{b}, wantAdded: 0, wantSet: []string{b}},
		{dirs: []string{a, b}, wantAdded: 1, wantSet: []string{a, b}},
	}
	for i, s := range steps {
		if got := updateWatches(logr.Discard(), w, watched, s.dirs); got != s.wantAdded {
			t.Errorf("step %d: added %d, want %d", i, got, s.wantAdded)
		}
		if len(watched) != len(s.wantSet) {
			t.Errorf("step %d: watching %v, want %v", i, watched, s.wantSet)
		}
		for _, d := range s.wantSet {
			if !watched[d] {
				t.Errorf("step %d: %s not watched (%v)", i, d, watched)
			}
		}
		if got := len(w.WatchList()); got != len(s.wantSet) {
			t.Errorf("step %d: fsnotify watches %d directories, want %d", i, got, len(s.wantSet))
		}
	}
}
