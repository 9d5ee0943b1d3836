//go:build !linux

package s3mount

import (
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// NewOS returns an implementation whose every effect fails: mounts are Linux-only.
func NewOS() OS {
	return OS{Mounter: stack.NewMounter(), Procs: s3fs.NewProcs(), Cgroups: s3fs.NewCgroups(), Statfs: stack.NewStatfs(), FS: stack.NewFS(), CSI: csiclient.GRPCDialer{}}
}
