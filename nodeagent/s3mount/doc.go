// Package s3mount restores lost FUSE mounts of S3 CSI volumes on a node.
//
// When an S3 CSI node plugin restarts, its FUSE processes die and every pod volume they served
// answers ENOTCONN. The rescue (Restorer, built as New(deps, os, opts) like every rescue of the
// agent) checks the targets of this node's pods (read through the node-scoped ClusterView: pods
// from the shared informer, PVs/PVCs on demand) and restores a dead one in this order:
//
//  1. Replay through the driver (primary), for drivers in s3.replayDrivers. The node plugin's
//     socket is found where drivers register it with kubelet (<kubelet>/plugins/<driver>/csi.sock)
//     and kubelet's calls are replayed: NodeStageVolume when the plugin has STAGE_UNSTAGE_VOLUME,
//     then NodePublishVolume for each dead target — same volume ID, capability (access mode,
//     fsType, the PV's mount options), volume context (the PV's attributes, plus pod info when the
//     CSIDriver sets podInfoOnMount), and exactly the secrets kubelet passes (the PV's
//     nodeStageSecretRef for staging, nodePublishSecretRef for publishing). The mount is then the
//     driver's own — any FUSE program, the right directory, its options — and it lives with the
//     driver, not with our agent.
//  2. Bridge with our own s3fs only while the driver stays down: after the target has been dead
//     for s3.bridgeAfter, only for a dead fuse.s3fs mount, and only when the driver's layout is
//     known (bridgeProfiles: ru.yandex.s3.csi without "mounter: s3fs" runs geesefs;
//     ch.ctrox.csi.s3-driver mounts bucket:/<prefix>/csi-fs unless usePrefix). Anything else is
//     reported (Event reason CannotReproduce), not guessed.
//
// # The hand-back
//
// Drivers refuse a target whose mount check fails with ENOTCONN, and unmounting the dead mount
// first would expose the bare directory to running containers (they would write into the node's
// disk) and detach the mount running containers hold. So nothing is ever unmounted from a live
// pod's target except our own dead binds:
//
//   - the driver is asked to publish (and stage) at fresh directories of ours,
//     <state>/s3/replay/<pv>/<pod UID> and <state>/s3/replay/<pv>/stage, that no container sees;
//   - the result is bind-mounted over the dead mount at kubelet's path (the pod's target, or
//     kubelet's staging path <kubelet>/plugins/kubernetes.io/csi/<driver>/<sha256 of the handle>/
//     globalmount), on top, so the path switches from dead to live in one mount call and
//     containers with HostToContainer propagation see the live mount at once;
//   - the fresh directory is then unmounted (lazily): the driver's FUSE connection lives on in the
//     bind at kubelet's path, served by the driver's own process;
//   - the container remounter (nodeagent.ContainerRemounter, when configured) is asked to move
//     running containers from the dead device to the live target.
//
// A mount move (MS_MOVE) would avoid the bind, but the kubelet directory is a shared mount and
// the kernel refuses to move a mount out of or into a shared parent; a bind has the same effect
// for every reader.
//
// # Bounded stacks and teardown
//
// Before anything goes on top of a target, dead mounts of ours there (recognised by our fsname,
// pvrescue-s3:<pv>, which binds inherit) are removed, so a target holds at most the driver's dead
// mount plus one live mount. A statfs timeout alone is a slow mount, not a dead one: only
// ENOTCONN-class errors, or timeouts lasting Options.HungAfter, count as death. When a pod is gone
// (deleted, or every container ended), its targets are emptied top down: our binds, then a dead
// FUSE mount of a configured S3 driver below them (kubelet keeps the pod until its target holds no
// mount, and a driver whose NodeUnpublish unmounts only the top leaves that dead mount behind).
// Live mounts that are not ours are never touched.
//
// Files: rescue.go (options, loop), discovery.go (targets, health), restore.go (the order above),
// replay.go and csi.go (the driver path), bridge.go and allowlist.go (our s3fs and what may reach
// its command line), cleanup.go (teardown).
package s3mount
