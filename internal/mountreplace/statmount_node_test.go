//go:build node

package mountreplace_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// TestNodeStatmountAgreesWithTable: what Detach's checks read from statmount (Linux 6.8) —
// IDs, parents, mount points, a stack's base, a detached mount's absence — is what the mount
// table says of the same mounts.
func TestNodeStatmountAgreesWithTable(t *testing.T) {
	testenv.RequireRoot(t)
	dir := kubeletDir(t)
	at := filepath.Join(dir, "a b") // a space: raw in statmount, escaped in mountinfo
	must(t, os.MkdirAll(at, 0o755))
	must(t, unix.Mount("tmpfs", at, "tmpfs", 0, "size=1m"))
	must(t, unix.Mount("tmpfs", at, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() {
		for unix.Unmount(at, unix.MNT_DETACH) == nil {
		}
	})
	s := stack(t, "self", at)
	if len(s) != 2 {
		t.Fatalf("stack at %s = %+v; want two tmpfs", at, s)
	}
	lower, upper := s[0], s[1]

	open := func(p string) int {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		must(t, err)
		t.Cleanup(func() { _ = unix.Close(fd) })
		return fd
	}
	upperU, err := mountreplace.UniqueID(open(at))
	must(t, err)
	dirU, err := mountreplace.UniqueID(open(dir))
	must(t, err)

	f, err := mountreplace.Statmount(upperU)
	must(t, err)
	if f.ID != upperU || f.OldID != upper.ID || f.OldParentID != upper.ParentID || f.MountPoint != at ||
		f.Propagation != mountreplace.PropagationOf(upper) {
		t.Errorf("statmount of the upper mount: %+v; want unique ID %d, mountinfo ID %d on %d, mount point %q, %s",
			f, upperU, upper.ID, upper.ParentID, at, mountreplace.PropagationOf(upper))
	}
	p, err := mountreplace.Statmount(f.ParentID)
	must(t, err)
	if p.OldID != lower.ID || p.OldParentID != lower.ParentID || p.MountPoint != at || p.Propagation != mountreplace.PropagationOf(lower) {
		t.Errorf("statmount of its parent: %+v; want mountinfo ID %d (the lower tmpfs) on %d at %q, %s",
			p, lower.ID, lower.ParentID, at, mountreplace.PropagationOf(lower))
	}
	if base, err := mountreplace.StackBaseOf(upperU); err != nil || base != dirU {
		t.Errorf("stack base of the upper mount: %d, %v; want %d, the mount of %s", base, err, dirU, dir)
	}

	must(t, unix.Unmount(at, unix.MNT_DETACH))
	if f, err := mountreplace.Statmount(upperU); !errors.Is(err, unix.ENOENT) {
		t.Errorf("statmount of the detached mount: %+v, %v; want ENOENT", f, err)
	}
	if _, err := mountreplace.Statmount(f.ParentID); err != nil {
		t.Errorf("statmount of the lower mount, still attached: %v", err)
	}
}
