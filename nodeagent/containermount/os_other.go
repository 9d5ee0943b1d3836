//go:build !linux

package containermount

import (
	"context"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// NewOS returns an implementation whose every effect fails: the kernel calls are Linux-only.
func NewOS(string, mountreplace.Support) (OS, error) { return OS{Proc: noProc{}, NS: noNS{}}, nil }

type noProc struct{}

func (noProc) Self() int                     { return 0 }
func (noProc) Pids() ([]int, error)          { return nil, ErrUnsupported }
func (noProc) Cgroup(int) (string, error)    { return "", ErrUnsupported }
func (noProc) MountInfo(int) (string, error) { return "", ErrUnsupported }
func (noProc) MountNS(int) (uint64, error)   { return 0, ErrUnsupported }
func (noProc) UserNS(int) (uint64, error)    { return 0, ErrUnsupported }
func (noProc) Stat(int) (ProcStat, error)    { return ProcStat{}, ErrUnsupported }

func (noProc) MountNSOwner(int) (uint64, uint64, error) { return 0, 0, ErrUnsupported }
func (noProc) UserNSParent(int) (uint64, uint64, error) { return 0, 0, ErrUnsupported }

type noNS struct{}

func (noNS) AttachInNamespace(context.Context, NamespaceRef, string, []Attach) ([]Outcome, error) {
	return nil, ErrUnsupported
}
