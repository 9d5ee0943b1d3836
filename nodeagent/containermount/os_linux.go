//go:build linux

package containermount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/ossthread"
)

// NewOS returns the real node implementation reading procRoot (normally "/proc"). support is
// what mountreplace.Probe found at start-up: without MOVE_MOUNT_BENEATH every replacement
// stacks, and says so.
func NewOS(procRoot string, support mountreplace.Support) (OS, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	k, err := mountreplace.NewKernel(procRoot)
	if err != nil {
		return OS{}, err
	}
	return OS{Proc: RealProcFS{Root: procRoot}, NS: RealNamespaces{ProcRoot: procRoot, Kernel: k, Support: support}}, nil
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

// MountInfoUpTo implements MountInfoCapped: at most max bytes are read.
func (p RealProcFS) MountInfoUpTo(pid, max int) (string, error) {
	f, err := os.Open(filepath.Join(p.Root, strconv.Itoa(pid), "mountinfo"))
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return "", err
	}
	if len(b) > max {
		return "", fmt.Errorf("%w: more than %d bytes", ErrMountInfoTooLarge, max)
	}
	return string(b), nil
}

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

// Stat implements ProcFS.
func (p RealProcFS) Stat(pid int) (ProcStat, error) {
	s, err := p.read(pid, "stat")
	if err != nil {
		return ProcStat{}, err
	}
	return ParseStat(s)
}

// MountNSOwner implements ProcFS.
func (p RealProcFS) MountNSOwner(pid int) (mnt, owner uint64, err error) {
	return p.nsRelative(pid, "mnt", unix.NS_GET_USERNS)
}

// UserNSParent implements ProcFS: parent 0 when the kernel names none (EPERM: the initial user
// namespace, or a parent outside the agent's).
func (p RealProcFS) UserNSParent(pid int) (user, parent uint64, err error) {
	user, parent, err = p.nsRelative(pid, "user", unix.NS_GET_PARENT)
	if errors.Is(err, unix.EPERM) {
		return user, 0, nil
	}
	return user, parent, err
}

// nsRelative opens /proc/<pid>/ns/<kind> and returns its inode and that of the namespace the
// ioctl req (NS_GET_USERNS, NS_GET_PARENT) returns a descriptor of.
func (p RealProcFS) nsRelative(pid int, kind string, req uint) (self, rel uint64, err error) {
	fd, err := unix.Open(filepath.Join(p.Root, strconv.Itoa(pid), "ns", kind), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = unix.Close(fd) }() // a namespace descriptor
	self, rel, err = relatedNS(fd, req)
	return self, rel, err
}

// relatedNS returns the inode of the namespace fd and of the one the ioctl req returns.
func relatedNS(fd int, req uint) (self, rel uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, err
	}
	rfd, err := unix.IoctlRetInt(fd, req)
	if err != nil {
		return st.Ino, 0, fmt.Errorf("ioctl %#x: %w", req, err)
	}
	defer func() { _ = unix.Close(rfd) }() // a namespace descriptor
	var rst unix.Stat_t
	if err := unix.Fstat(rfd, &rst); err != nil {
		return st.Ino, 0, err
	}
	return st.Ino, rst.Ino, nil
}

// RealNamespaces performs the kernel calls (Linux >= 5.12 for open_tree, move_mount, openat2,
// STATX_MNT_ID and mount_setattr; 6.5 for replacing beneath). Make it with NewOS.
type RealNamespaces struct {
	ProcRoot string
	// Kernel makes the mount calls of Place (its /proc descriptor reads the entered namespace's
	// mount table through thread-self).
	Kernel *mountreplace.RealKernel
	// Support is the start-up probe's answer.
	Support mountreplace.Support
}

type attachResult struct {
	out []Outcome
	err error
}

// AttachInNamespace implements Namespaces.
//
// The work runs on an OS thread of its own that never serves another goroutine: it gets a
// private fs_struct (unshare CLONE_FS, which setns(CLONE_NEWNS) demands) and visits the
// container's namespace, so it is never unlocked and the Go runtime ends it when the goroutine
// returns. It is never the main thread: Go cannot end that one (it would stay wedged, and
// /proc/self/* of the whole agent — s3mount reads /proc/self/mountinfo — would describe the
// container's namespace; seen in the node test before this rule).
func (n RealNamespaces) AttachInNamespace(ctx context.Context, ns NamespaceRef, livePath string, attaches []Attach) ([]Outcome, error) {
	if n.Kernel == nil {
		return nil, fmt.Errorf("%w: RealNamespaces without a kernel (use NewOS)", ErrUnsupported)
	}
	done := make(chan attachResult, 1)
	go ossthread.Run(func() {
		out, err := n.attachLocked(ns, livePath, attaches)
		done <- attachResult{out, err}
	})
	select {
	case r := <-done:
		return r.out, r.err
	case <-ctx.Done():
		// The calls do not block on a dead FUSE connection; if one hangs anyway the thread
		// finishes on its own and its result is dropped.
		return nil, fmt.Errorf("attach in mount namespace %d: %w", ns.Inode, ctx.Err())
	}
}

func (n RealNamespaces) attachLocked(ns NamespaceRef, livePath string, attaches []Attach) ([]Outcome, error) {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return nil, fmt.Errorf("%w: unshare(CLONE_FS): %w", ErrSetns, err)
	}
	// 1. Clone every source in our own namespace: after setns, host paths do not resolve.
	trees := make([]int, len(attaches))
	out := make([]Outcome, len(attaches))
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
		fd, err := cloneBeneath(root, a.Offset)
		if err != nil {
			out[i].Err = fmt.Errorf("%w: %s/%s: %w", ErrSource, livePath, a.Offset, err)
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

	// 3. From here paths are the container's. This thread's fs_struct is its own (unshared
	// above, as setns requires) and the thread ends with it: a detach needs no thread of its own.
	Place(n.Kernel.OnOwnFSThread(), n.Support, trees, attaches, out)
	return out, nil
}

// cloneBeneath opens offset beneath the live mount (no symlinks, no other mounts: a symlink
// planted in the bucket never redirects the clone outside the volume) and returns a detached
// clone of it; Place gives it its flags and propagation.
func cloneBeneath(root int, offset string) (int, error) {
	rel := offset
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
	return mountreplace.CloneAt(src)
}

func (n RealNamespaces) openNamespace(ns NamespaceRef) (int, error) {
	for _, pid := range ns.Pids {
		fd, err := unix.Open(filepath.Join(n.ProcRoot, strconv.Itoa(pid), "ns", "mnt"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		ino, owner, err := relatedNS(fd, unix.NS_GET_USERNS)
		if err != nil || ino != ns.Inode {
			_ = unix.Close(fd) // the pid was reused by a process elsewhere
			continue
		}
		if ns.Owner == 0 || owner != ns.Owner {
			_ = unix.Close(fd)
			return -1, fmt.Errorf("%w: mount namespace %d is owned by user namespace %d, want %d", ErrNotRuntimeNamespace, ns.Inode, owner, ns.Owner)
		}
		return fd, nil
	}
	return -1, fmt.Errorf("%w: %d (pids %v)", ErrNamespaceGone, ns.Inode, ns.Pids)
}
