package sidecar

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
)

// Sentinel errors of the OS layer; callers test them with errors.Is.
var (
	// ErrNoDeviceNode: nothing exists at the device path.
	ErrNoDeviceNode = errors.New("no such device node")
	// ErrNotBlockDevice: the path exists but is not a block device (regular file, character device...).
	ErrNotBlockDevice = errors.New("not a block device")
	// ErrUnsupported: the operation needs Linux.
	ErrUnsupported = errors.New("not supported on this operating system")
)

// DeviceSizer measures block devices.
type DeviceSizer interface {
	// DeviceSize returns the size in bytes of the block device at path, following symlinks.
	// It returns ErrNoDeviceNode when nothing is there and ErrNotBlockDevice for any other file type.
	DeviceSize(path string) (int64, error)
}

// Remover removes a file (a device node).
type Remover interface {
	Remove(path string) error
}

// Execer finds and runs the application's command.
type Execer interface {
	// LookPath resolves a command name the way execvp does (names with a slash are used as is).
	LookPath(file string) (string, error)
	// Exec replaces the current process; it only returns on failure. Fakes return nil instead.
	Exec(path string, argv, env []string) error
}

// Statfser checks a mount.
type Statfser interface {
	// Statfs calls statfs(2) on path; it may block forever on a hung FUSE mount.
	Statfs(path string) error
}

// Deps bundles every OS effect of the helper so tests can swap in fakes (see fake.go).
type Deps struct {
	Devices DeviceSizer
	Files   Remover
	Process Execer
	// Mounts calls statfs in this process.
	Mounts Statfser
	// ProbeMounts is what probe calls statfs through; nil means Mounts. The helper sets a
	// ChildStatfs (NewEnv).
	ProbeMounts Statfser
}

// RealDeps returns the implementations that talk to the operating system.
func RealDeps() Deps {
	return Deps{Devices: realDevices{}, Files: realFiles{}, Process: realProcess{}, Mounts: realMounts{}}
}

type realFiles struct{}

// Remove drops the path from the error: callers already name the device.
func (realFiles) Remove(path string) error { return unwrapPathError(os.Remove(path)) }

type realProcess struct{}

func (realProcess) LookPath(file string) (string, error) { return exec.LookPath(file) }

func (realProcess) Exec(path string, argv, env []string) error { return execve(path, argv, env) }

// realDevices sizes block devices from sysfs (readable by any user; see blockDeviceSize).
type realDevices struct{}

func (realDevices) DeviceSize(path string) (int64, error) { return blockDeviceSize(path) }

type realMounts struct{}

func (realMounts) Statfs(path string) error { return statfs(path) }

// unwrapPathError returns the cause inside an *fs.PathError ("permission denied" rather than
// "remove /dev/data1: permission denied").
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
