//go:build linux

package stack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// NewMounter returns the node's real mount table and mount calls.
func NewMounter() Mounter { return realMounter{} }

// NewStatfs returns the real statfs with timeouts.
func NewStatfs() StatfsChecker { return newRealStatfs() }

// NewFS returns the node's real file system.
func NewFS() FS { return realFS{} }

type realMounter struct{}

// NewReplacer returns the node's real replacement (internal/mountreplace) acting on support, the
// start-up probe's answer: without MOVE_MOUNT_BENEATH every replacement stacks and says why.
func NewReplacer(support mountreplace.Support) Replacer { return realReplacer{support: support} }

type realReplacer struct{ support mountreplace.Support }

func (x realReplacer) Replace(source, target string, old int, readOnly, noPeerGroup bool, table Table) (mountreplace.Result, error) {
	// A kernel handle per call: it holds one /proc descriptor, and replacements are rare.
	k, err := mountreplace.NewKernel("")
	if err != nil {
		return mountreplace.Result{}, err
	}
	defer func() { _ = k.Release() }() // a descriptor we only read through: nothing is lost on close
	rep := mountreplace.Replacer{Kernel: k, Support: x.support}
	return rep.Replace(mountreplace.Request{Target: target, Old: old, LivePath: source,
		Add: mountreplace.Attrs{ReadOnly: readOnly}, NoPeerGroup: noPeerGroup, Table: table})
}

func (realMounter) MountTable() (Table, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	t, err := ParseMountInfo(string(data))
	return t, err
}

func (realMounter) Bind(source, target string, readOnly bool) error {
	if readOnly {
		return bindReadOnly(source, target)
	}
	// The syscall takes paths as they are: no canonicalisation, so no stat of the dead target.
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("%w: bind %s onto %s: %w", ErrMount, source, target, err)
	}
	return nil
}

// bindReadOnly attaches a read-only bind of source at target. A remount of an attached bind
// changes only the host's copy: the copies propagated into containers (HostToContainer) stay
// writable. So the clone is made read-only while still detached, and attached afterwards;
// propagation then copies a read-only mount.
func bindReadOnly(source, target string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("%w: clone %s: %w", ErrMount, source, err)
	}
	defer func() { _ = unix.Close(fd) }() // the detached clone: attached by then, or dropped with the fd
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("%w: make clone of %s read-only: %w", ErrMount, source, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: attach read-only bind of %s at %s: %w", ErrMount, source, target, err)
	}
	return nil
}

func (realMounter) Unmount(target string, detach bool) error {
	flags := 0
	if detach {
		flags = unix.MNT_DETACH
	}
	if err := unix.Unmount(target, flags); err != nil {
		return fmt.Errorf("%w: unmount %s: %w", ErrMount, target, err)
	}
	return nil
}

func (realMounter) MountTmpfs(target string, sizeBytes int64) error {
	opts := fmt.Sprintf("size=%d,mode=0700", sizeBytes)
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("%w: tmpfs at %s: %w", ErrMount, target, err)
	}
	return nil
}

// realStatfs runs statfs in a goroutine so a hung FUSE daemon cannot block the loop. A call
// stuck in the kernel cannot be cancelled; once one has outlasted its timeout on a path, later
// checks of that path report ErrTimeout at once instead of piling up more stuck goroutines.
// Calls still within their timeout are not stuck: concurrent checks of one path (a pass's
// health check beside a restore's check of its new mount) each run.
type realStatfs struct {
	mu sync.Mutex
	// stuck counts, by path, the calls past their timeout that have not returned.
	stuck  map[string]int
	statfs func(path string) error
}

func newRealStatfs() *realStatfs {
	return &realStatfs{stuck: map[string]int{}, statfs: func(path string) error {
		var st unix.Statfs_t
		return unix.Statfs(path, &st)
	}}
}

func (s *realStatfs) Statfs(ctx context.Context, path string, timeout time.Duration) error {
	s.mu.Lock()
	stuck := s.stuck[path] > 0
	s.mu.Unlock()
	if stuck {
		return fmt.Errorf("statfs %s: %w (an earlier call has not returned)", path, ErrTimeout)
	}
	res := make(chan error, 1)
	var done, timedOut bool // guarded by s.mu
	go func() {
		err := s.statfs(path)
		s.mu.Lock()
		done = true
		if timedOut {
			if s.stuck[path]--; s.stuck[path] <= 0 {
				delete(s.stuck, path)
			}
		}
		s.mu.Unlock()
		res <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("statfs %s: %w", path, err)
		}
		return nil
	case <-t.C:
		s.mu.Lock()
		if !done {
			timedOut = true
			s.stuck[path]++
		}
		s.mu.Unlock()
		return fmt.Errorf("statfs %s: %w after %s", path, ErrTimeout, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

type realFS struct{}

func (realFS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }
func (realFS) ReadFile(path string) ([]byte, error)         { return os.ReadFile(path) }
func (realFS) Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (realFS) WriteFile(path string, data []byte, perm fs.FileMode) error {
	// Write a fresh file under a temporary name so the mode is exactly perm from the start.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	// On a failure below, the temporary file is removed as far as possible; the failure itself
	// is what the caller needs to know.
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, perm); err != nil { // umask may have narrowed it
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func (realFS) ReadDir(path string) ([]string, error) {
	ents, err := os.ReadDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}
