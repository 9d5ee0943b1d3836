package s3mount

import (
	"context"
	"io/fs"
	"time"
)

// OS bundles every effect the restorer has on the node, so the logic runs against FakeOS in
// unit tests and against the real node (NewOS, Linux only) in node tests and production.
type OS struct {
	Mounter Mounter
	Procs   ProcessStarter
	Statfs  StatfsChecker
	FS      FS
	// CSI dials node plugins for replay; nil turns replay off.
	CSI CSIDialer
}

// Mounter reads the mount table and makes the few mounts the restorer needs.
type Mounter interface {
	// MountTable returns the current /proc/self/mountinfo.
	MountTable() (MountTable, error)
	// Bind bind-mounts source onto target, on top of whatever is mounted there, and makes the
	// bind read-only when readOnly is set.
	Bind(source, target string, readOnly bool) error
	// Unmount removes the top mount at target; detach makes it lazy (MNT_DETACH).
	Unmount(target string, detach bool) error
	// MountTmpfs mounts a private tmpfs of sizeBytes with mode 0700 at target.
	MountTmpfs(target string, sizeBytes int64) error
}

// Process is a started s3fs.
type Process interface {
	Pid() int
	// Wait blocks until the process exits and returns its error.
	Wait() error
	// Kill sends SIGTERM, then SIGKILL after grace.
	Kill(grace time.Duration)
	// Output returns the tail of the process's stderr and stdout.
	Output() string
}

// ProcessStarter starts programs the restorer supervises.
type ProcessStarter interface {
	Start(path string, args []string) (Process, error)
}

// StatfsChecker runs statfs on a path with a timeout; a hung FUSE daemon yields ErrTimeout.
type StatfsChecker interface {
	Statfs(ctx context.Context, path string, timeout time.Duration) error
}

// FS is the plain file system.
type FS interface {
	MkdirAll(path string, perm fs.FileMode) error
	// WriteFile writes data with exactly mode perm (replacing any existing file).
	WriteFile(path string, data []byte, perm fs.FileMode) error
	ReadFile(path string) ([]byte, error)
	Remove(path string) error
}
