//go:build linux

package containermount

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/ossthread"
)

// NewOS returns the real node implementation reading procRoot (normally "/proc").
func NewOS(procRoot string) OS {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return OS{Proc: RealProcFS{Root: procRoot}, NS: RealNamespaces{ProcRoot: procRoot}}
}

// RealProcFS reads a /proc directory.
type RealProcFS struct{ Root string }

// Self implements ProcFS.
func (RealProcFS) Self() int { return os.Getpid() }

// Pids implements ProcFS.
func (p RealProcFS) Pids() ([]int, error) {
	entries, err := os.ReadDir(p.Root)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p.Root, err)
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

func (p RealProcFS) read(pid int, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(p.Root, strconv.Itoa(pid), name))
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Cgroup implements ProcFS.
func (p RealProcFS) Cgroup(pid int) (string, error) { return p.read(pid, "cgroup") }

// MountInfo implements ProcFS.
func (p RealProcFS) MountInfo(pid int) (string, error) { return p.read(pid, "mountinfo") }

// MountNS implements ProcFS.
func (p RealProcFS) MountNS(pid int) (uint64, error) { return p.ns(pid, "mnt") }

// UserNS implements ProcFS.
func (p RealProcFS) UserNS(pid int) (uint64, error) { return p.ns(pid, "user") }

func (p RealProcFS) ns(pid int, kind string) (uint64, error) {
	link, err := os.Readlink(filepath.Join(p.Root, strconv.Itoa(pid), "ns", kind))
	if err != nil {
		return 0, err
	}
	return NamespaceInode(link)
}

// RealNamespaces performs the kernel calls (Linux >= 5.2 for open_tree/move_mount, 5.6 for
// openat2, 5.12 for mount_setattr).
type RealNamespaces struct{ ProcRoot string }

type attachResult struct {
	errs []error
	err  error
}

// AttachInNamespace implements Namespaces.
//
// The work runs on an OS thread of its own that never serves another goroutine: it gets a
// private fs_struct (unshare CLONE_FS, which setns(CLONE_NEWNS) demands) and visits the
// container's namespace, so it is never unlocked and the Go runtime ends it when the goroutine
// returns. It is never the main thread: Go cannot end that one (it would stay wedged, and
// /proc/self/* of the whole agent — s3mount reads /proc/self/mountinfo — would describe the
// container's namespace; seen in the node test before this rule).
func (n RealNamespaces) AttachInNamespace(ctx context.Context, ns NamespaceRef, livePath string, attaches []Attach) ([]error, error) {
	done := make(chan attachResult, 1)
	go ossthread.Run(func() {
		errs, err := n.attachLocked(ns, livePath, attaches)
		done <- attachResult{errs, err}
	})
	select {
	case r := <-done:
		return r.errs, r.err
	case <-ctx.Done():
		// The calls do not block on a dead FUSE connection; if one hangs anyway the thread
		// finishes on its own and its result is dropped.
		return nil, fmt.Errorf("attach in mount namespace %d: %w", ns.Inode, ctx.Err())
	}
}

func (n RealNamespaces) attachLocked(ns NamespaceRef, livePath string, attaches []Attach) ([]error, error) {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return nil, fmt.Errorf("%w: unshare(CLONE_FS): %w", ErrSetns, err)
	}
	// 1. Clone every source in our own namespace: after setns, host paths do not resolve.
	trees := make([]int, len(attaches))
	errs := make([]error, len(attaches))
	defer func() {
		for _, fd := range trees {
			if fd > 0 {
				_ = unix.Close(fd)
			}
		}
	}()
	root, err := unix.Openat2(unix.AT_FDCWD, livePath, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrSource, livePath, err)
	}
	defer func() { _ = unix.Close(root) }() // a descriptor we only read through: nothing is lost on close
	for i, a := range attaches {
		if a.Protect {
			continue // nothing to clone
		}
		fd, err := cloneBeneath(root, a)
		if err != nil {
			errs[i] = fmt.Errorf("%w: %s/%s: %w", ErrSource, livePath, a.Offset, err)
			continue
		}
		trees[i] = fd
	}

	// 2. Enter the container's namespace through a pid that still lives in it, and come back
	// before the thread ends.
	own, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open own mount namespace: %w", ErrSetns, err)
	}
	defer func() { _ = unix.Close(own) }() // a descriptor we only read through: nothing is lost on close
	nsfd, err := n.openNamespace(ns)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(nsfd) }() // a descriptor we only read through: nothing is lost on close
	if err := unix.Setns(nsfd, unix.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("%w %d: setns: %w", ErrSetns, ns.Inode, err)
	}
	defer func() { _ = unix.Setns(own, unix.CLONE_NEWNS) }()

	// 3. Stack each clone on the dead mount (or make a propagated mount read-only again); from
	// here paths are the container's.
	for i, a := range attaches {
		switch {
		case a.Protect:
			errs[i] = protectAt(a)
		case trees[i] > 0:
			errs[i] = attachAt(trees[i], a)
		}
	}
	return errs, nil
}

// cloneBeneath opens offset beneath the live mount (no symlinks, no other mounts) and returns a
// detached clone of it with the container mount's flags and propagation already set.
func cloneBeneath(root int, a Attach) (int, error) {
	rel := a.Offset
	if rel == "" {
		rel = "."
	}
	src, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return -1, fmt.Errorf("openat2: %w", err)
	}
	defer func() { _ = unix.Close(src) }() // a descriptor we only read through: nothing is lost on close
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	attr := &unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if a.Slave {
		attr.Propagation = unix.MS_SLAVE
	}
	// Flags are only ever added: the new mount is at least as restricted as both the container's
	// dead mount and the live mount it is cloned from.
	for _, f := range []struct {
		on   bool
		flag uint64
	}{{a.ReadOnly, unix.MOUNT_ATTR_RDONLY}, {a.NoSuid, unix.MOUNT_ATTR_NOSUID}, {a.NoDev, unix.MOUNT_ATTR_NODEV}, {a.NoExec, unix.MOUNT_ATTR_NOEXEC}} {
		if f.on {
			attr.Attr_set |= f.flag
		}
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		_ = unix.Close(tree)
		return -1, fmt.Errorf("mount_setattr on the detached clone: %w", err)
	}
	return tree, nil
}

func (n RealNamespaces) openNamespace(ns NamespaceRef) (int, error) {
	for _, pid := range ns.Pids {
		fd, err := unix.Open(filepath.Join(n.ProcRoot, strconv.Itoa(pid), "ns", "mnt"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Ino != ns.Inode {
			_ = unix.Close(fd) // the pid was reused by a process elsewhere
			continue
		}
		return fd, nil
	}
	return -1, fmt.Errorf("%w: %d (pids %v)", ErrNamespaceGone, ns.Inode, ns.Pids)
}

// openTarget resolves the target inside the container without following symlinks and checks
// that it still reaches the planned mount.
func openTarget(a Attach) (int, error) {
	dst, err := unix.Openat2(unix.AT_FDCWD, a.Target, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("%w: open %s: %w", ErrTargetChanged, a.Target, err)
	}
	// DONT_SYNC: the mount ID comes from the VFS; no request reaches the dead FUSE daemon.
	var stx unix.Statx_t
	if err := unix.Statx(dst, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &stx); err != nil {
		_ = unix.Close(dst)
		return -1, fmt.Errorf("%w: statx %s: %w", ErrTargetChanged, a.Target, err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 || a.ExpectMountID < 0 || stx.Mnt_id != uint64(a.ExpectMountID) {
		_ = unix.Close(dst)
		return -1, fmt.Errorf("%w: %s is mount %d, planned %d", ErrTargetChanged, a.Target, stx.Mnt_id, a.ExpectMountID)
	}
	return dst, nil
}

// protectAt makes the planned mount at the target read-only (mount_setattr, not recursive).
func protectAt(a Attach) error {
	dst, err := openTarget(a)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(dst) }() // a descriptor we only read through: nothing is lost on close
	if err := unix.MountSetattr(dst, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("%w: mount_setattr read-only on %s: %w", ErrAttach, a.Target, err)
	}
	return nil
}

// attachAt resolves the target inside the container without following symlinks, checks it still
// reaches the planned dead mount, and moves the clone on top of it.
func attachAt(tree int, a Attach) error {
	dst, err := openTarget(a)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(dst) }() // a descriptor we only read through: nothing is lost on close
	if err := unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: move_mount onto %s: %w", ErrAttach, a.Target, err)
	}
	return nil
}
