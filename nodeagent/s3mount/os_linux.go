//go:build linux

package s3mount

import "github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"

// NewOS returns the real node implementation.
func NewOS() OS {
	return OS{Mounter: stack.NewMounter(), Procs: realProcs{}, Cgroups: NewHostCgroups(), Statfs: stack.NewStatfs(), FS: stack.NewFS(),
		CSI: GRPCDialer{}, Plugins: FSNotifyWatcher{}, Registry: GRPCRegistry{}, FUSE: stack.NewFUSEConnections()}
}
