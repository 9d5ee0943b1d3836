// Package mountreplace replaces the top mount at a path by another mount without the path ever
// showing what lies beneath: the new mount is attached beneath the old top with move_mount(2)
// MOVE_MOUNT_BENEATH (Linux ≥ 6.5), then the old top is detached (umount2 MNT_DETACH). The mount
// count at the path stays what it was, whatever the number of replacements; a dead FUSE mount
// replaced this way no longer pins its connection under a live one.
//
// # One replacement (Replacer.Replace)
//
// In the mount namespace of the calling thread (the caller does any setns on a locked thread and
// hands a detached tree made before it, or a live path to clone in the current namespace):
//
//  1. the mount table (mountinfo of the calling thread, read through a /proc descriptor opened
//     when the Kernel was made, so it still resolves after setns; or Request.Table, the one the
//     caller read after choosing the mount) must hold the planned mount
//     at the target, and statx(STATX_MNT_ID, AT_STATX_DONT_SYNC) of the target must name it as
//     the top: nothing reaches a dead FUSE daemon, and a target that changed is left alone
//     (ErrTargetChanged);
//  2. the detached tree gets exactly the replaced mount's read-only, nosuid, nodev and noexec
//     (mount_setattr on the detached clone: set and cleared, plus what Request.Add adds), and
//     its propagation: slave when the replaced mount received propagation (master:N), else
//     private. A read-only mount is read-only before anyone can see it;
//     A container's HostToContainer mount is a slave of the host mount's peer group; when the
//     host's dead mount is replaced first and detached, that group empties and the kernel makes
//     its slaves private. So the caller says what it verified (the pod spec's
//     mountPropagation) with Request.Add{Slave: true}, and the clone of the host's new mount
//     becomes a slave of the new mount's group;
//  3. move_mount(MOVE_MOUNT_BENEATH) attaches the tree beneath the planned top. Attached to a
//     shared parent it becomes shared, as the replaced mount was; then it is checked that the
//     new mount holds the parent and mount point the replaced one had, the replaced one is the
//     top and sits on the new one, and the new mount is shared when the replaced one was and a
//     slave when step 2 made it one (fixed on the attached mount through the tree's descriptor
//     when the parent changed it). The check asks statmount(2) about the two mounts (by the
//     unique IDs statx gives for the tree's descriptor and the target: RealKernel.Placements)
//     and reads the whole table only where statmount is missing;
//  4. statx names the planned mount as the top again, and it is detached (MNT_DETACH: a dead
//     FUSE mount is busy while processes hold files or working directories on it). umount2
//     takes a name, never a descriptor, so RealKernel.Detach gives it one component only: it
//     opens the target's parent directory (openat2 RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS),
//     opens the last name below it and checks its statx mount ID is the planned top, checks that
//     the stack at the target sits on that directory's mount, then, on a fresh thread that joins
//     the caller's mount namespace with a private fs_struct (or on the caller's own thread when
//     its fs_struct is its own: RealKernel.OnOwnFSThread, the container remount's thread after
//     setns), fchdirs to the parent descriptor and calls umount2(name,
//     MNT_DETACH|UMOUNT_NOFOLLOW); the planned mount must then be gone. Both
//     checks ask statmount(2) (Linux 6.8) about the mounts concerned, by the unique IDs statx
//     gives for the two held descriptors (STATX_MNT_ID_UNIQUE, never reused), and read the whole
//     mount table only where statmount is missing or refused (statmount_linux.go). A tenant
//     who swaps a parent component for a symlink between check and act (RENAME_EXCHANGE)
//     cannot redirect it: the parent is held, and the name in it is a mount point, which the
//     kernel does not let anyone rename (TestNodeDetachParentSwapped, with either check; on the
//     by-path umount2 this replaced, the test's read-only mount standing for /proc/sys was
//     detached);
//  5. statx must now name the new mount as the top.
//
// # When the kernel refuses: bounded stacking, said out loud
//
// Probe (at start-up, in a throwaway mount namespace on a thread the caller provides) moves one
// tmpfs beneath another. A kernel older than 6.5 rejects the unknown flag with EINVAL; Support
// then says so and every Replace stacks the tree on top of the old mount instead (Mode Stacked,
// Reason "unsupported"), as the agent did before. Per target the kernel also refuses beneath
// moves with EINVAL (can_move_mount_beneath in fs/namespace.c): a locked mount (inherited by a
// less privileged user namespace), and a shared parent whose propagation would overmount the top
// (propagation_would_overmount in fs/pnode.c: the top's root is its own mount point and the top
// is a peer, or a slave of a peer, of the parent — a directory bound onto itself). Those
// replacements stack too (Reason "refused", Result.Refusal holds the kernel's error). A replaced
// mount with mounts of its own on it is stacked over (Reason "submounts"): detaching it would
// take them along. Every Result names its Mode and Reason, so the caller logs and counts each
// one: there is no silent mixture (Metrics: pvrescue_mount_replace_total{mode,reason}, one
// collector shared by every caller). A caller whose tree's source is in no peer group says so
// (Request.NoPeerGroup): the new mount is then private, since it can be no slave.
//
// # Limits
//
//   - Descriptors and working directories opened on the old mount keep pointing at it (for a
//     dead FUSE mount: ENOTCONN); only new lookups reach the new mount.
//   - The old mount is detached lazily: its filesystem is freed when the last user goes.
//   - Between the check of step 4 and the umount2 call another mount could land on top of the
//     target (propagation from the host); that one is then detached instead of the planned
//     one, which Detach reports as ErrTargetChanged (the planned mount is still in the table).
//
// # Every path the kernel calls resolve (RealKernel)
//
// In a namespace whose directories a tenant can write, every call acts on a descriptor opened
// once with openat2(RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) and verified by its statx mount
// ID: TopID (statx of that descriptor), Clone (open_tree of it), MoveBeneath and MoveOnTop
// (move_mount with MOVE_MOUNT_T_EMPTY_PATH to it), MakeReadOnly (mount_setattr of it), Detach
// (above: one name in a held, verified parent). MountInfo reads thread-self/mountinfo below a
// /proc descriptor opened in the agent's namespace. Probe's mkdir, move_mount by path and
// umount2 by path happen only in a private scratch directory of the agent's own, inside a
// mount namespace it unshared for the probe.
//
// # Layout
//
// The sequence (replace.go) runs against Kernel, a small interface; kernel_linux.go holds the
// real calls (RealKernel, Probe; RealKernel.MakeReadOnly for callers that make a mount
// read-only in place) and kernel_other.go a stub. nodeagent/containermount uses it inside every
// container namespace it fixes. mountreplacetest.FakeKernel models
// mount stacks, propagation and the kernel's refusals in memory and records every instant a
// watched path shows the bare directory. Node tests (-tags node, root) replace real s3fs mounts
// killed with SIGKILL, on the host and inside unshare'd mount namespaces.
package mountreplace
