//go:build linux

package mountreplace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Detach's checks ask about two or three mounts. Reading the whole table for them costs a
// generation of every line under the kernel's mount lock — hundreds of lines on a node with
// many pods, 0.4–16 ms a read measured during a restore of 20 pods, twice per detach — while
// statmount(2) (Linux 6.8) answers for one mount in one call. Where the kernel lacks it (or a
// seccomp profile refuses it) the table is read as before.

// Constants of include/uapi/linux/mount.h; golang.org/x/sys v0.50.0 names only the syscall
// numbers.
const (
	statmountMntBasic = 0x00000002 // STATMOUNT_MNT_BASIC
	statmountMntPoint = 0x00000010 // STATMOUNT_MNT_POINT
	mntIDReqSizeVer0  = 24         // MNT_ID_REQ_SIZE_VER0: struct mnt_id_req {u32 size, spare; u64 mnt_id, param}
	// statmountFixed is sizeof(struct statmount): its string table (str[]) follows it.
	statmountFixed = 512
)

// Field offsets in struct statmount (stable: the struct only grows into its spare words).
const (
	offSize       = 0   // __u32 size: the bytes written, strings included
	offMask       = 8   // __u64 mask: what was filled in
	offMntID      = 40  // __u64 mnt_id (unique)
	offParentID   = 48  // __u64 mnt_parent_id (unique; the mount's own for a namespace root)
	offMntIDOld   = 56  // __u32 mnt_id_old (mountinfo's ID)
	offParentOld  = 60  // __u32 mnt_parent_id_old (mountinfo's parent ID)
	offPropFlags  = 72  // __u64 mnt_propagation: MS_SHARED, MS_SLAVE, MS_PRIVATE, MS_UNBINDABLE
	offMntPointAt = 108 // __u32 mnt_point: offset of the string in str[]
)

// errNoStatmount says the kernel gave no statmount answer to use: read the table instead.
var errNoStatmount = errors.New("statmount unavailable")

// statmountMissing is set once statmount failed with ENOSYS or EPERM: the node's kernel (or
// the agent's seccomp profile) will not answer later calls either.
var statmountMissing atomic.Bool

// mountFacts is what statmount tells of one mount; IDs are the kernel's unique 64-bit ones
// (STATX_MNT_ID_UNIQUE), not mountinfo's, which are reused.
type mountFacts struct {
	ID, ParentID uint64
	OldID        int
	// OldParentID is the parent's mountinfo ID.
	OldParentID int
	MountPoint  string
	// Propagation as mountinfo tags it: shared:N when the mount is shared, master:N when a
	// slave.
	Propagation Propagation
}

// statmount asks the kernel about the mount with unique ID id in the calling thread's mount
// namespace: unix.ENOENT when no such mount is attached there (never was, or was detached).
func statmount(id uint64) (mountFacts, error) {
	if statmountMissing.Load() {
		return mountFacts{}, errNoStatmount
	}
	// struct mnt_id_req {__u32 size, spare; __u64 mnt_id, param}
	var req [mntIDReqSizeVer0]byte
	binary.NativeEndian.PutUint32(req[0:], mntIDReqSizeVer0)
	binary.NativeEndian.PutUint64(req[8:], id)
	binary.NativeEndian.PutUint64(req[16:], statmountMntBasic|statmountMntPoint)
	buf := make([]byte, statmountFixed+unix.PathMax+64)
	for {
		// x/sys has no wrapper: the kernel reads req and writes at most len(buf) bytes to buf.
		_, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req[0])), //nolint:gosec // G103: see above
			uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0) //nolint:gosec // G103: see above
		switch {
		case errno == 0:
			return parseStatmount(buf, statmountMntBasic|statmountMntPoint)
		case errno == unix.EOVERFLOW && len(buf) < 1<<20:
			buf = make([]byte, 2*len(buf)) // a mount point longer than PATH_MAX (deep, escaped)
		case errno == unix.ENOSYS || errno == unix.EPERM:
			statmountMissing.Store(true)
			return mountFacts{}, fmt.Errorf("%w: %w", errNoStatmount, errno)
		default:
			return mountFacts{}, fmt.Errorf("statmount %d: %w", id, errno)
		}
	}
}

// parseStatmount reads the fields want asks for from a struct statmount the kernel wrote to
// buf. It refuses an answer without them rather than guess.
func parseStatmount(buf []byte, want uint64) (mountFacts, error) {
	if len(buf) < statmountFixed {
		return mountFacts{}, fmt.Errorf("statmount answer of %d bytes, want at least %d", len(buf), statmountFixed)
	}
	size := int(binary.NativeEndian.Uint32(buf[offSize:]))
	if size < statmountFixed || size > len(buf) {
		return mountFacts{}, fmt.Errorf("statmount answer says %d bytes (buffer %d)", size, len(buf))
	}
	if mask := binary.NativeEndian.Uint64(buf[offMask:]); mask&want != want {
		return mountFacts{}, fmt.Errorf("%w: answer mask %#x lacks %#x", errNoStatmount, mask, want&^mask)
	}
	prop := binary.NativeEndian.Uint64(buf[offPropFlags:])
	f := mountFacts{
		ID:          binary.NativeEndian.Uint64(buf[offMntID:]),
		ParentID:    binary.NativeEndian.Uint64(buf[offParentID:]),
		OldID:       int(binary.NativeEndian.Uint32(buf[offMntIDOld:])),
		OldParentID: int(binary.NativeEndian.Uint32(buf[offParentOld:])),
		Propagation: Propagation{Shared: prop&unix.MS_SHARED != 0, Slave: prop&unix.MS_SLAVE != 0},
	}
	if want&statmountMntPoint != 0 {
		at := statmountFixed + int(binary.NativeEndian.Uint32(buf[offMntPointAt:]))
		if at >= size {
			return mountFacts{}, fmt.Errorf("statmount mount point at %d, past the answer's %d bytes", at, size)
		}
		end := bytes.IndexByte(buf[at:size], 0)
		if end < 0 {
			return mountFacts{}, fmt.Errorf("statmount mount point at %d is not terminated", at)
		}
		f.MountPoint = string(buf[at : at+end])
	}
	return f, nil
}

// uniqueID is the unique ID of the mount fd is on (statx STATX_MNT_ID_UNIQUE, Linux 6.8).
func uniqueID(fd int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return 0, err
	}
	if stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return 0, fmt.Errorf("%w: statx without STATX_MNT_ID_UNIQUE", errNoStatmount)
	}
	return stx.Mnt_id, nil
}

// maxStackWalk bounds a walk down a stack of mounts at one mount point (stacks we meet are a
// few deep; a loop would be a kernel answer we do not understand).
const maxStackWalk = 64

// stackBaseOf is the unique ID of the mount the stack holding mount top sits on: top's parents
// are followed while they are at the same mount point (stackParent, by statmount).
func stackBaseOf(top uint64) (uint64, error) {
	m, err := statmount(top)
	if err != nil {
		return 0, err
	}
	for range maxStackWalk {
		if m.ParentID == m.ID {
			return 0, fmt.Errorf("%w: mount %d is its namespace's root", ErrTargetChanged, m.ID)
		}
		p, err := statmount(m.ParentID)
		if err != nil {
			return 0, err
		}
		if p.MountPoint != m.MountPoint {
			return p.ID, nil
		}
		m = p
	}
	return 0, fmt.Errorf("%w: more than %d mounts stacked at %s", ErrTargetChanged, maxStackWalk, m.MountPoint)
}

// Placements implements Placer: the mount of tree (attached by now) and the top mount at
// target, by statmount of their unique IDs (statx STATX_MNT_ID_UNIQUE of tree's descriptor and
// of target opened without following symlinks). ErrNoPlacement where the kernel cannot tell.
func (k *RealKernel) Placements(tree int, target string) (Placement, Placement, error) {
	if k.tableOnly {
		return Placement{}, Placement{}, fmt.Errorf("%w: checks by the mount table only", ErrNoPlacement)
	}
	fd, _, err := openPath(unix.AT_FDCWD, target, 0)
	if err != nil {
		return Placement{}, Placement{}, fmt.Errorf("%w: %w", ErrTargetChanged, err)
	}
	defer func() { _ = unix.Close(fd) }() // an O_PATH descriptor
	var out [2]Placement
	for i, d := range []int{tree, fd} {
		id, err := uniqueID(d)
		if err == nil {
			var f mountFacts
			if f, err = statmount(id); err == nil {
				out[i] = Placement{ID: f.OldID, ParentID: f.OldParentID, MountPoint: f.MountPoint, Propagation: f.Propagation}
				continue
			}
		}
		if errors.Is(err, errNoStatmount) {
			return Placement{}, Placement{}, fmt.Errorf("%w: %w", ErrNoPlacement, err)
		}
		return Placement{}, Placement{}, fmt.Errorf("%w: statmount: %w", ErrVerify, err)
	}
	return out[0], out[1], nil
}
