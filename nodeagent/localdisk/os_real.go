package localdisk

import "path/filepath"

// RealOS is the OS of a Linux node: ioctls on /dev/loop-control and /dev/loopN, /sys/block,
// and plain file operations confined to the state directory.
type RealOS struct {
	// StateDir confines every file the host writes or removes, and decides which loops are ours.
	StateDir string
	// DevDir holds the loop device nodes (/dev).
	DevDir string
	// SysDir is the sysfs mount (/sys).
	SysDir string
}

// NewRealOS returns the host for stateDir with /dev and /sys.
func NewRealOS(stateDir string) *RealOS {
	return &RealOS{StateDir: filepath.Clean(stateDir), DevDir: "/dev", SysDir: "/sys"}
}

var _ OS = (*RealOS)(nil)
