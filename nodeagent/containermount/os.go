package containermount

import (
	"context"
	"errors"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
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
// move a mount into another namespace. NewOS (Linux) is the real one; containermounttest.FakeNode
// the fake.
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
	// Stat returns /proc/<pid>/stat's parent pid and start time.
	Stat(pid int) (ProcStat, error)
	// MountNSOwner returns the inode of pid's mount namespace and of the user namespace that
	// owns it (ioctl NS_GET_USERNS on /proc/<pid>/ns/mnt).
	MountNSOwner(pid int) (mnt, owner uint64, err error)
	// UserNSParent returns the inode of pid's user namespace and of its parent (ioctl
	// NS_GET_PARENT); parent is 0 for the initial user namespace.
	UserNSParent(pid int) (user, parent uint64, err error)
}

// Attach is one clone of the live mount to put into a container.
type Attach struct {
	// Offset is the directory inside the live mount to clone ("" = its root). It is resolved
	// beneath the live mount without following symlinks or crossing into other mounts.
	Offset string
	// Target is the path inside the container's namespace, resolved there without following
	// symlinks; its top mount must still be ExpectMountID.
	Target        string
	ExpectMountID int
	// Flags added to the dead mount's own when the clone replaces it (never cleared: a flag of
	// the dead mount, of the live mount or of the pod spec stays).
	ReadOnly, NoSuid, NoDev, NoExec bool
	// Slave makes the new mount a slave of the live mount's peer group (the pod spec asks for
	// HostToContainer), whatever the dead mount shows; otherwise it keeps the dead mount's.
	Slave bool
	// NoPeerGroup: the live mount is not shared, so the clone can be no slave (private).
	NoPeerGroup bool
	// Nest: Target is no mount point but a directory inside the live mount ExpectMountID (a
	// subPath nested in a mount point already fixed, whose dead mount went with the outer one or
	// is hidden under it): the clone is attached there, nothing is replaced.
	Nest bool
	// Protect attaches nothing: the mount at Target (it must be ExpectMountID) is made read-only
	// in place, inside the container's namespace. Offset and the other flags are ignored.
	Protect bool
}

// Outcome is what one Attach did inside the namespace.
type Outcome struct {
	Err error
	// Replace says how a dead mount was replaced (mountreplace.Result.Mode: beneath, or
	// stacked with its reason); zero for Nest and Protect.
	Replace mountreplace.Result
}

// NamespaceRef names the namespace to enter: the pids are tried in order and the first whose
// /proc/<pid>/ns/mnt is still the namespace Inode is used (a reused pid is never entered).
type NamespaceRef struct {
	Inode uint64
	Pids  []int
	// Owner is the user namespace that must own it (NS_GET_USERNS, checked on the descriptor
	// that is entered); 0 is refused.
	Owner uint64
}

// Namespaces performs the kernel calls.
type Namespaces interface {
	// AttachInNamespace clones livePath (plus each Offset) in the agent's own namespace, enters
	// ns, and puts each clone in place of the dead mount at its Target (Place). It returns one
	// Outcome per attach, or a single error when the namespace could not be entered at all.
	AttachInNamespace(ctx context.Context, ns NamespaceRef, livePath string, attaches []Attach) ([]Outcome, error)
}

// Kernel is the mount calls Place makes inside an entered namespace: mountreplace's, plus
// making a mount read-only in place (mountreplace.RealKernel has both; so do the fakes).
type Kernel interface {
	mountreplace.Kernel
	MakeReadOnly(path string, top int) error
}

// MountInfoCapped is a ProcFS that can read a mount table up to a size: the mount tables of
// namespaces a tenant made (reported, never entered) are read through it, so a namespace
// holding many mounts costs the agent a bounded read.
type MountInfoCapped interface {
	MountInfoUpTo(pid, max int) (string, error)
}

// ErrMountInfoTooLarge: a mount table read through MountInfoCapped is larger than its cap.
var ErrMountInfoTooLarge = errors.New("mount table too large")

// MaxForeignMountInfo caps the read of a foreign namespace's mount table (a container's holds a
// few dozen lines of about 150 bytes).
const MaxForeignMountInfo = 256 << 10
