//go:build !linux

package localdisk

import "fmt"

func unsupported(op string) error { return fmt.Errorf("%s: %w", op, ErrUnsupported) }

func (h *RealOS) Lstat(string) (PathState, error)      { return PathState{}, unsupported("lstat") }
func (h *RealOS) ListLoops() ([]Loop, error)           { return nil, unsupported("list loops") }
func (h *RealOS) Attach(string, int) error             { return unsupported("attach") }
func (h *RealOS) Detach(int) error                     { return unsupported("detach") }
func (h *RealOS) MkdirAll(string) error                { return unsupported("mkdir") }
func (h *RealOS) ReadDir(string) ([]string, error)     { return nil, unsupported("readdir") }
func (h *RealOS) ReadFile(string) ([]byte, error)      { return nil, unsupported("read") }
func (h *RealOS) WriteFileAtomic(string, []byte) error { return unsupported("write") }
func (h *RealOS) FileSize(string) (int64, error)       { return 0, unsupported("stat") }
func (h *RealOS) CreateImage(string, int64) error      { return unsupported("create image") }
func (h *RealOS) RemoveFile(string) error              { return unsupported("remove") }
func (h *RealOS) Symlink(string, string) error         { return unsupported("symlink") }
func (h *RealOS) RemoveSymlink(string, string) error   { return unsupported("unlink") }
