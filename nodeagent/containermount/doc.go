// Package containermount puts a restored FUSE mount back into the running containers that still
// hold the dead one, so no container has to restart after an s3fs-based CSI plugin loses its
// mounts, whatever the container's mountPropagation and whether or not the webhook ever saw the
// pod.
//
// # What a pass does
//
// After s3mount has restored a pod's target on the host (a new s3fs at a staging directory bound
// on top of the dead target), it calls RemountInContainers with the pod, the dead connection's
// "major:minor" and the target. The Remounter then:
//
//  1. reads its own mount table and refuses unless the target's top mount is live;
//  2. finds the pod's processes by the pod UID in /proc/<pid>/cgroup (cgroupfs and systemd
//     layouts, cgroup v1 and v2, dashed and underscored UIDs — ParseCgroup) and groups them by
//     mount namespace, skipping the host's (pid 1) and the agent's own (GroupByNamespace);
//  3. in each namespace's mountinfo, takes every mount point where a lookup still reaches the
//     dead connection (MountTable.Reach follows parent IDs, so a mount hidden under a later one
//     is seen as hidden); its mountinfo root relative to the dead target's root is its offset
//     inside the volume (a subPath shows "/sub/dir"), so a subPath is never pointed at the volume
//     root (seaweedfs-csi#271; Offset, PlanNamespace). Mount points where something live is
//     reached are counted as untouched, which makes a second pass a no-op. A dead mount point
//     nested in another (/data and a subPath at /data/logs) is hidden once the outer one is
//     fixed; the next round (at most 4) puts it back inside the live outer mount;
//     The plan is then held against the pod spec from the API (CheckPlan, SpecMounts): the
//     container is matched by its container ID in the pod's statuses, each dead mount point must
//     be one of its volumeMounts, the offset must be that volumeMount's subPath and a mount the
//     spec makes read-only (volumeMount, claim or inline CSI readOnly) must show read-only; the
//     clone gets the spec's read-only flag. When anything disagrees (or the container is not
//     matched, or uses subPathExpr) nothing is attached in that container — it gets a
//     ContainerMountSkipped Event and its liveness probe stays the fallback — so text in a
//     mount table is never the only reason a container receives a wider or writable mount;
//  4. attaches a clone of the live mount at that offset on top of each dead mount, then reads
//     the namespace's mountinfo again and checks the top mount is the live connection showing
//     exactly the planned directory with the planned read-only flag;
//  5. where a lookup reaches a live mount of the volume that propagated in from the host
//     (HostToContainer) but is writable while the container's dead mount beneath it was
//     read-only, it makes that propagated mount read-only in place (mount_setattr
//     MOUNT_ATTR_RDONLY inside the container's namespace, after checking with statx that the
//     path still reaches that mount): propagation copies the host's writable mount, and a
//     read-only volume must never become writable by a restore (Target.Reprotect,
//     TestNodeReadOnlyHostToContainerStaysReadOnly);
//  6. reports per container (names from status.containerStatuses matched with the container ID
//     in the cgroup path, else "pid N"), emits MountRestoredInContainer (or
//     MountRestoreInContainerFailed) on the pod, and counts pvrescue_container_remounts_total
//     {result,reason} and pvrescue_container_remount_duration_seconds (from the call, made right
//     after the host restore, to the last container fixed).
//
// # Kernel calls (RealNamespaces)
//
// On a goroutine locked to an OS thread that is never the main thread and is never unlocked
// (the runtime retires it):
//
//   - unshare(CLONE_FS): Go threads share one fs_struct and setns(CLONE_NEWNS) refuses a
//     shared one;
//   - openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV) of the
//     offset below the live target, so a symlink planted in the bucket cannot redirect the
//     clone outside the volume;
//   - open_tree(OPEN_TREE_CLONE|AT_EMPTY_PATH): a detached clone of just that mount, made in the
//     agent's namespace BEFORE setns (host paths do not resolve afterwards);
//   - mount_setattr on the detached clone: ro/nosuid/nodev/noexec of the dead mount added (never
//     cleared: a read-only live mount stays read-only), propagation private (or slave when the dead mount received propagation, as with
//     HostToContainer). A read-only clone is read-only before anyone can see it;
//   - setns(CLONE_NEWNS) with a /proc/<pid>/ns/mnt descriptor whose inode is checked against the
//     planned namespace (a reused pid is never entered);
//   - openat2(RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) of the mount point inside the
//     container, and statx(STATX_MNT_ID, AT_STATX_DONT_SYNC) on it: it must still be the planned
//     dead mount (no request reaches the dead FUSE daemon);
//   - move_mount(MOVE_MOUNT_F_EMPTY_PATH|MOVE_MOUNT_T_EMPTY_PATH): the clone is stacked on top of
//     the dead mount;
//   - setns back to the agent's namespace before the thread ends.
//
// Requirements: Linux ≥ 5.2 for open_tree/move_mount; as written also openat2 (5.6),
// STATX_MNT_ID (5.8) and mount_setattr (5.12), so Linux ≥ 5.12. On an older kernel each attach
// fails (reason "source", ENOSYS) and the liveness probe remains the fallback. Capabilities:
// CAP_SYS_ADMIN (open_tree, mount_setattr, move_mount, setns into a mount namespace),
// CAP_SYS_CHROOT (setns CLONE_NEWNS), and ptrace read access to the container's processes for
// /proc/<pid>/ns/mnt (PTRACE_MODE_READ_FSCREDS: CAP_SYS_PTRACE when they run as another user);
// the agent's privileged container has all of them (the node tests run as root with all of them). The agent pod needs hostPID: true to
// see container processes; without it the agent is pid 1 of its own PID namespace and
// RemountInContainers returns ErrNoHostPID without touching anything.
//
// # Choices, and what was tried and failed (each checked by a node test)
//
//   - Stack, never unmount. The alternative — umount2(MNT_DETACH) of the dead mount inside the
//     container, then move_mount onto the bare path — unmounts something that is not ours, and
//     if the move then fails the container writes into its image's directory underneath. It also
//     cannot work for containers in a user namespace: the mounts they inherited are locked, and
//     umount of one fails with EINVAL even from the host's root (TestNodeUserNamespacedContainer).
//     Stacking works there too. The cost: the dead mount stays beneath the live one (as it does on
//     the host), and each further loss adds one layer.
//   - After setns, mount(2) with the host path binds whatever that path means inside the
//     container (nothing, or the container's own directory), and mount(2) of /proc/self/fd/N of a
//     descriptor opened before setns fails with EINVAL (not in this namespace); only a detached
//     clone made before setns can be attached (TestNodeWhyOpenTree).
//   - Locking a goroutine, doing setns and letting the goroutine end retires the thread — except
//     the main thread, which Go cannot end: it stays wedged in the container's namespace, and
//     /proc/self (which follows the main thread) then describes the container's mount table to
//     the whole agent. Seen in the first node test run; the work now never runs on the main
//     thread and returns to the agent's namespace first (TestNodeAgentStaysInItsNamespace fails
//     2 runs in 3 without that).
//
// # Limits
//
//   - Files and directories opened on the dead connection (open descriptors, a working
//     directory) stay broken: the kernel cannot move them to the new connection. Only new path
//     lookups reach the live mount. Applications that keep files open must reopen them.
//   - Containers in a user namespace: detected (the namespace's user namespace differs from the
//     agent's); when the kernel refuses, the failure is reported with reason "userns_locked" and
//     the other containers are still fixed. On this kernel (6.18) stacking into them succeeded.
//
// # Layout
//
// Pure parsing (cgroup.go, mountinfo.go, plan.go) is table-tested; every effect goes through OS
// (ProcFS reads /proc, Namespaces does the kernel calls) with the real implementation in
// os_linux.go, a stub for other systems, and FakeNode (fake.go), which applies attaches to
// in-memory mount tables and records every breach of the safety rules. Node tests (-tags node,
// root) use real mount namespaces (unshare), a real s3fs killed with SIGKILL and a real S3 server
// (versitygw); only the processes' cgroup membership is faked through ProcFS, as test processes
// cannot join a kubepods cgroup here.
package containermount
