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

// blockDeviceSize stats the node (following links) so that a character device is never touched,
// then reads the size from sysfs: /sys/dev/block/MAJ:MIN/size in 512-byte sectors. Unlike
// BLKGETSIZE64 it needs no open of the device, so it works for any user: device nodes are
// root:disk 0660 and the helper image runs as 65532.
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
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("stat: no device number for %s", path)
	}
	p := SysfsSizePath("/sys", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, unwrapPathError(err))
	}
	return ParseSysfsSize(string(b))
}

func statfs(path string) error {
	var buf unix.Statfs_t
	return unix.Statfs(path, &buf)
}

func execve(path string, argv, env []string) error {
	return syscall.Exec(path, argv, env) //nolint:gosec // G204: exec runs the container's own command, as its spec names it
}

// childProcAttr makes a statfs child die with its parent: when the probe has given up and
// exited, the child ends as soon as its statfs returns rather than writing into a closed pipe.
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

// errnoName gives the symbolic name of an errno ("ENOTCONN"), or "" when unknown.
func errnoName(e syscall.Errno) string { return unix.ErrnoName(e) }
