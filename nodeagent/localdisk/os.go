package localdisk

import "errors"

// Sentinel errors of the host layer.
var (
	// ErrLoopBusy: the loop device is already bound to a file (never taken over).
	ErrLoopBusy = errors.New("loop device is bound to another file")
	// ErrNoFreeLoop: no free loop device in the allowed range.
	ErrNoFreeLoop = errors.New("no free loop device in range")
	// ErrOutsideStateDir: a file operation was asked for a path outside the state directory.
	ErrOutsideStateDir = errors.New("path is outside the agent's state directory")
	// ErrNotOurs: refused to detach a loop or remove a link that is not the agent's.
	ErrNotOurs = errors.New("not owned by pvrescue")
	// ErrUnsupported: the operation needs Linux.
	ErrUnsupported = errors.New("unsupported on this platform")
)

// PathKind is what lstat found at a path.
type PathKind int

const (
	PathAbsent PathKind = iota
	PathSymlink
	PathBlockDevice
	PathDir
	PathOther
)

func (k PathKind) String() string {
	return [...]string{"absent", "symlink", "block device", "directory", "other file"}[k]
}

// PathState is the result of Lstat.
type PathState struct {
	Kind PathKind
	// LinkTarget is the symlink's content (Kind == PathSymlink).
	LinkTarget string
}

// Loop is one /sys/block/loopN entry.
type Loop struct {
	Minor int
	// BackingFile is empty when the loop is unbound.
	BackingFile string
	// Deleted: the backing file was unlinked while attached.
	Deleted bool
	// BackingRdev is the device number of the backing file when it is a block device (kubelet's
	// device-lock loops are backed by a node of the mapped device); BackingIsDev says it is set.
	BackingIsDev bool
	BackingMajor uint32
	BackingMinor uint32
	// ReadOnly: /sys/block/loopN/ro is 1 (the agent attaches its fakes read-only).
	ReadOnly bool
	// Holders are the entries of /sys/block/loopN/holders (dm, md, ...).
	Holders []string
}

// Bound reports whether the loop has a backing file.
func (l Loop) Bound() bool { return l.BackingFile != "" }

// OS is every OS effect the local-disk rescuer has. There is deliberately no way to write to a
// device through it: images are plain files written before they are attached.
type OS interface {
	// Lstat reports what is at path; a missing path is PathAbsent with a nil error.
	Lstat(path string) (PathState, error)
	// ListLoops lists every loop device in /sys/block, bound or not.
	ListLoops() ([]Loop, error)
	// Attach binds image to loop minor read-only, creating /dev/loopN if needed; ErrLoopBusy if it is bound.
	Attach(image string, minor int) error
	// Detach unbinds loop minor; it refuses (ErrNotOurs) unless its backing file lies in the
	// state directory the host was built with.
	Detach(minor int) error
	// MkdirAll creates a directory inside the state directory.
	MkdirAll(dir string) error
	// ReadDir lists file names in dir; a missing dir is empty.
	ReadDir(dir string) ([]string, error)
	// ReadFile reads a state file.
	ReadFile(path string) ([]byte, error)
	// WriteFileAtomic writes a state file (temp + rename, fsync).
	WriteFileAtomic(path string, data []byte) error
	// FileSize returns a state file's size, fs.ErrNotExist when absent.
	FileSize(path string) (int64, error)
	// CreateImage writes a zero-filled regular file of size bytes (temp + rename).
	CreateImage(path string, size int64) error
	// RemoveFile removes a regular file inside the state directory (absent is fine).
	RemoveFile(path string) error
	// Symlink makes path a symlink to target atomically and never replaces anything:
	// fs.ErrExist when path appeared meanwhile.
	Symlink(target, path string) error
	// RemoveSymlink removes path only while it is a symlink whose content is exactly target.
	RemoveSymlink(path, target string) error
}
