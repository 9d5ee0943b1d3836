//go:build !linux

package s3mount

import "github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"

// NewOS returns an implementation whose every effect fails: mounts are Linux-only.
func NewOS() OS {
	return OS{Mounter: stack.NewMounter(), Procs: noProcs{}, Cgroups: noCgroups{}, Statfs: stack.NewStatfs(), FS: stack.NewFS(), CSI: GRPCDialer{}}
}

type noProcs struct{}

func (noProcs) Start(ProcSpec) (Process, error)       { return nil, stack.ErrUnsupportedOS }
func (noProcs) Adopt(ProcID, string) (Process, error) { return nil, stack.ErrUnsupportedOS }

type noCgroups struct{}

func (noCgroups) Place(int, string) error { return stack.ErrUnsupportedOS }
func (noCgroups) Remove(string) error     { return stack.ErrUnsupportedOS }
