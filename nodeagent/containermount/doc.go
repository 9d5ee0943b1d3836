// Package containermount puts a restored FUSE mount back into the running containers that still
// hold the dead one, so no container has to restart after an s3fs-based CSI plugin loses its
// mounts, whatever the container's mountPropagation and whether or not the webhook ever saw the
// pod.
//
// # What a pass does
//
// After s3mount has restored a pod's target on the host (a new mount of the volume at the
// target: stacked on the dead one today, or replaced beneath it with internal/mountreplace), it
// calls RemountInContainers with the pod, the dead connection's "major:minor" and the target.
// A bridge made for a PV restores every pod's target first and then asks once for all the
// pods (RemountPods): the node's processes are listed and the agent's own mount table read once
// per such pass, not once per pod. For each pod the Remounter then:
//
//  1. reads its own mount table and refuses unless the target's top mount is live;
//  2. finds the pod's processes by the pod UID in /proc/<pid>/cgroup (cgroupfs and systemd
//     layouts, cgroup v1 and v2, dashed and underscored UIDs — ParseCgroup), keeps only each
//     container's init — the process the runtime started: the oldest of the container's cgroup
//     (/proc/<pid>/stat start time; in a tie, the one whose parent is outside the container),
//     ContainerInits — whose mount namespace the runtime made: owned (NS_GET_USERNS) by the
//     init's user namespace, which must be the pod's — its sandbox's, the pod's oldest init —
//     and that the host's (the agent's) or a child of the host's (NS_GET_PARENT; RuntimeMade;
//     judged from the kernel only, never from the spec's hostUsers, which a tenant writes),
//     and groups those by mount namespace, skipping the host's (pid 1) and the agent's own
//     (GroupByNamespace). A mount namespace only another process of the container is in was
//     made by the container's own processes (unshare -Urm): a clone put there from the agent's
//     namespace would not be locked, and its owner could remount a read-only volume writable.
//     Such a namespace is never entered; where it still holds the dead mount, the pass reports it
//     (ErrNotRuntimeNamespace, reason "not_runtime_namespace") with a ContainerMountSkipped
//     Event, and the container's liveness probe remains the fallback. Those namespaces' mount
//     tables are read (capped, MaxForeignMountInfo) and their Events sent after the pass has
//     released the remounter's lock, so a tenant's namespace never holds up another pass;
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
//  4. replaces each dead mount by a clone of the live mount at that offset (Place, with
//     internal/mountreplace): the clone goes beneath the dead top, then the dead mount is
//     detached, so the mount point holds one mount after any number of deaths and never shows
//     the bare directory. The clone keeps the dead mount's read-only, nosuid, nodev, noexec and
//     propagation, plus the pod spec's read-only, the live mount's own flags (a clone never
//     widens its source) and slave propagation when the spec says HostToContainer or
//     Bidirectional (once the host's dead mount is replaced, a HostToContainer mount in a
//     container has lost its master and shows private). Where the kernel cannot (older than
//     6.5: the start-up Probe, logged by the agent) or will not (a locked mount in a user
//     namespace, propagation it would have to overmount) mount beneath, or the dead mount has
//     mounts on it, the clone is stacked on top as before and the pass logs and counts why
//     (pvrescue_mount_replace_total{mode,reason}). A mount point nested in a dead one that was
//     stacked over is attached again inside the live outer mount in the next round (Nest).
//     Then it reads the namespace's mountinfo again and checks the top mount is the live
//     connection showing exactly the planned directory with the planned read-only flag, and
//     that a replaced dead mount is gone;
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
//   - setns(CLONE_NEWNS) with a /proc/<init pid>/ns/mnt descriptor whose inode is checked
//     against the planned namespace (a reused pid is never entered) and whose owning user
//     namespace (NS_GET_USERNS on that descriptor) must be the one planned;
//   - then internal/mountreplace's calls (one implementation for the host and the containers):
//     statx(STATX_MNT_ID, AT_STATX_DONT_SYNC) of the mount point (it must still be the planned
//     dead mount; no request reaches the dead FUSE daemon), mount_setattr on the detached clone
//     (flags and propagation: read-only before anyone can see it), move_mount
//     MOVE_MOUNT_BENEATH (or on top) to the verified descriptor, the table checked,
//     umount2(MNT_DETACH|UMOUNT_NOFOLLOW) of the dead top's last name, from a thread whose
//     working directory is its verified parent directory (never the path again: the container's
//     directories are the tenant's to rename); mount_setattr MOUNT_ATTR_RDONLY in place for
//     a propagated mount that must be read-only (the mountinfo of the entered namespace is read
//     through a /proc descriptor opened before setns, thread-self);
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
//   - Replace beneath, never unmount first. Unmounting the dead mount and then attaching the
//     clone on the bare path would show the container its image's directory in between (and
//     leave it there if the attach fails); it also fails for containers in a user namespace,
//     whose inherited mounts are locked (umount gives EINVAL even from the host's root,
//     TestNodeUserNamespacedContainer). MOVE_MOUNT_BENEATH puts the live mount under the dead
//     one first; only then is the dead one detached. The kernel refuses beneath moves at locked
//     mounts: those are stacked (reason "refused"), as everything was before Linux 6.5, and the
//     dead layer then stays beneath the live one.
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
//   - The pod's user namespace is its sandbox's (the pause process the runtime starts first).
//     Under a runtime that runs no sandbox process the pod's oldest container stands for it, and
//     an entrypoint of that container that is `unshare -Urm …` would be taken as the pod's.
//   - Containers in a user namespace (hostUsers: false; the runtime's, a child of the host's):
//     detected (the namespace's user namespace differs from the agent's); when the kernel refuses, the failure is reported with reason "userns_locked" and
//     the other containers are still fixed. On this kernel (6.18) their inherited (locked) mounts
//     are stacked over (refused beneath), the mounts they made themselves are replaced.
//   - A dead mount with a mount of the volume nested on it (a subPath inside the volume's own
//     mount point) is stacked over (reason "submounts": detaching it would take the inner one
//     along), and until the next round nests the subPath again inside the live outer mount, its
//     mount point shows the volume's own directory of that name.
//   - HostToContainer with the host still stacking (s3mount today): the host's new mount
//     propagates on top of the container's dead one, which stays beneath it (the pass leaves a
//     live mount alone).
//
// # Layout
//
// Pure parsing (cgroup.go, mountinfo.go, plan.go) is table-tested; every effect goes through OS
// (ProcFS reads /proc, Namespaces does the kernel calls) with the real implementation in
// os_linux.go, a stub for other systems, and containermounttest.FakeNode, which runs Place (and
// so mountreplace's Replacer) over a kernel modelled on in-memory mount tables and records every
// breach of the safety rules, including any instant a replaced mount point is bare. Place is
// also unit-tested over mountreplacetest.FakeKernel. Node tests (-tags node,
// root) use real mount namespaces (unshare), a real s3fs killed with SIGKILL and a real S3 server
// (versitygw); only the processes' cgroup membership is faked through ProcFS, as test processes
// cannot join a kubepods cgroup here.
package containermount
