package stack

import (
	"context"
	"errors"
	"io/fs"
	"time"
)

// ErrMount is wrapped by every failed mount operation.
var ErrMount = errors.New("mount operation failed")

// ErrDiedAfterPut is wrapped when a mount put at a kubelet path was dead (ENOTCONN) when checked
// right after: its daemon exited after it answered (a plugin restarted again during the replay).
// That is a new death, not a refusal: the rescue goes on at once rather than backing off.
var ErrDiedAfterPut = errors.New("the mount put there died as it was put")

// Mounter reads the mount table and makes the few mounts the restorer needs.
type Mounter interface {
	// MountTable returns the current /proc/self/mountinfo.
	MountTable() (Table, error)
	// Bind bind-mounts source onto target, on top of whatever is mounted there, and makes the
	// bind read-only when readOnly is set.
	Bind(source, target string, readOnly bool) error
	// Unmount removes the top mount at target; detach makes it lazy (MNT_DETACH).
	Unmount(target string, detach bool) error
	// MountTmpfs mounts a private tmpfs of sizeBytes with mode 0700 at target.
	MountTmpfs(target string, sizeBytes int64) error
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
	// ReadDir returns the names in a directory (a missing directory has none).
	ReadDir(path string) ([]string, error)
	Remove(path string) error
}

// FUSEConnections is the kernel's FUSE control filesystem (fusectl).
type FUSEConnections interface {
	// Abort ends the FUSE connection of the mount with device dev ("0:<minor>") by writing to
	// /sys/fs/fuse/connections/<minor>/abort, mounting fusectl there first when it is not: every
	// request waiting on it and every later one fails, and its daemon can never write again.
	Abort(dev string) error
}
