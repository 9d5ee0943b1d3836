// Package s3mount restores lost FUSE mounts of S3 CSI volumes on a node.
//
// When an S3 CSI node plugin restarts, its FUSE processes die and every pod volume they served
// answers ENOTCONN. The rescue (Restorer, built as New(deps, os, opts) like every rescue of the
// agent) checks the targets of this node's pods (read through the node-scoped ClusterView: pods
// from the shared informer, PVs/PVCs on demand) at once when a FUSE daemon exits (fusewatch), on
// every pod change, and when a node plugin's socket appears in <kubelet>/plugins_registry,
// <kubelet>/plugins or <kubelet>/plugins/<driver> (inotify, csiclient.FSNotifyWatcher: a restarted driver is
// replayed through as soon as it is back). A periodic pass is the safety net: every
// s3.checkInterval (1 min; it bounds how late a hung daemon, which wakes nothing, is noticed), and
// every s3.pendingCheckInterval (1 s) while a step only time moves on may be due (nextCheckIn). A
// pass costs a mountinfo read and one statfs per target. It restores a dead target in this order:
//
//  1. Replay through the driver (primary), for drivers in s3.replayDrivers. The node plugin's
//     socket is found as kubelet finds it: Registration.GetInfo on each registration socket in
//     <kubelet>/plugins_registry names the driver's endpoint (csiclient.GRPCRegistry); without one, the
//     usual <kubelet>/plugins/<driver>/csi.sock. Kubelet's calls are then replayed: NodeStageVolume when the plugin has STAGE_UNSTAGE_VOLUME,
//     then NodePublishVolume for each dead target — same volume ID, capability (access mode,
//     fsType, the PV's mount options), volume context (the PV's attributes, plus pod info when the
//     CSIDriver sets podInfoOnMount), and exactly the secrets kubelet passes (the PV's
//     nodeStageSecretRef for staging, nodePublishSecretRef for publishing). The mount is then the
//     driver's own — any FUSE program, the right directory, its options — and it lives with the
//     driver, not with our agent.
//  2. Bridge with our own s3fs while the driver cannot restore it: at once when the driver does
//     not answer (s3.driverDownBridgeAfter, 0: a restart or rollout; handed back to the driver's
//     mount the moment it answers, so no pod waits for the plugin), after s3.bridgeAfter when it
//     answers but the replay fails or when the PV's bridges flap (more than s3.bridgeFlapLimit
//     driver-down bridges within s3.bridgeFlapWindow: a crash-looping plugin); only for a dead mount of the FUSE type the driver's profile gives for
//     s3fs, and only when the driver's layout is known (s3.profiles, config.S3Profile: attribute
//     names, subdirectory rule, mounter attribute and the values meaning s3fs; built in:
//     ru.yandex.s3.csi without "mounter: s3fs" runs geesefs; ch.ctrox.csi.s3-driver mounts
//     bucket:/<prefix>/csi-fs unless usePrefix). Anything else is
//     reported (Event reason CannotReproduce), not guessed.
//
// # Identity, not names
//
// A pod's volume counts only along a chain matched by UID (chain.go): the pod's claim must be
// Bound, and the PV it names must have a claimRef naming that claim (namespace, name, UID) — a
// Pending claim naming another tenant's PV counts for nothing. Only the PV's own driver
// (spec.csi.driver) makes it an S3 volume, never a claim's provisioner annotation. Discovery
// reads the chain from the view's cache and reads both ends again when they do not match (a
// claim or PV recreated under its name); a replay, a bridge or a hand-back reads the chain live
// first, so none ever uses a deleted PV's attributes; the Secret is always read live.
//
// # Covering the dead mount
//
// Drivers refuse a target whose mount check fails with ENOTCONN, and unmounting the dead mount
// first would expose the bare directory to running containers (they would write into the node's
// disk) and detach the mount running containers hold. So nothing is ever unmounted from a live
// pod's target except our own dead binds:
//
//   - the driver is asked to publish (and stage) at fresh directories of ours that no container
//     sees but the driver does (see "Paths the driver can see" below);
//   - the result is bind-mounted over the dead mount at kubelet's path (the pod's target, or
//     kubelet's staging path <kubelet>/plugins/kubernetes.io/csi/<driver>/<sha256 of the handle>/
//     globalmount), on top, so the path switches from dead to live in one mount call and
//     containers with HostToContainer propagation see the live mount at once;
//   - the fresh directory is then unmounted (lazily) by the agent and removed: the driver's FUSE
//     connection lives on in the bind at kubelet's path, served by the driver's own process;
//   - the container remounter (nodeagent.ContainerRemounter, when configured) is asked to move
//     running containers from the dead device to the live target (a bridge pass asks once for
//     all the PV's pods, after every target is bound: RemountPods).
//
// # Paths the driver can see
//
// A node plugin deployed by its upstream manifest (k8s-csi-s3's DaemonSet, for one) mounts only
// <kubelet>/pods and <kubelet>/plugins/kubernetes.io/csi (Bidirectional), its socket directory
// and /dev/fuse. Any other path it is handed is created in its own root filesystem and mounted
// there, invisible to the node: a bind of that path from the node's side would put the node's
// empty directory over the volume. So the fresh directories are:
//
//   - publish: <kubelet>/pods/<pod UID>/pvrescue~s3/<pv> (FreshPublishPath). In the pod's own
//     directory, outside volumes/: kubelet reconstructs and tears down volumes by scanning
//     pods/<uid>/volumes/<plugin>/<volume>, so nothing of ours goes there. While the pod lives
//     kubelet leaves other directories in it alone; once the pod is gone kubelet's orphan
//     cleanup removes empty directories and refuses mount points (retrying later), so a
//     left-over of ours can only delay the removal of a gone pod's directory until the agent
//     cleans it;
//   - stage: <kubelet>/plugins/kubernetes.io/csi/pvrescue~s3/<pv>/stage (FreshStagePath). Not in a
//     <driver>/<sha256 of the handle> directory, which kubelet's unmountDevice cleans
//     (globalmount, vol_data.json, the directory itself when empty), and without a
//     vol_data.json: kubelet never parses it. "~" is valid neither in a CSI driver name nor in
//     the directories kubelet makes, so the name collides with nothing of kubelet's.
//
// A restarted agent finds what a crash at any step left at these paths (csiclient.SweepFresh, on
// start): a
// mount whose device is at the kubelet path was handed over and is detached by the agent; any
// other is undone through the driver, then detached; the directories are removed.
//
// Once the driver's mount is at kubelet's path the agent detaches the driver's mount at the fresh directory itself
// (MNT_DETACH) and removes the directory; it does not call NodeUnpublishVolume or
// NodeUnstageVolume there. Field drivers unmount and then wait for the FUSE process whose
// command line names the path to exit (k8s-csi-s3's FuseUnmount waits up to 20 s and fails):
// that process now serves kubelet's path and must not exit; and some stop the volume's daemon
// by volume ID (k8s-csi-s3's systemd units for geesefs), which would kill the live mount. The
// driver's later NodeUnstageVolume/NodeUnpublishVolume at kubelet's paths, when the pod goes,
// unmounts the last mount of that FUSE connection and its process exits by itself.
//
// A mount move (MS_MOVE) would avoid the bind, but the kubelet directory is a shared mount and
// the kernel refuses to move a mount out of or into a shared parent; a bind has the same effect
// for every reader.
//
// # Verify before binding
//
// Nothing is bound over a kubelet path (a replayed publish, a restaged globalmount, a bridge, the
// hand-back from the bridge to the driver, putting the bridge back) before one check
// (stack.Rules.Check):
// the source is a mount point whose device differs from the mount it sits on (not a directory of
// the node's filesystem), its device is none of those at the kubelet path (the dead one, or
// ours), its type is the dead driver mount's FUSE type or the profile's (our own bridge: fuse or
// fuse.s3fs), and it answers statfs (once per bridge pass: the same bridge mount, by ID and
// device, is not asked again for each target; stack.Answers). A refusal binds nothing, leaves the dead mount as it is
// (the probe's case), emits an Event named after what the driver produced
// (ReplayResultNotVisible, ReplayResultWrongFilesystem, ReplayResultSameDevice,
// ReplayResultNotAnswering), counts pvrescue_s3_result_checks_total{result}, and undoes the
// driver's call at the fresh path (NodeUnpublishVolume/NodeUnstageVolume there: that mount serves
// nothing else), then detaches what is left and removes the directory. After BridgeAfter our
// bridge may serve the volume meanwhile; a refused hand-back backs off and the bridge stays.
//
// # Hung is not dead
//
// A statfs timeout means the FUSE daemon still holds the connection (the kernel aborts the
// connection of a daemon that died, and statfs then fails at once with ENOTCONN). Such a mount is
// never replaced, however long it hangs: no second daemon, nothing stacked, no replay — the old
// daemon could still write what it buffered after newer writes through a new mount. The agent
// emits MountHung (once per episode), keeps pvrescue_s3_mounts_hung, and sets the Node condition
// S3MountHung after s3.hungConditionAfter. With s3.abortHungAfter set, the connection is aborted
// after that long by writing to /sys/fs/fuse/connections/<minor>/abort (fusectl mounted there
// when missing); the mount is then dead and restored as usual (MountHungAborted). What a pod
// sees meanwhile: its reads and writes on the volume block until the daemon answers (or the
// abort, after which they fail with ENOTCONN until the restore); the injected probe reports the
// timeout but does not fail, so containers are not restarted (a new container would get the same
// hung mount, and kubelet cannot even start one while the host path hangs).
//
// # Bounded stacks and teardown
//
// Before anything goes on top of a target, dead mounts of ours there (recognised by our fsname,
// pvrescue-s3:<pv>, which binds inherit) are removed, so a target holds at most the driver's dead
// mount plus one live mount.
//
// A teardown is never worse than without us. When a pod is gone (deleted, or every container
// ended), the agent removes only its own mounts from the top of its targets — our bridge binds
// (our fsname) and dead mounts we put there (stack.Placed) — and never the last mount at a
// target: kubelet's teardown calls the driver's NodeUnpublishVolume there, and a driver whose
// unpublish is a plain umount of the target (k8s-csi-s3: codes.Internal on EINVAL, retried by
// kubelet for ever) needs a mount to find. The driver's mounts, dead or alive, stay for the
// driver. The mount we put at a target (a replayed driver mount, a bridge bind) is recorded by
// device (stack.Placed, in handed.json; every removal of ours forgets it); when it vanishes from
// a gone pod's target without us removing it, kubelet's teardown took it (the driver's
// NodeUnpublish unmounts the top only, and succeeded), found the dead mount below and left its
// directory, and kubelet will not call the driver again for it. Only then does the agent remove
// what is left (our binds, the dead FUSE mount of a configured S3 driver) and finish kubelet's
// removeMountDir: the empty mount directory, vol_data.json and the empty volume directory, so
// kubelet's orphan cleanup can remove the pod's directory. Both kinds of help are counted,
// pvrescue_s3_teardown_help_total{action="emptied"|"finished"}: with the live mount put beneath
// the dead one a target holds one mount, the driver's NodeUnpublish takes it and kubelet
// finishes alone, so the counter moves only for stacks (left by earlier agents, or where the
// kernel refused to replace).
//
// # Bridges outlive the agent
//
// A bridge's s3fs serves running pods, so it must survive the agent's container: a DaemonSet
// rollout, a pod deletion, an OOM kill. The container runtime ends a container by killing every
// process of the container's cgroup (runc's destroy does so for a container that shares the
// host's PID namespace, as the agent does with hostPID; it reads the pids from the devices
// hierarchy on cgroup v1) and then removes that cgroup. So every bridge is:
//
//   - started detached (s3fs.Supervisor, s3fs/procs_linux.go): its own session (setsid), stdin /dev/null,
//     stdout and stderr to <state>/s3/log/<pv>.log (truncated at each start; a pipe to the agent
//     would break with the agent and SIGPIPE would kill s3fs), working directory <state>/s3,
//     TMPDIR and s3fs's tmpdir= in <state>/s3/tmp/<pv>, no other inherited descriptor;
//   - started in the node's network namespace, <Options.BridgeNetNS> (default /proc/1/ns/net,
//     joined by the forking thread only): the agent pod has its own, which keeps only lo once
//     the pod is deleted — a bridge s3fs in it survived the agent but every S3 request (and so
//     every read through the bridge) hung (seen on the demo cluster: the surviving s3fs's
//     /proc/<pid>/net/dev listed only lo). When init's namespace cannot be opened (the demo
//     node: EACCES even for root), the agent's parent's is used (with hostPID the container's
//     shim, which runs on the node's network), and failing that the agent's own (logged);
//   - moved at once into a cgroup of ours, <Options.BridgeCgroup>/<pv>-<pid> (default
//     pvrescue/s3/...), on every hierarchy of the node: each v1 hierarchy (cpuset levels get
//     their parent's cpus and mems) and the v2 one. The hierarchies are taken as /proc/1 (the
//     node's init, with hostPID) sees them, through /proc/1/root, and written from a thread that
//     joined /proc/1's cgroup namespace (v2 refuses moves outside the writer's namespace). When
//     /proc/1/root is not reachable (seen on the demo cluster: EACCES), the agent's own mounts
//     are used if they show whole hierarchies, else each hierarchy is mounted afresh under
//     /tmp/pvrescue-cgroup (a cgroup v1 container sees only its own cgroup at
//     /sys/fs/cgroup/<controller>; a new mount of the hierarchy shows all of it). On v2 with a
//     private cgroup namespace and /proc/1 out of reach there is no way out. A failed move is
//     logged: the bridge works but dies with the container. The group and its parent run under s3.bridgeLimits (each
//     bridge, all together), since the agent container's limits no longer cover s3fs, with the
//     kernel's default CPU weight on every level (no bridge outranks the pods' groups). The agent removes a bridge's group once its s3fs has exited, and at
//     start any <pv>-<pid> group no bridge of its uses (an earlier agent was gone when its s3fs
//     exited, or kept no record): the kernel refuses to remove one that still has a process;
//   - recorded in <state>/s3/bridges/<pv>.json: pid, start time (field 22 of /proc/<pid>/stat)
//     and cgroup.
//
// While the agent lives, the bridge is its child and it reaps it. When the agent dies the bridge
// is reparented to the container's shim (a child subreaper) and, when the shim ends with the pod,
// to init; both reap. A restarted agent (Prepare → adopt) recognises a bridge as live and its
// own when its mount at <state>/s3/staging/<pv> answers and the recorded pid still has
// the recorded start time and that mount point on its command line; it then watches it through
// a pidfd (it is no longer its child) and neither starts a second s3fs nor binds again. A
// recorded s3fs whose mount is dead or gone is stopped (through the pidfd, so a reused
// pid is never signalled), and its mount, record and cgroup removed. Retiring a bridge (its
// targets moved back to the driver, or its pods gone) never signals s3fs: our bind at a bridged
// target is detached lazily (MNT_DETACH) when the driver's mount replaces it (files an app holds
// open on the bridge make a plain unmount fail with EBUSY, and they keep working through the
// detached bind), then the bridge's own mount is detached lazily too. Once the last file open on it
// is closed, the kernel releases the filesystem and s3fs exits by itself, having uploaded what
// was written; the agent watches it (as its child, or through a pidfd), and removes its record
// and cgroup after it exited. Until then the record is <state>/s3/bridges/<pv>.<pid>.retiring,
// which a restarted agent watches again (s3fs/retiring.go). A bind of the bridge left under the
// driver's mount keeps s3fs alive until kubelet's teardown of that pod.
//
// A bridge is hung, not dead, when its statfs times out: s3fs under heavy writes is slow, and a
// daemon that died gives ENOTCONN at once. Neither adoption nor Ensure ever stops or unmounts a
// bridge for a timeout (s3fs.ErrBridgeBusy); only ENOTCONN/ECONNABORTED-class answers
// (stack.IsDead), or no running process of it, do. A read-only PV's bridge runs s3fs with -o
// ro (read-only kept by the daemon, not only by the binds' mount flag), and every bridge gets
// -o ensure_diskfree=<s3.bridgeDiskFreeMB>: its temporary files never fill the node's disk
// below that.
//
// The bridge's mount namespace and root stay the agent container's: s3fs and its libraries
// (libfuse, libcurl, libssl, NSS modules loaded at run time, CA certificates read at each TLS
// handshake) come from the agent image, and running it in the host's namespace would load the
// host's copies, of other versions. The FUSE mount itself does not depend on that namespace: it
// is made at <state>/s3/staging/<pv>, a Bidirectional mount, so it exists in the host's
// namespace independently, and kubelet's binds of it keep working after the container is gone.
// What an orphaned bridge pins is bounded and released when it retires: the old container's
// mount namespace, holding the read-only image rootfs (readOnlyRootFilesystem: the writable
// layer is empty) and the old pod's small volume mounts (configmap, token, the 64 MiB /tmp
// emptyDir); containerd's removal of the container still succeeds (its own copy of the rootfs
// mount is unmounted, the snapshot directory removed; the pinned superblock is freed with the
// last bridge of that generation). No bridge is ever started from an old generation: new ones
// come from the running agent. Without hostPID the agent has its own PID namespace, and the
// kernel kills every process of it when the container ends: bridges then cannot survive (the
// agent logs it; the shipped manifests set hostPID).
//
// # Rooms
//
// One dead target goes forward through four packages, never back:
//
//   - s3mount, the orchestrator, file by file in the order an incident runs through them: Run
//     and Sync (rescue.go), discovery and health (discovery.go, the claim chain in chain.go),
//     the order above with the live reads it starts and its backoff (restore.go), replay of a
//     PV's targets (replay.go) or the bridge's binds (bridge.go), what every restore ends with —
//     the cover and its record (restored.go), then the container remount (remount.go) —, a
//     refused result (refused.go); in later passes the hand-back (retire.go), hung mounts
//     (hung.go), forgetting gone targets and leaving gone pods (cleanup.go); metrics and Events
//     (reasons in internal/contract);
//   - s3mount/csiclient, talking to a node plugin: registration, socket watch, kubelet's CSI
//     paths, the fresh directories, and one Session (dial, capability, publish context, staging
//     path) through which replay and retire restage and publish;
//   - s3mount/s3fs, our own s3fs that outlives the agent: volume attributes and credentials
//     through the allowlists, the command line, the process, cgroup and network namespace, the
//     records, adoption and retiring (Supervisor);
//   - s3mount/stack, the rules at one kubelet path on internal/mountinfo: the mount table, health,
//     which mounts are ours (our fsname, stack.Placed), the check before a bind, and covering a
//     dead mount without ever leaving the path bare (Rules.Cover).
//
// The subpackages never import s3mount; csiclient and s3fs use stack.
package s3mount
