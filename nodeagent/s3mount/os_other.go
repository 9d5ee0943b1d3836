//go:build !linux

package s3mount

import (
	"context"
	"errors"
	"io/fs"
	"time"
)

// ErrUnsupportedOS is returned by every effect on systems other than Linux.
var ErrUnsupportedOS = errors.New("s3 mount restore needs Linux")

// NewOS returns an implementation whose every effect fails: mounts are Linux-only.
func NewOS() OS {
	return OS{Mounter: noMounter{}, Procs: noProcs{}, Cgroups: noCgroups{}, Statfs: noStatfs{}, FS: noFS{}, CSI: GRPCDialer{}}
}

type noMounter struct{}

func (noMounter) MountTable() (MountTable, error) { return nil, ErrUnsupportedOS }
func (noMounter) Bind(string, string, bool) error { return ErrUnsupportedOS }
func (noMounter) Unmount(string, bool) error      { return ErrUnsupportedOS }
func (noMounter) MountTmpfs(string, int64) error  { return ErrUnsupportedOS }

type noProcs struct{}

func (noProcs) Start(ProcSpec) (Process, error) { return nil, ErrUnsupportedOS }

type noStatfs struct{}

func (noStatfs) Statfs(context.Context, string, time.Duration) error { return ErrUnsupportedOS }

type noFS struct{}

func (noFS) MkdirAll(string, fs.FileMode) error          { return ErrUnsupportedOS }
func (noFS) WriteFile(string, []byte, fs.FileMode) error { return ErrUnsupportedOS }
func (noFS) ReadFile(string) ([]byte, error)             { return nil, ErrUnsupportedOS }
func (noFS) Remove(string) error                         { return ErrUnsupportedOS }

func (noProcs) Adopt(ProcID, string) (Process, error) { return nil, ErrUnsupportedOS }

type noCgroups struct{}

func (noCgroups) Place(int, string) error { return ErrUnsupportedOS }
func (noCgroups) Remove(string) error     { return ErrUnsupportedOS }

func (noFS) ReadDir(string) ([]string, error) { return nil, ErrUnsupportedOS }
