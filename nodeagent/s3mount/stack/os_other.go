//go:build !linux

package stack

import (
	"context"
	"errors"
	"io/fs"
	"time"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// ErrUnsupportedOS is returned by every effect on systems other than Linux.
var ErrUnsupportedOS = errors.New("s3 mount restore needs Linux")

// NewMounter returns a Mounter whose every call fails: mounts are Linux-only.
func NewMounter() Mounter { return noMounter{} }

// NewStatfs returns a StatfsChecker whose every call fails.
func NewStatfs() StatfsChecker { return noStatfs{} }

// NewFS returns an FS whose every call fails.
func NewFS() FS { return noFS{} }

// NewReplacer returns nil here: no replacement without Linux (and no mounts either).
func NewReplacer(mountreplace.Support) Replacer { return nil }

type noMounter struct{}

func (noMounter) MountTable() (Table, error)      { return nil, ErrUnsupportedOS }
func (noMounter) Bind(string, string, bool) error { return ErrUnsupportedOS }
func (noMounter) Unmount(string, bool) error      { return ErrUnsupportedOS }
func (noMounter) MountTmpfs(string, int64) error  { return ErrUnsupportedOS }

type noStatfs struct{}

func (noStatfs) Statfs(context.Context, string, time.Duration) error { return ErrUnsupportedOS }

type noFS struct{}

func (noFS) MkdirAll(string, fs.FileMode) error          { return ErrUnsupportedOS }
func (noFS) WriteFile(string, []byte, fs.FileMode) error { return ErrUnsupportedOS }
func (noFS) ReadFile(string) ([]byte, error)             { return nil, ErrUnsupportedOS }
func (noFS) Remove(string) error                         { return ErrUnsupportedOS }

func (noFS) ReadDir(string) ([]string, error) { return nil, ErrUnsupportedOS }
