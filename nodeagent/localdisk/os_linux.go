//go:build linux

package localdisk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Lstat implements OS.
func (h *RealOS) Lstat(path string) (PathState, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return PathState{Kind: PathAbsent}, nil
	}
	if err != nil {
		return PathState{}, err
	}
	m := fi.Mode()
	switch {
	case m&fs.ModeSymlink != 0:
		t, err := os.Readlink(path)
		if err != nil {
			return PathState{}, err
		}
		return PathState{Kind: PathSymlink, LinkTarget: t}, nil
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
		return PathState{Kind: PathBlockDevice}, nil
	case m.IsDir():
		return PathState{Kind: PathDir}, nil
	default:
		return PathState{Kind: PathOther}, nil
	}
}

// ListLoops implements OS.
func (h *RealOS) ListLoops() ([]Loop, error) {
	block := filepath.Join(h.SysDir, "block")
	ents, err := os.ReadDir(block)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", block, err)
	}
	var out []Loop
	for _, e := range ents {
		n, err := ParseLoopName(e.Name())
		if err != nil {
			continue
		}
		l := Loop{Minor: n}
		dir := filepath.Join(block, e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "loop", "backing_file")); err == nil {
			l.BackingFile, l.Deleted = ParseBackingFile(string(b))
		}
		if ro, err := os.ReadFile(filepath.Join(dir, "ro")); err == nil {
			l.ReadOnly = strings.TrimSpace(string(ro)) == "1"
		}
		if hs, err := os.ReadDir(filepath.Join(dir, "holders")); err == nil {
			for _, x := range hs {
				l.Holders = append(l.Holders, x.Name())
			}
		}
		if l.BackingFile != "" && !l.Deleted {
			var st unix.Stat_t
			if unix.Stat(l.BackingFile, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK {
				l.BackingIsDev = true
				l.BackingMajor, l.BackingMinor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
			}
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Minor < out[j].Minor })
	return out, nil
}

// ensureLoopNode makes the kernel create loop minor and its /dev node exist (a container's /dev
// has no udev), refusing a node that is something else.
func (h *RealOS) ensureLoopNode(minor int) (string, error) {
	ctl, err := os.OpenFile(filepath.Join(h.DevDir, "loop-control"), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open loop-control: %w", err)
	}
	err = unix.IoctlSetInt(int(ctl.Fd()), unix.LOOP_CTL_ADD, minor)
	_ = ctl.Close() // a control fd: nothing written through it can be lost on close
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return "", fmt.Errorf("LOOP_CTL_ADD %d: %w", minor, err)
	}
	node := LoopDevPath(h.DevDir, minor)
	var st unix.Stat_t
	err = unix.Stat(node, &st)
	if errors.Is(err, unix.ENOENT) {
		err = unix.Mknod(node, unix.S_IFBLK|0o660, int(unix.Mkdev(LoopMajor, minor32(minor)))) //nolint:gosec // G115: major 7, minor < 2^20: fits an int
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("mknod %s: %w", node, err)
		}
		err = unix.Stat(node, &st)
	}
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", node, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != LoopMajor || unix.Minor(st.Rdev) != minor32(minor) {
		return "", fmt.Errorf("%s is not block device %d:%d: %w", node, LoopMajor, minor, ErrNotLoop)
	}
	return node, nil
}

// backing is loop minor's backing file ("" when unbound or absent).
func (h *RealOS) backing(minor int) (string, error) {
	b, err := os.ReadFile(filepath.Join(h.SysDir, "block", fmt.Sprintf("loop%d", minor), "loop", "backing_file"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	p, _ := ParseBackingFile(string(b))
	return p, err
}

// Attach implements OS. The kernel's LOOP_SET_FD fails with EBUSY on a bound loop, so a loop
// bound by someone else between our listing and this call is never taken.
func (h *RealOS) Attach(image string, minor int) error {
	if !InDir(h.StateDir, image) {
		return fmt.Errorf("attach %s: %w", image, ErrOutsideStateDir)
	}
	node, err := h.ensureLoopNode(minor)
	if err != nil {
		return err
	}
	// Read-only: the kernel marks a loop read-only when its backing file is opened without
	// write access, so a write to the fake fails loudly (EPERM) instead of landing on the image.
	img, err := os.OpenFile(image, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open image: %w", err)
	}
	defer func() { _ = img.Close() }() // opened read-only: nothing to lose on close
	dev, err := os.OpenFile(node, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", node, err)
	}
	defer func() { _ = dev.Close() }() // used for ioctls only: nothing to lose on close
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(img.Fd())); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("%s: %w", node, ErrLoopBusy)
		}
		return fmt.Errorf("LOOP_SET_FD %s: %w", node, err)
	}
	p, err := h.backing(minor)
	if err != nil {
		return fmt.Errorf("loop%d backing file after attach: %w", minor, err)
	}
	if p != image {
		return fmt.Errorf("loop%d backing file is %q after attach, want %q", minor, p, image)
	}
	return nil
}

// Detach implements OS.
func (h *RealOS) Detach(minor int) error {
	p, err := h.backing(minor)
	if err != nil {
		return fmt.Errorf("loop%d: %w", minor, err)
	}
	if p == "" {
		return nil
	}
	if !InDir(h.StateDir, p) {
		return fmt.Errorf("loop%d backed by %s: %w", minor, p, ErrNotOurs)
	}
	node, err := h.ensureLoopNode(minor)
	if err != nil {
		return err
	}
	// Read-only open is enough for LOOP_CLR_FD and cannot write to the device.
	dev, err := os.OpenFile(node, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", node, err)
	}
	defer func() { _ = dev.Close() }() // used for ioctls only: nothing to lose on close
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("LOOP_CLR_FD %s: %w", node, err)
	}
	return nil
}

func (h *RealOS) confine(path string) error {
	if !InDir(h.StateDir, path) {
		return fmt.Errorf("%s: %w", path, ErrOutsideStateDir)
	}
	return nil
}

// MkdirAll implements OS.
func (h *RealOS) MkdirAll(dir string) error {
	if dir != h.StateDir {
		if err := h.confine(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// Probe writability now so a read-only state directory is reported before anything else.
	probe := filepath.Join(dir, ".probe")
	f, err := os.OpenFile(probe, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("state dir not writable: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("state dir not writable: %w", err)
	}
	return os.Remove(probe)
}

// ReadDir implements OS.
func (h *RealOS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// ReadFile implements OS.
func (h *RealOS) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

// writeAtomic writes a new file via a temporary name, fsyncs it, renames it into place and
// fsyncs the directory, so a crash leaves either the old or the whole new file.
func (h *RealOS) writeAtomic(path string, fill func(*os.File) error) error {
	if err := h.confine(path); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	// On failure the temporary file is removed as best it can be: the first error is the one
	// returned, and a leftover temporary name is removed by the next write.
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	// The directory's fsync makes the rename durable where the filesystem supports it; a
	// failure leaves the file in place, only its durability across a crash unproven.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// WriteFileAtomic implements OS.
func (h *RealOS) WriteFileAtomic(path string, data []byte) error {
	return h.writeAtomic(path, func(f *os.File) error { _, err := f.Write(data); return err })
}

// FileSize implements OS.
func (h *RealOS) FileSize(path string) (int64, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file: %w", path, fs.ErrInvalid)
	}
	return fi.Size(), nil
}

// CreateImage implements OS.
func (h *RealOS) CreateImage(path string, size int64) error {
	return h.writeAtomic(path, func(f *os.File) error {
		_, err := f.Write(make([]byte, size))
		return err
	})
}

// RemoveFile implements OS.
func (h *RealOS) RemoveFile(path string) error {
	if err := h.confine(path); err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file: %w", path, fs.ErrInvalid)
	}
	return os.Remove(path)
}

// Symlink implements OS: the link is made under a temporary name, then renamed with
// RENAME_NOREPLACE, so it never replaces a link or device that appeared meanwhile.
func (h *RealOS) Symlink(target, path string) error {
	if _, err := ParseLoopLinkTarget(h.DevDir, target); err != nil {
		return err
	}
	// A fixed temporary name, so a leftover from a crash is found and replaced on the next attempt.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".pvrescue-tmp")
	// A leftover of an interrupted attempt: remove it only if it is a link to a loop.
	if t, err := os.Readlink(tmp); err == nil {
		if _, err := ParseLoopLinkTarget(h.DevDir, t); err == nil {
			_ = os.Remove(tmp)
		}
	}
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("symlink %s: %w", tmp, err)
	}
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// Filesystem without RENAME_NOREPLACE: a hard link of the symlink also never replaces.
		err = unix.Linkat(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, 0)
		_ = os.Remove(tmp)
	}
	if err != nil {
		_ = os.Remove(tmp)
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s: %w", path, fs.ErrExist)
		}
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return nil
}

// RemoveSymlink implements OS.
func (h *RealOS) RemoveSymlink(path, target string) error {
	t, err := os.Readlink(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || t != target {
		return fmt.Errorf("%s (-> %q): %w", path, t, ErrNotOurs)
	}
	if _, err := ParseLoopLinkTarget(h.DevDir, t); err != nil {
		return fmt.Errorf("%s: %w", path, ErrNotOurs)
	}
	return os.Remove(path)
}

// minor32 is a loop minor as the device number functions take it.
func minor32(minor int) uint32 {
	return uint32(minor) //nolint:gosec // G115: minors start at localBlock.firstLoopMinor (validated 8..2^20) or are parsed from loopN names: never negative
}
