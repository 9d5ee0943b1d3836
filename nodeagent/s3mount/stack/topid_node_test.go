//go:build node

package stack

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// The real top ID (statx STATX_MNT_ID_UNIQUE) names the mount on top: another ID once a mount
// goes on top, the first again once it is gone, never an ID from earlier. A path through a
// symlink is never followed.
func TestNodeTopUniqueID(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	at := filepath.Join(dir, "t")
	if err := os.Mkdir(at, 0o755); err != nil {
		t.Fatal(err)
	}
	m := realMounter{}
	bare, err := m.TopUniqueID(at)
	if err != nil {
		t.Fatal(err)
	}
	mount := func() {
		t.Helper()
		if err := unix.Mount("tmpfs", at, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	mount()
	t.Cleanup(func() {
		for unix.Unmount(at, unix.MNT_DETACH) == nil {
		}
	})
	lower, err := m.TopUniqueID(at)
	if err != nil || lower == bare {
		t.Fatalf("after a tmpfs went on %s: ID %d (%v), want one other than the directory's mount %d", at, lower, err, bare)
	}
	mount()
	upper, err := m.TopUniqueID(at)
	if err != nil || upper == lower || upper == bare {
		t.Fatalf("after a second tmpfs: ID %d (%v), want a new one (had %d, %d)", upper, err, bare, lower)
	}
	if err := unix.Unmount(at, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if id, err := m.TopUniqueID(at); err != nil || id != lower {
		t.Errorf("after the upper tmpfs went: ID %d (%v), want the lower one's %d", id, err, lower)
	}
	mount()
	top, err := m.TopUniqueID(at)
	if err != nil || top == upper || top == lower {
		t.Errorf("a new tmpfs on top: ID %d (%v), want one never given before (had %d, %d)", top, err, lower, upper)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(at, link); err != nil {
		t.Fatal(err)
	}
	// The link itself is named (the mount it is on), never what it points to.
	if id, err := m.TopUniqueID(link); err == nil && id != bare {
		t.Errorf("a symlink to the target: ID %d, want the link's own mount %d (the target's top is %d)", id, bare, top)
	}
}
