// Package localdisk makes pods with a lost local block disk startable: when the path of a Bound
// local block PV of this node is absent, it links a 512-byte fake loop device there, and retires
// it once the real disk is back and nothing holds the fake.
//
// Split: Reconciler (one idempotent pass over the OS, no memory between passes), OS (every OS
// effect; RealOS on Linux, FakeOS for tests), Controller (informers, fsnotify, resync,
// Events, PV annotation, Node condition, eviction, metrics).
//
// Ownership: everything the agent makes lives in <stateDir>/localdisk: <pv>.json (written first,
// removed last) and <pv>.img. A loop is ours only if its backing file is in that directory; a
// link is ours only if its content is exactly /dev/loopN for such a loop. Links are made with
// RENAME_NOREPLACE and never replace anything.
//
// Known limits: a link is removed after re-reading it, not atomically with the check (udev
// replacing it in that instant would lose its link until its next event); a loop held only by
// an open file descriptor (no holder, no loop on top) is detached lazily by the kernel
// (autoclear) rather than waited for; "a pod runs on the fake" is judged by its start time
// being after the fake was made.
package localdisk
