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
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// MountedAt reports whether path is a mount point and the type of its top mount.
func MountedAt(path string) (bool, string) {
	ms, err := Mounts()
	if err != nil {
		return false, ""
	}
	found, fstype := false, ""
	for _, m := range ms {
		if m.MountPoint == path {
			found, fstype = true, m.FSType
		}
	}
	return found, fstype
}

// LazyUnmount detaches the mount at path (umount -l), even when its FUSE daemon is dead or stopped;
// a path that is not a mount point is left alone.
func LazyUnmount(path string) error {
	if ok, _ := MountedAt(path); !ok {
		return nil
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("umount -l %s: %w", path, err)
	}
	return nil
}

// S3fsPIDs lists the running s3fs processes with an argument under dir ("" for all). s3fs
// rewrites its argv in place, so every argument is looked at.
func S3fsPIDs(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "s3fs" {
			continue
		}
		if dir == "" || argUnder(args[1:], dir) {
			out = append(out, pid)
		}
	}
	return out
}

func argUnder(args []string, dir string) bool {
	for _, a := range args {
		if strings.Contains(a, dir) {
			return true
		}
	}
	return false
}

// SweepMounts kills the s3fs processes serving paths under dir and lazily unmounts everything
// mounted under it, newest first. It errs when mounts remain.
func SweepMounts(dir string) error {
	for _, pid := range S3fsPIDs(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for pass := 0; pass < 20; pass++ {
		ms, err := Mounts()
		if err != nil {
			return err
		}
		var under []Mount
		for _, m := range ms {
			if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
				under = append(under, m)
			}
		}
		if len(under) == 0 {
			return nil
		}
		sort.Slice(under, func(i, j int) bool { return under[i].ID > under[j].ID })
		for _, m := range under {
			_ = unix.Unmount(m.MountPoint, unix.MNT_DETACH)
		}
	}
	return errors.New("mounts left under " + dir + " after 20 passes")
}

// Sweep runs SweepMounts(dir) when the test ends. Register it after t.TempDir() made dir, so it
// runs before the temp dir is removed.
func Sweep(t testing.TB, dir string) {
	t.Helper()
	t.Cleanup(func() {
		if err := SweepMounts(dir); err != nil {
			t.Error(err)
		}
	})
}
