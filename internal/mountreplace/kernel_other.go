//go:build !linux

package mountreplace

import (
	"errors"
	"fmt"
	"runtime"
)

// ErrUnsupported: mount calls exist only on Linux.
var ErrUnsupported = errors.New("mount replacement needs Linux")

// MoveMountBeneath is MOVE_MOUNT_BENEATH of include/uapi/linux/mount.h (Linux 6.5).
const MoveMountBeneath = 0x200

// RealKernel is unavailable on this system; NewKernel fails.
type RealKernel struct{ Kernel }

// NewKernel fails on this system.
func NewKernel(string) (*RealKernel, error) {
	return nil, fmt.Errorf("%w (%s)", ErrUnsupported, runtime.GOOS)
}

// Release does nothing here.
func (k *RealKernel) Release() error { return nil }

// Probe reports no support on this system.
func Probe(string, func(func())) Support {
	return Support{Err: fmt.Errorf("%w (%s)", ErrUnsupported, runtime.GOOS)}
}
