//go:build linux

package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// loopMu keeps the tests of one binary from racing each other for the same free device; other
// processes are kept out by the kernel (LOOP_SET_FD on a bound device fails with EBUSY).
var loopMu sync.Mutex

// AttachLoop attaches image to the first free loop device in r the way the agent does: the kernel
// device is added through /dev/loop-control (LOOP_CTL_ADD) and its node made with mknod where
// missing (a fresh machine has only loop0-7 and no udev), then bound with LOOP_SET_FD.
func AttachLoop(image string, r LoopRange) (*Loop, error) {
	loopMu.Lock()
	defer loopMu.Unlock()
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open image: %w", err)
	}
	defer func() { _ = img.Close() }() // an attached loop holds its own reference
	for n := r.First; n <= r.Last; n++ {
		if loopBacking(n) != "" {
			continue
		}
		l := &Loop{Minor: n, Dev: LoopDevPath(n), Image: image}
		if err := l.ensure(); err != nil {
			return nil, err
		}
		err := l.setFD(img)
		// A loop taken meanwhile (EBUSY) is skipped, a failed one returned; either way the node
		// this call made is removed as best it can be (a leftover node is inert).
		if errors.Is(err, unix.EBUSY) {
			_ = l.removeMade()
			continue
		}
		if err != nil {
			_ = l.removeMade()
			return nil, err
		}
		return l, nil
	}
	return nil, fmt.Errorf("%s: %w", r, ErrNoFreeLoop)
}

// Detach clears the loop device and removes the node and kernel device AttachLoop created.
func (l *Loop) Detach() error {
	loopMu.Lock()
	defer loopMu.Unlock()
	if b := loopBacking(l.Minor); b != "" && b != l.Image {
		return fmt.Errorf("%s is backed by %s now, not by %s: left alone", l.Dev, b, l.Image)
	}
	dev, err := os.OpenFile(l.Dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", l.Dev, err)
	}
	err = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
	_ = dev.Close() // used for the ioctl only
	if err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("LOOP_CLR_FD %s: %w", l.Dev, err)
	}
	return l.removeMade()
}

// ensure adds the kernel device and its /dev node where missing, remembering what it made. On a
// devtmpfs /dev the kernel makes the node of a device it adds, asynchronously: a node that
// appears between our stat and mknod is the kernel's, and ours to remove with the device.
func (l *Loop) ensure() error {
	err := loopControl(unix.LOOP_CTL_ADD, l.Minor)
	switch {
	case err == nil:
		l.addedLoop, l.madeNode = true, true
	case !errors.Is(err, unix.EEXIST):
		return fmt.Errorf("LOOP_CTL_ADD %d: %w", l.Minor, err)
	}
	var st unix.Stat_t
	err = unix.Stat(l.Dev, &st)
	if errors.Is(err, unix.ENOENT) {
		err = unix.Mknod(l.Dev, unix.S_IFBLK|0o660, int(unix.Mkdev(LoopMajor, uint32(l.Minor))))
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mknod %s: %w", l.Dev, err)
		}
		l.madeNode = l.madeNode || err == nil
		err = unix.Stat(l.Dev, &st)
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", l.Dev, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != LoopMajor || unix.Minor(st.Rdev) != uint32(l.Minor) {
		return fmt.Errorf("%s is not block device %d:%d", l.Dev, LoopMajor, l.Minor)
	}
	return nil
}

func (l *Loop) setFD(img *os.File) error {
	dev, err := os.OpenFile(l.Dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", l.Dev, err)
	}
	defer func() { _ = dev.Close() }() // used for the ioctl only
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(img.Fd())); err != nil {
		return fmt.Errorf("LOOP_SET_FD %s: %w", l.Dev, err)
	}
	return nil
}

// removeMade removes the kernel device and the node this Loop created.
func (l *Loop) removeMade() error {
	var errs []error
	if l.addedLoop {
		// EBUSY: still open somewhere; an unbound kernel device is harmless, and
		// `make fresh-devices` removes it.
		if err := loopControl(unix.LOOP_CTL_REMOVE, l.Minor); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("LOOP_CTL_REMOVE %d: %w", l.Minor, err))
		}
		l.addedLoop = false
	}
	if l.madeNode {
		if err := os.Remove(l.Dev); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		l.madeNode = false
	}
	return errors.Join(errs...)
}

func loopControl(req uint, minor int) error {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/loop-control (modprobe loop): %w", err)
	}
	defer func() { _ = ctl.Close() }() // a control fd: nothing to lose on close
	return unix.IoctlSetInt(int(ctl.Fd()), req, minor)
}

// loopBacking is the backing file of loopN, "" when it is not attached (or does not exist).
func loopBacking(minor int) string {
	b, err := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/loop/backing_file", minor))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// RemoveLoopNodes removes the /dev/loopN nodes in r that are not attached and for which keep
// (when not nil) is false, and the unbound kernel devices behind them. It returns what it removed.
func RemoveLoopNodes(r LoopRange, keep func(minor int) bool) ([]string, error) {
	loopMu.Lock()
	defer loopMu.Unlock()
	minors := map[int]bool{}
	if ents, err := os.ReadDir("/dev"); err == nil {
		for _, e := range ents {
			if n, ok := loopMinor(e.Name()); ok {
				minors[n] = true
			}
		}
	}
	if ents, err := os.ReadDir("/sys/block"); err == nil {
		for _, e := range ents {
			if n, ok := loopMinor(e.Name()); ok {
				minors[n] = true
			}
		}
	}
	var sorted []int
	for n := range minors {
		if r.Contains(n) && (keep == nil || !keep(n)) && loopBacking(n) == "" {
			sorted = append(sorted, n)
		}
	}
	sort.Ints(sorted)
	var removed []string
	var errs []error
	for _, n := range sorted {
		p := LoopDevPath(n)
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != LoopMajor {
				errs = append(errs, fmt.Errorf("%s is not a loop device node: left alone", p))
				continue
			}
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, p)
		}
		if err := loopControl(unix.LOOP_CTL_REMOVE, n); err != nil && !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.ENXIO) {
			errs = append(errs, fmt.Errorf("LOOP_CTL_REMOVE %d: %w", n, err))
		}
	}
	return removed, errors.Join(errs...)
}

// FreshLoopDevices brings the machine's loop devices back to a fresh boot's: it removes every
// unattached loop device above loop7 (node and kernel device). Attached ones are left alone.
func FreshLoopDevices() ([]string, error) {
	return RemoveLoopNodes(LoopRange{First: 8, Last: 1 << 20}, nil)
}

// loopMinor parses "loopN".
func loopMinor(name string) (int, bool) {
	s, ok := strings.CutPrefix(filepath.Base(name), "loop")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}
