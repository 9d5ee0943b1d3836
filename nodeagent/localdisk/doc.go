// Package localdisk makes pods with a lost local block disk startable: when the link chain of a
// Bound local block PV used by a guarded pod on this node dangles, it links a 512-byte read-only
// fake loop device at the chain's first missing component, and retires it once the real disk is
// back and nothing holds the fake.
//
// Split: Reconciler (one idempotent pass over the OS, no memory between passes), OS (every OS
// effect; RealOS on Linux, localdisktest.FakeOS for tests, which records safety violations), Controller
// (New(deps, os, opts); volumes.go reads this node's pods from deps.View and
// their PVC/PV on demand plus the PVs of the records — never all PVs; report.go Events, PV
// annotation and metrics; nodestatus.go the Node condition; evict.go evictions).
//
// Paths: spec.local.path must lie under Options.PathRoots (default /dev/disk, /mnt/disks,
// /mnt/fast-disks) or be a kernel name (/dev/sdb), which is followed but never faked. The chain is
// followed link by link; the first missing component gets the fake only under
// Options.LinkRoots (default /dev/disk/by-{id,path,uuid}): an admin's link in a discovery
// directory (local-static-provisioner's /mnt/fast-disks/<name>) is never changed.
//
// Ownership: everything the agent makes lives in <stateDir>/localdisk: <pv>.json (written first,
// removed last; it names the PV path and the link made) and <pv>.img. A loop is ours only if its
// backing file is in that directory. A link is ours if its content is /dev/loopN for such a loop,
// or — when someone detached or rebound the loop — if it points into our loop range and its
// record names it: such a stale link is removed (never counted as a returned disk), and a minor
// a recorded link still points at is never given to another fake. A link of our range that no
// record names is not provably ours and is left alone. Links are made with RENAME_NOREPLACE and
// never replace anything. A PV whose path changed has its old link removed.
//
// Guard gating: a new fake is made only when every pod on this node using the PV carries the
// guard the webhook injects for that volume (Guarded: our marked init container mapping the
// claim's device; the guard filters the fake). The status annotation is never evidence: anyone
// can write it. An unguarded pod is named in an Event and kubelet's error stays. A `require` pod is evicted (Eviction API, PDBs respected) when
// the disk returns, as is a pod with the restart annotation. An eviction a PodDisruptionBudget
// refuses (429) is told once (Warning EvictionBlocked) and retried on every pass.
//
// "Runs on the fake": the pod's StartTime or its first container start is at or after the fake's
// creation (kubelet may see a pod before the fake exists and wait for the disk); a `require` pod
// whose application never started is held by its guard and always counts.
//
// Deployment: the agent must see the path roots outside /dev (the DaemonSet mounts /mnt/disks
// and /mnt/fast-disks read-only); a configured root it cannot see makes every PV under it look
// missing from its first component, which is not under a link root, so it is reported, not faked.
//
// Known limits: a link is removed after re-reading it, not atomically with the check (udev
// replacing it in that instant would lose its link until its next event); a loop held only by
// an open file descriptor (no holder, no loop on top) is detached lazily by the kernel
// (autoclear) rather than waited for; "a pod runs on the fake" is judged by timestamps, as above.
package localdisk
