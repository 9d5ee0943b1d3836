//go:build !linux

package containermount

import "context"

// NewOS returns an implementation whose every effect fails: the kernel calls are Linux-only.
func NewOS(string) OS { return OS{Proc: noProc{}, NS: noNS{}} }

type noProc struct{}

func (noProc) Self() int                     { return 0 }
func (noProc) Pids() ([]int, error)          { return nil, ErrUnsupported }
func (noProc) Cgroup(int) (string, error)    { return "", ErrUnsupported }
func (noProc) MountInfo(int) (string, error) { return "", ErrUnsupported }
func (noProc) MountNS(int) (uint64, error)   { return 0, ErrUnsupported }
func (noProc) UserNS(int) (uint64, error)    { return 0, ErrUnsupported }

type noNS struct{}

func (noNS) AttachInNamespace(context.Context, NamespaceRef, string, []Attach) ([]error, error) {
	return nil, ErrUnsupported
}
