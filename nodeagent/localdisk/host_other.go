//go:build !linux

package localdisk

import "fmt"

func unsupported(op string) error { return fmt.Errorf("%s: %w", op, ErrUnsupported) }

func (h *RealHost) Lstat(string) (PathState, error)      { return PathState{}, unsupported("lstat") }
func (h *RealHost) ListLoops() ([]Loop, error)           { return nil, unsupported("list loops") }
func (h *RealHost) Attach(string, int) error             { return unsupported("attach") }
func (h *RealHost) Detach(int) error                     { return unsupported("detach") }
func (h *RealHost) MkdirAll(string) error                { return unsupported("mkdir") }
func (h *RealHost) ReadDir(string) ([]string, error)     { return nil, unsupported("readdir") }
func (h *RealHost) ReadFile(string) ([]byte, error)      { return nil, unsupported("read") }
func (h *RealHost) WriteFileAtomic(string, []byte) error { return unsupported("write") }
func (h *RealHost) FileSize(string) (int64, error)       { return 0, unsupported("stat") }
func (h *RealHost) CreateImage(string, int64) error      { return unsupported("create image") }
func (h *RealHost) RemoveFile(string) error              { return unsupported("remove") }
func (h *RealHost) Symlink(string, string) error         { return unsupported("symlink") }
func (h *RealHost) RemoveSymlink(string, string) error   { return unsupported("unlink") }
