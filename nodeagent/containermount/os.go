package containermount

import (
	"context"
	"errors"
)

// Sentinel errors of the kernel side; each maps to a metrics reason (see Reason).
var (
	// ErrNamespaceGone: no process of the namespace is left (the container exited).
	ErrNamespaceGone = errors.New("mount namespace has no live process")
	// ErrSource: the live mount (or the subPath inside it) could not be opened or cloned.
	ErrSource = errors.New("cannot clone the live mount")
	// ErrSetns: entering the container's mount namespace failed.
	ErrSetns = errors.New("cannot enter the container's mount namespace")
	// ErrTargetChanged: the path inside the container no longer reaches the dead mount that was
	// planned for (it was covered, unmounted, or a path component was swapped); nothing attached.
	ErrTargetChanged = errors.New("container path no longer reaches the dead mount")
	// ErrAttach: the kernel refused to attach the clone at the container path.
	ErrAttach = errors.New("cannot attach the live mount in the container")
	// ErrLocked: the container's mount namespace belongs to another user namespace and the
	// kernel refused the change (locked mounts); the container keeps its dead mount.
	ErrLocked = errors.New("mount namespace of a user-namespaced container refused the change")
	// ErrVerify: after attaching, the container's mount table does not show the live mount at
	// the path with the expected root.
	ErrVerify = errors.New("container does not show the live mount after attaching")
	// ErrUnsupported: the kernel calls are not available on this system.
	ErrUnsupported = errors.New("remounting into containers needs Linux >= 5.2")
)

// OS is the remounter's only way to touch the node: reading /proc and the kernel calls that
// move a mount into another namespace. NewOS (Linux) is the real one, NewFakeOS the fake.
type OS struct {
	Proc ProcFS
	NS   Namespaces
}

// ProcFS reads /proc of the host's PID namespace (the agent runs with hostPID).
type ProcFS interface {
	// Self is the agent's own pid as seen in this /proc.
	Self() int
	// Pids lists every process.
	Pids() ([]int, error)
	// Cgroup returns /proc/<pid>/cgroup.
	Cgroup(pid int) (string, error)
	// MountInfo returns /proc/<pid>/mountinfo.
	MountInfo(pid int) (string, error)
	// MountNS and UserNS return the inode of /proc/<pid>/ns/mnt and /proc/<pid>/ns/user.
	MountNS(pid int) (uint64, error)
	UserNS(pid int) (uint64, error)
}

// Attach is one clone of the live mount to put into a container.
type Attach struct {
	// Offset is the directory inside the live mount to clone ("" = its root). It is resolved
	// beneath the live mount without following symlinks or crossing into other mounts.
	Offset string
	// Target is the path inside the container's namespace, resolved there without following
	// symlinks; it must still reach the mount ExpectMountID.
	Target        string
	ExpectMountID int
	// Flags added to the clone while it is still detached (never cleared: a flag of the live
	// mount stays).
	ReadOnly, NoSuid, NoDev, NoExec bool
	// Slave makes the new mount a slave (as HostToContainer's mounts are); otherwise private.
	Slave bool
	// Protect attaches nothing: the mount a lookup of Target reaches (it must be ExpectMountID)
	// is made read-only in place, inside the container's namespace. Offset and the other flags
	// are ignored.
	Protect bool
}

// NamespaceRef names the namespace to enter: the pids are tried in order and the first whose
// /proc/<pid>/ns/mnt is still the namespace Inode is used (a reused pid is never entered).
type NamespaceRef struct {
	Inode uint64
	Pids  []int
}

// Namespaces performs the kernel calls.
type Namespaces interface {
	// AttachInNamespace clones livePath (plus each Offset) in the agent's own namespace, enters
	// ns, and stacks each clone on top of the dead mount at its Target. It returns one error
	// (or nil) per attach, or a single error when the namespace could not be entered at all.
	// It never unmounts anything.
	AttachInNamespace(ctx context.Context, ns NamespaceRef, livePath string, attaches []Attach) ([]error, error)
}
