//go:build !linux

package s3fs

import "github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"

// NewProcs returns a ProcessStarter whose every call fails: bridges are Linux-only.
func NewProcs() ProcessStarter { return noProcs{} }

// NewCgroups returns Cgroups whose every call fails.
func NewCgroups() Cgroups { return noCgroups{} }

type noProcs struct{}

func (noProcs) Start(ProcSpec) (Process, error)       { return nil, stack.ErrUnsupportedOS }
func (noProcs) Adopt(ProcID, string) (Process, error) { return nil, stack.ErrUnsupportedOS }

type noCgroups struct{}

func (noCgroups) Place(int, string) error { return stack.ErrUnsupportedOS }
func (noCgroups) Remove(string) error     { return stack.ErrUnsupportedOS }
func (noCgroups) Children(string) ([]string, error) {
	return nil, stack.ErrUnsupportedOS
}
func (noCgroups) SetLimits(string, Limits) error { return stack.ErrUnsupportedOS }
func (noCgroups) Usage(string) (Usage, error)    { return Usage{}, stack.ErrUnsupportedOS }

func fsSpace(string) (sizeBytes, availMB int64) { return 0, -1 }
