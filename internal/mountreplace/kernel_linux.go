//go:build linux

package mountreplace

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/internal/ossthread"
)

// MoveMountBeneath is MOVE_MOUNT_BENEATH of include/uapi/linux/mount.h (Linux 6.5):
//
//	#define MOVE_MOUNT_BENEATH	0x00000200 /* Mount beneath top mount */
//
// golang.org/x/sys v0.50.0 does not name it.
const MoveMountBeneath = 0x200

// RealKernel makes the kernel calls in the calling thread's mount namespace. Its /proc
// descriptor is opened where it is made, so the mount table still resolves after setns into a
// namespace whose /proc (if any) does not show the agent's threads.
type RealKernel struct {
	proc int
	// beforeDetach runs between Detach's checks and its umount2 (node tests swap a parent
	// directory there); nil in the agent.
	beforeDetach func()
	// tableOnly makes Detach check by the mount table even where statmount answers (node tests
	// keep that path, the one of kernels before 6.8, tested).
	tableOnly bool
	// ownFSThread: the caller's thread has an fs_struct of its own and is retired with its
	// goroutine (OnOwnFSThread).
	ownFSThread bool
}

// OnOwnFSThread returns a copy of k (sharing its /proc descriptor, which k's owner releases)
// for a caller on a locked thread with an fs_struct of its own — unshare(CLONE_FS), as setns
// into a mount namespace requires — that ends with its goroutine: Detach then changes that
// thread's working directory for its umount2 (and back) instead of starting a thread to do it.
// A container remount's detach started one per container, a thread created, entering the
// namespace and exiting while the node is busiest.
func (k *RealKernel) OnOwnFSThread() *RealKernel {
	c := *k
	c.ownFSThread = true
	return &c
}

// NewKernel opens procRoot ("/proc" when empty) for RealKernel.MountInfo.
func NewKernel(procRoot string) (*RealKernel, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	fd, err := unix.Open(procRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", procRoot, err)
	}
	return &RealKernel{proc: fd}, nil
}

// Release closes the /proc descriptor.
func (k *RealKernel) Release() error { return unix.Close(k.proc) }

// MountInfo implements Kernel: thread-self, because after setns only this thread is in the
// namespace.
func (k *RealKernel) MountInfo() (string, error) {
	fd, err := unix.Openat(k.proc, "thread-self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), "mountinfo")
	defer func() { _ = f.Close() }() // read only: nothing is lost on close
	b, err := io.ReadAll(f)
	return string(b), err
}

// openPath opens path below dir (AT_FDCWD: the calling thread's root or working directory)
// without following any symlink (a planted link never redirects a mount call) and returns the
// descriptor and its mount ID. AT_STATX_DONT_SYNC: the ID comes from the VFS, no request reaches
// a dead FUSE daemon.
func openPath(dir int, path string, flags uint64) (int, int, error) {
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW | flags,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, 0, fmt.Errorf("open %s: %w", path, err)
	}
	id, err := mountID(fd)
	if err != nil {
		_ = unix.Close(fd)
		return -1, 0, fmt.Errorf("statx %s: %w", path, err)
	}
	return fd, id, nil
}

func mountID(fd int) (int, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, err
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, fmt.Errorf("statx without STATX_MNT_ID: %w", unix.ENOTSUP)
	}
	if stx.Mnt_id > math.MaxInt {
		return 0, fmt.Errorf("statx: mount ID %d out of range", stx.Mnt_id)
	}
	return int(stx.Mnt_id), nil
}

// openTop opens path and checks its top mount is top.
func openTop(path string, top int) (int, error) {
	fd, id, err := openPath(unix.AT_FDCWD, path, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrTargetChanged, err)
	}
	if id != top {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("%w: top of %s is mount %d, want %d", ErrTargetChanged, path, id, top)
	}
	return fd, nil
}

// TopID implements Kernel.
func (k *RealKernel) TopID(path string) (int, error) {
	fd, id, err := openPath(unix.AT_FDCWD, path, 0)
	if err != nil {
		return 0, err
	}
	_ = unix.Close(fd)
	return id, nil
}

// Clone implements Kernel: a clone of just the mount at path (not its submounts; a path below
// a mount's root gives a clone showing that directory). A clone of a shared mount is a peer of
// it (seen on 6.18), so SetAttrs can make it a slave of the live mount's group.
func (k *RealKernel) Clone(path string) (int, error) {
	src, _, err := openPath(unix.AT_FDCWD, path, 0)
	if err != nil {
		return -1, err
	}
	defer func() { _ = unix.Close(src) }() // a descriptor we only read through: nothing is lost on close
	return CloneAt(src)
}

// CloneAt clones the mount at src, an O_PATH descriptor, like Clone: callers that resolve a
// path themselves (openat2 RESOLVE_BENEATH below a live mount) hand their descriptor here.
func CloneAt(src int) (int, error) {
	fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	return fd, nil
}

// TreeID implements Kernel.
func (k *RealKernel) TreeID(tree int) (int, error) { return mountID(tree) }

// SetAttrs implements Kernel.
func (k *RealKernel) SetAttrs(tree int, a Attrs) error {
	attr := &unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if a.Slave {
		attr.Propagation = unix.MS_SLAVE
	}
	for _, f := range []struct {
		on   bool
		flag uint64
	}{{a.ReadOnly, unix.MOUNT_ATTR_RDONLY}, {a.NoSuid, unix.MOUNT_ATTR_NOSUID}, {a.NoDev, unix.MOUNT_ATTR_NODEV}, {a.NoExec, unix.MOUNT_ATTR_NOEXEC}} {
		if f.on {
			attr.Attr_set |= f.flag
		} else {
			attr.Attr_clr |= f.flag
		}
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	return nil
}

// SetPropagation implements Kernel. Shared and slave together: slave first (of the group the
// mount is a peer of), then shared in a group of its own.
func (k *RealKernel) SetPropagation(tree int, p Propagation) error {
	var steps []uint64
	switch {
	case p.Slave:
		steps = append(steps, unix.MS_SLAVE)
	case !p.Shared:
		steps = append(steps, unix.MS_PRIVATE)
	}
	if p.Shared {
		steps = append(steps, unix.MS_SHARED)
	}
	for _, s := range steps {
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: s}); err != nil {
			return fmt.Errorf("mount_setattr propagation %#x: %w", s, err)
		}
	}
	return nil
}

func (k *RealKernel) move(tree int, path string, top int, flags int) error {
	dst, err := openTop(path, top)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(dst) }() // a descriptor we only read through: nothing is lost on close
	return unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH|flags)
}

// MoveBeneath implements Kernel.
func (k *RealKernel) MoveBeneath(tree int, path string, top int) error {
	err := k.move(tree, path, top, MoveMountBeneath)
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%w: move_mount(MOVE_MOUNT_BENEATH) %s: %w", ErrRefused, path, err)
	}
	return err
}

// MoveOnTop implements Kernel.
func (k *RealKernel) MoveOnTop(tree int, path string, top int) error {
	return k.move(tree, path, top, 0)
}

// Detach implements Kernel. umount2 takes a name, not a descriptor, so the name it is given is
// a single component looked up in a directory the agent holds open and verified — never a path
// resolved again from the namespace's root after the check (a tenant who swaps a parent
// component for a symlink between check and act would otherwise have another mount detached,
// such as the runtime's read-only bind of /proc/sys):
//
//  1. the parent directory is opened with openat2 (RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS);
//     its mount must be the one the stack at the mount point sits on (mount table);
//  2. the last name is opened below that descriptor, the same way; its mount ID must be top;
//  3. on a fresh thread that joins the calling thread's mount namespace with a private
//     fs_struct, fchdir to the parent descriptor and umount2(name, MNT_DETACH|UMOUNT_NOFOLLOW);
//     renaming the parent or any ancestor after step 1 changes nothing: the directory is held,
//     and the name in it is a mount point (the kernel refuses to rename one);
//  4. mount top must be gone from the table (what was detached is what was verified; the
//     descriptor of step 2 keeps its ID from being reused meanwhile).
func (k *RealKernel) Detach(path string, top int) error {
	dir, name := filepath.Split(filepath.Clean(path))
	if name == "" || name == "." || name == ".." || dir == "" {
		return fmt.Errorf("%w: %q has no last name to detach by", ErrInvalid, path)
	}
	parent, parentID, err := openPath(unix.AT_FDCWD, dir, unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTargetChanged, err)
	}
	defer func() { _ = unix.Close(parent) }() // an O_PATH descriptor
	victim, id, err := openPath(parent, name, 0)
	if err != nil {
		return fmt.Errorf("%w: %s in the verified parent: %w", ErrTargetChanged, name, err)
	}
	defer func() { _ = unix.Close(victim) }() // an O_PATH descriptor; held so the ID stays top's
	if id != top {
		return fmt.Errorf("%w: top of %s is mount %d, want %d", ErrTargetChanged, path, id, top)
	}
	topU, err := k.checkSitsOn(victim, top, parent, parentID, path)
	if err != nil {
		return err
	}
	if k.beforeDetach != nil {
		k.beforeDetach()
	}
	if err := k.detachAt(parent, name); err != nil {
		return fmt.Errorf("umount2 %s (%q in the verified parent): %w", path, name, err)
	}
	still, err := k.attached(topU, top)
	if err != nil {
		return err
	}
	if still {
		return fmt.Errorf("%w: mount %d is still attached after umount2 of %q in the verified parent of %s", ErrTargetChanged, top, name, path)
	}
	return nil
}

// checkSitsOn checks that the stack holding mount top (victim is on it) sits on parentID, the
// mount of the directory parent: by statmount where the kernel answers, else by the table. It
// returns top's unique ID for attached (0 when the table was read).
func (k *RealKernel) checkSitsOn(victim, top, parent, parentID int, path string) (uint64, error) {
	notOn := fmt.Errorf("%w: the stack of mount %d at %s does not sit on the parent directory's mount %d", ErrTargetChanged, top, path, parentID)
	if !k.tableOnly {
		topU, uerr := uniqueID(victim)
		parentU, perr := uniqueID(parent)
		if err := errors.Join(uerr, perr); err != nil && !errors.Is(err, errNoStatmount) {
			return 0, fmt.Errorf("%w: statx: %w", ErrTargetChanged, err)
		} else if err == nil {
			base, err := stackBaseOf(topU)
			switch {
			case err == nil && base != parentU:
				return 0, notOn
			case err == nil:
				return topU, nil
			case errors.Is(err, ErrTargetChanged):
				return 0, fmt.Errorf("%w (%w)", notOn, err)
			case errors.Is(err, unix.ENOENT):
				return 0, fmt.Errorf("%w: a mount of the stack at %s is gone: %w", ErrTargetChanged, path, err)
			case !errors.Is(err, errNoStatmount):
				return 0, err
			}
		}
	}
	table, err := k.table()
	if err != nil {
		return 0, err
	}
	if base, ok := stackParent(table, top); !ok || base != parentID {
		return 0, notOn
	}
	return 0, nil
}

// attached reports whether mount top (unique ID topU, 0 when unknown) is still attached in the
// calling thread's namespace: by statmount (ENOENT once detached), else by the table.
func (k *RealKernel) attached(topU uint64, top int) (bool, error) {
	if topU != 0 {
		_, err := statmount(topU)
		switch {
		case err == nil:
			return true, nil // unique IDs are never reused: this is top
		case errors.Is(err, unix.ENOENT):
			return false, nil
		case !errors.Is(err, errNoStatmount):
			return false, err
		}
	}
	table, err := k.table()
	if err != nil {
		return false, err
	}
	_, still := byID(table, top)
	return still, nil
}

// detachAt detaches the top mount at name in dir (an O_PATH directory descriptor) on a thread
// of its own: a private fs_struct (unshare CLONE_FS) in the calling thread's mount namespace,
// whose working directory is dir. The calling thread's working directory is never changed (it
// may share it with the whole agent), and the thread is retired afterwards.
func (k *RealKernel) detachAt(dir int, name string) error {
	if k.ownFSThread {
		return detachHere(dir, name)
	}
	ns, err := unix.Openat(k.proc, "thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open own mount namespace: %w", err)
	}
	defer func() { _ = unix.Close(ns) }() // a namespace descriptor
	ossthread.Run(func() {
		if e := unix.Unshare(unix.CLONE_FS); e != nil {
			err = fmt.Errorf("unshare(CLONE_FS): %w", e)
		} else if e := unix.Setns(ns, unix.CLONE_NEWNS); e != nil {
			err = fmt.Errorf("setns: %w", e)
		} else if e := unix.Fchdir(dir); e != nil {
			err = fmt.Errorf("fchdir: %w", e)
		} else {
			err = unix.Unmount(name, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
	})
	return err
}

// detachHere is detachAt on the calling thread, whose fs_struct is its own: its working
// directory is dir for the umount2, then what it was.
func detachHere(dir int, name string) error {
	cwd, err := unix.Open(".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the working directory: %w", err)
	}
	defer func() { _ = unix.Close(cwd) }() // an O_PATH descriptor
	if err := unix.Fchdir(dir); err != nil {
		return fmt.Errorf("fchdir: %w", err)
	}
	err = unix.Unmount(name, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	if cerr := unix.Fchdir(cwd); cerr != nil {
		return errors.Join(err, fmt.Errorf("fchdir back: %w", cerr))
	}
	return err
}

// table reads and parses the calling thread's mount table.
func (k *RealKernel) table() ([]mountinfo.Mount, error) {
	s, err := k.MountInfo()
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	t, err := mountinfo.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("parse mountinfo: %w", err)
	}
	return t, nil
}

// stackParent is the mount the stack holding mount top sits on: top's parents are followed
// while they are at the same mount point.
func stackParent(table []mountinfo.Mount, top int) (int, bool) {
	m, ok := byID(table, top)
	for ok {
		p, found := byID(table, m.ParentID)
		if !found || p.ID == m.ID {
			return 0, false
		}
		if p.MountPoint != m.MountPoint {
			return p.ID, true
		}
		m = p
	}
	return 0, false
}

// Close implements Kernel.
func (k *RealKernel) Close(fd int) error { return unix.Close(fd) }

// MakeReadOnly makes the top mount at path, which must be mount top, read-only in place
// (mount_setattr MOUNT_ATTR_RDONLY, not recursive): for a mount that already shows the live
// connection but must not be writable.
func (k *RealKernel) MakeReadOnly(path string, top int) error {
	fd, err := openTop(path, top)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }() // an O_PATH descriptor
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("%w: mount_setattr read-only on %s: %w", ErrAttrs, path, err)
	}
	return nil
}

// Probe finds whether the kernel mounts beneath: in a mount namespace of its own (nothing
// propagates out of it) it mounts a tmpfs on a fresh directory under scratch ("" for the
// system's temp dir), moves a second tmpfs beneath it, detaches the first and checks the second
// is what remains. run must call its function on a locked OS thread that is never the main
// thread and is never handed back to the Go scheduler (the thread leaves the agent's namespace
// for good; the runtime retires it).
func Probe(scratch string, run func(func())) Support {
	dir, err := os.MkdirTemp(scratch, "pvrescue-beneath-probe-")
	if err != nil {
		return Support{Err: fmt.Errorf("probe directory: %w", err)}
	}
	defer func() { _ = os.Remove(dir) }() // an empty scratch directory; a leftover is harmless
	done := make(chan error, 1)
	go run(func() { done <- probeIn(dir) })
	if err := <-done; err != nil {
		return Support{Err: err}
	}
	return Support{Beneath: true}
}

func probeIn(dir string) error {
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare a mount namespace for the probe: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the probe namespace private: %w", err)
	}
	top, err := tmpfs()
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(top) }() // a descriptor we only read through: nothing is lost on close
	lower, err := tmpfs()
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(lower) }() // a descriptor we only read through: nothing is lost on close
	if err := unix.MoveMount(top, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("probe: attach a tmpfs: %w", err)
	}
	lowerID, err := mountID(lower)
	if err != nil {
		return fmt.Errorf("probe: statx: %w", err)
	}
	if err := unix.MoveMount(lower, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH|MoveMountBeneath); err != nil {
		return fmt.Errorf("move_mount(MOVE_MOUNT_BENEATH) (Linux >= 6.5): %w", err)
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("probe: detach the top tmpfs: %w", err)
	}
	fd, id, err := openPath(unix.AT_FDCWD, dir, 0)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	_ = unix.Close(fd)
	if id != lowerID {
		return fmt.Errorf("probe: after the beneath move and the detach the top is mount %d, want %d", id, lowerID)
	}
	return nil
}

// tmpfs returns a detached tmpfs mount (fsopen, fsconfig, fsmount: Linux >= 5.2).
func tmpfs() (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("probe: fsopen tmpfs: %w", err)
	}
	defer func() { _ = unix.Close(fs) }() // a descriptor we only read through: nothing is lost on close
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("probe: fsconfig create: %w", err)
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("probe: fsmount: %w", err)
	}
	return m, nil
}

var _ Kernel = (*RealKernel)(nil)
