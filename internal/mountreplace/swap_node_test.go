//go:build node

package mountreplace_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// swapRig is a tenant's trap, built in a mount namespace of its own: the volume's dead mount at
// w/x/sys inside a directory w the tenant can write (an emptyDir), a symlink w/link to the
// directory holding a read-only mount that stands for the runtime's bind of /proc/sys, and a
// detached tmpfs to put in place of the dead mount.
type swapRig struct {
	dir, x, link, target, victim string
	victimID, oldID              int
}

func newSwapRig(dir string) (*swapRig, error) {
	r := &swapRig{dir: dir, x: filepath.Join(dir, "w", "x"), link: filepath.Join(dir, "w", "link"),
		victim: filepath.Join(dir, "proc", "sys")}
	r.target = filepath.Join(r.x, "sys")
	for _, p := range []string{r.target, r.victim} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Symlink(filepath.Join(dir, "proc"), r.link); err != nil {
		return nil, err
	}
	// The victim: read-only like runc's bind of /proc/sys, with a file standing for
	// kernel/core_pattern.
	if err := unix.Mount("tmpfs", r.victim, "tmpfs", 0, "size=1m"); err != nil {
		return nil, fmt.Errorf("mount victim: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.victim, "core_pattern"), []byte("core\n"), 0o644); err != nil {
		return nil, err
	}
	if err := unix.Mount("", r.victim, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return nil, fmt.Errorf("victim read-only: %w", err)
	}
	if err := unix.Mount("tmpfs", r.target, "tmpfs", 0, "size=1m"); err != nil {
		return nil, fmt.Errorf("mount the dead volume: %w", err)
	}
	var err error
	if r.victimID, err = statxID(r.victim); err != nil {
		return nil, err
	}
	if r.oldID, err = statxID(r.target); err != nil {
		return nil, err
	}
	return r, nil
}

func statxID(path string) (int, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_DONT_SYNC|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, fmt.Errorf("statx %s: %w", path, err)
	}
	return int(stx.Mnt_id), nil
}

// swap exchanges w/x (the directory) and w/link (the symlink), as a tenant's
// renameat2(RENAME_EXCHANGE) does.
func (r *swapRig) swap() error {
	return unix.Renameat2(unix.AT_FDCWD, r.x, unix.AT_FDCWD, r.link, unix.RENAME_EXCHANGE)
}

// detachedTmpfs is a tmpfs mount not attached anywhere (the live volume's clone).
func detachedTmpfs() (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer func() { _ = unix.Close(fs) }() // the context is not needed once mounted
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, err
	}
	return unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, 0)
}

// privateNamespace moves the calling (locked, never unlocked) thread into a mount namespace of
// its own where nothing propagates back to the host.
func privateNamespace() error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
}

func byID(tab []mountinfo.Mount, id int) (mountinfo.Mount, bool) {
	for _, m := range tab {
		if m.ID == id {
			return m, true
		}
	}
	return mountinfo.Mount{}, false
}

// TestNodeDetachParentSwapped: between Detach's check of the dead mount and its umount2, the
// tenant exchanges the parent directory w/x with a symlink to the directory of a read-only mount
// (the runtime's /proc/sys). The agent must detach the dead mount it verified, never the
// read-only one: the victim stays attached and read-only, the dead mount is gone, and the
// replacement reports that the path changed (its last check cannot resolve it any more).
func TestNodeDetachParentSwapped(t *testing.T) {
	for _, m := range detachModes {
		t.Run(m.name, func(t *testing.T) { detachParentSwapped(t, m.tableOnly, m.ownThread) })
	}
}

// detachModes are how Detach checks the stack before and after its umount2, and where it calls
// umount2: on a thread of its own, or on the caller's (a container remount's thread, whose
// fs_struct is its own: RealKernel.OnOwnFSThread).
var detachModes = []struct {
	name                 string
	tableOnly, ownThread bool
}{
	{"checked-by-statmount", false, false},
	{"checked-by-table", true, false},
	{"checked-by-statmount-on-the-callers-thread", false, true},
}

func detachParentSwapped(t *testing.T, tableOnly, ownThread bool) {
	testenv.RequireRoot(t)
	r, k := realReplacer(t)
	mountreplace.SetTableOnly(k, tableOnly)
	dir := t.TempDir()
	type facts struct {
		rig            *swapRig
		res            mountreplace.Result
		replaceErr     error
		swapErr        error
		swaps          int
		tab            []mountinfo.Mount
		victimReadOnly bool
		topAtMovedDir  int
	}
	done := make(chan error, 1)
	var f facts
	go onThread(func() {
		done <- func() error {
			if err := privateNamespace(); err != nil {
				return err
			}
			rig, err := newSwapRig(dir)
			if err != nil {
				return err
			}
			f.rig = rig
			tree, err := detachedTmpfs()
			if err != nil {
				return fmt.Errorf("detached tmpfs: %w", err)
			}
			defer func() { _ = unix.Close(tree) }() // the tree is attached or dropped by then
			mountreplace.SetBeforeDetach(k, func() {
				f.swaps++
				f.swapErr = rig.swap()
			})
			defer mountreplace.SetBeforeDetach(k, nil)
			if ownThread { // this thread's fs_struct is its own (privateNamespace)
				r.Kernel = k.OnOwnFSThread()
			}
			f.res, f.replaceErr = r.Replace(mountreplace.Request{Target: rig.target, Old: rig.oldID, Tree: tree})
			b, err := os.ReadFile("/proc/thread-self/mountinfo")
			if err != nil {
				return err
			}
			if f.tab, err = mountinfo.Parse(string(b)); err != nil {
				return err
			}
			if m, ok := byID(f.tab, rig.victimID); ok {
				f.victimReadOnly = m.ReadOnly()
			}
			// The directory that held the dead mount is now named w/link.
			f.topAtMovedDir, _ = statxID(filepath.Join(rig.link, "sys"))
			return nil
		}()
	})
	must(t, <-done)
	rig := f.rig
	t.Logf("replace: %+v, err %v; swaps %d (err %v)", f.res, f.replaceErr, f.swaps, f.swapErr)
	if f.swaps != 1 || f.swapErr != nil {
		t.Fatalf("the tenant's swap between check and act ran %d times (err %v); want once, without error", f.swaps, f.swapErr)
	}
	if _, ok := byID(f.tab, rig.victimID); !ok {
		t.Errorf("the read-only victim mount %d (standing for /proc/sys) was detached: the agent acted on a path resolved after its check", rig.victimID)
	} else if !f.victimReadOnly {
		t.Errorf("the victim mount %d is no longer read-only", rig.victimID)
	}
	if _, ok := byID(f.tab, rig.oldID); ok {
		t.Errorf("the verified dead mount %d is still attached", rig.oldID)
	}
	if f.res.New == 0 || f.topAtMovedDir != f.res.New {
		t.Errorf("top of the moved directory's sys is %d, want the new mount %d", f.topAtMovedDir, f.res.New)
	}
	if !errors.Is(f.replaceErr, mountreplace.ErrTargetChanged) {
		t.Errorf("replace error %v; want ErrTargetChanged (the target path now goes through a symlink)", f.replaceErr)
	}
}

// TestNodeDetachRacedBySwapper: a racer exchanges w/x and w/link (RENAME_EXCHANGE) in a loop
// while the agent replaces the dead mount at w/x/sys again and again. Whatever the interleaving,
// the read-only victim is never detached; replacements that saw the swap stop with
// ErrTargetChanged (or ErrVerify, when the table read after the move names the mount point by
// the directory's new name).
func TestNodeDetachRacedBySwapper(t *testing.T) {
	for _, m := range detachModes {
		t.Run(m.name, func(t *testing.T) { detachRacedBySwapper(t, m.tableOnly, m.ownThread) })
	}
}

func detachRacedBySwapper(t *testing.T, tableOnly, ownThread bool) {
	testenv.RequireRoot(t)
	r, k := realReplacer(t)
	mountreplace.SetTableOnly(k, tableOnly)
	if ownThread { // Replace runs on the test's thread, whose fs_struct is its own (privateNamespace)
		r.Kernel = k.OnOwnFSThread()
	}
	dir := t.TempDir()
	const rounds = 300
	type counts struct{ ok, changed, other, victimLost, swaps int }
	var c counts
	var firstOther error
	done := make(chan error, 1)
	go onThread(func() {
		done <- func() error {
			if err := privateNamespace(); err != nil {
				return err
			}
			rig, err := newSwapRig(dir)
			if err != nil {
				return err
			}
			if err := unix.Unmount(rig.target, unix.MNT_DETACH); err != nil {
				return err
			}
			var mu sync.Mutex
			stop := make(chan struct{})
			raced := make(chan int)
			go func() {
				n := 0
				defer func() { raced <- n }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					if rig.swap() == nil {
						n++
					}
					mu.Unlock()
				}
			}()
			for i := 0; i < rounds; i++ {
				mu.Lock()
				// Set up with the directory at w/x and the dead mount on its sys.
				if fi, err := os.Lstat(rig.x); err != nil || fi.Mode()&os.ModeSymlink != 0 {
					if err := rig.swap(); err != nil {
						mu.Unlock()
						return err
					}
				}
				if err := unix.Mount("tmpfs", rig.target, "tmpfs", 0, "size=1m"); err != nil {
					mu.Unlock()
					return err
				}
				old, err := statxID(rig.target)
				if err != nil {
					mu.Unlock()
					return err
				}
				tree, err := detachedTmpfs()
				if err != nil {
					mu.Unlock()
					return err
				}
				mu.Unlock()
				_, rerr := r.Replace(mountreplace.Request{Target: rig.target, Old: old, Tree: tree})
				_ = unix.Close(tree)
				switch {
				case rerr == nil:
					c.ok++
				case errors.Is(rerr, mountreplace.ErrTargetChanged), errors.Is(rerr, mountreplace.ErrVerify):
					c.changed++ // the check saw the swap (the table names the mount point by its new path)
				default:
					c.other++
					if firstOther == nil {
						firstOther = rerr
					}
				}
				mu.Lock()
				if id, err := statxID(rig.victim); err != nil || id != rig.victimID {
					c.victimLost++
					for unix.Unmount(rig.victim, unix.MNT_DETACH) == nil {
					}
					if err := unix.Mount("tmpfs", rig.victim, "tmpfs", unix.MS_RDONLY, "size=1m"); err != nil {
						mu.Unlock()
						return err
					}
					if rig.victimID, err = statxID(rig.victim); err != nil {
						mu.Unlock()
						return err
					}
				}
				// Clear whatever is left at the directory's sys, wherever the directory is now.
				real := rig.x
				if fi, err := os.Lstat(rig.x); err == nil && fi.Mode()&os.ModeSymlink != 0 {
					real = rig.link
				}
				for unix.Unmount(filepath.Join(real, "sys"), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) == nil {
				}
				mu.Unlock()
			}
			close(stop)
			c.swaps = <-raced
			return nil
		}()
	})
	must(t, <-done)
	t.Logf("%d replacements raced by %d swaps: %d done, %d target changed, %d other errors (first: %v); victim detached %d times",
		rounds, c.swaps, c.ok, c.changed, c.other, firstOther, c.victimLost)
	if c.victimLost != 0 {
		t.Errorf("the read-only victim mount was detached in %d of %d replacements", c.victimLost, rounds)
	}
	if c.swaps == 0 || c.changed == 0 {
		t.Errorf("the racer never changed what the agent saw (%d swaps, %d target changed): the test raced nothing", c.swaps, c.changed)
	}
	if c.other != 0 {
		t.Errorf("%d replacements failed otherwise than by a changed target (first: %v)", c.other, firstOther)
	}
}
