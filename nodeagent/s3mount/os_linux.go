//go:build linux

package s3mount

import (
	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// NewOS returns the real node implementation.
func NewOS() OS {
	return OS{Mounter: stack.NewMounter(), Procs: s3fs.NewProcs(), Cgroups: s3fs.NewCgroups(), Statfs: stack.NewStatfs(), FS: stack.NewFS(),
		CSI: csiclient.GRPCDialer{}, Plugins: csiclient.FSNotifyWatcher{}, Registry: csiclient.GRPCRegistry{}, FUSE: stack.NewFUSEConnections(),
		Replacer: stack.NewReplacer(mountreplace.NodeSupport())}
}
