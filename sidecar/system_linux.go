//go:build linux

package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// blockDeviceSize stats first so that a character device (a watchdog, say) is never opened, then
// asks the kernel for the size with BLKGETSIZE64.
func blockDeviceSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, ErrNoDeviceNode
	}
	if err != nil {
		return 0, fmt.Errorf("stat: %w", unwrapPathError(err))
	}
	if kind := fileKind(fi.Mode()); kind != "block device" {
		return 0, fmt.Errorf("%w: %s", ErrNotBlockDevice, kind)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	size, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
	if err != nil {
		return 0, fmt.Errorf("ioctl BLKGETSIZE64: %w", err)
	}
	return int64(size), nil
}

func statfs(path string) error {
	var buf unix.Statfs_t
	if err := unix.Statfs(path, &buf); err != nil {
		return err
	}
	return nil
}

func execve(path string, argv, env []string) error {
	return syscall.Exec(path, argv, env)
}

// errnoName gives the symbolic name of an errno ("ENOTCONN"), or "" when unknown.
func errnoName(e syscall.Errno) string { return unix.ErrnoName(e) }
