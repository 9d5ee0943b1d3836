// Package fusewatch notices, without polling, that a FUSE daemon serving a mount on this node
// has exited, so that the S3 rescue restores a dead mount at once instead of at its next
// periodic check.
//
// # The signal
//
// A FUSE mount stays in the mount table when its daemon dies (every access then fails with
// ENOTCONN), so the mount table alone says nothing. What the kernel does say:
//
//   - every FUSE daemon holds /dev/fuse open, and on recent kernels /proc/<pid>/fdinfo/<fd> of
//     that descriptor names the connection it serves ("fuse_connection: 39"), which is the minor
//     number of the mount's device in mountinfo ("0:39") — seen on this project's 6.18 kernel
//     for s3fs and rclone alike, because the kernel writes it, not the program;
//   - a pidfd (pidfd_open(2)) of a process becomes readable when it exits;
//   - /proc/self/mountinfo signals POLLPRI when the mount table changes.
//
// So the Watcher keeps one epoll set holding the mount table and a pidfd per /dev/fuse holder
// that serves a FUSE connection mounted here. A daemon that dies before a walk saw it hold its
// descriptor (killed just after its mount) has no pidfd to report it: a walk that finds a
// mounted connection without a holder wakes the consumer too, at each orphan retry, until the
// retries run out (then the connection is dead for good, and told). The kernel gives a new FUSE
// mount the lowest free connection number, so a connection without a holder that gains a mount
// (a mountinfo ID it did not have) is walked for as a new one. It rescans the holders (a walk of /proc/*/fd) only
// when the mount table gains a FUSE connection (one that goes only lets go of its holders), after
// an exit (the descriptor may
// have moved to another process, as fusermount hands it to the daemon it mounts for), shortly
// after a connection was seen without a holder, and on a slow interval as a safety net. Where the
// kernel does not name the connection, every /dev/fuse holder is watched (a spurious wake only
// costs the rescue one check). Every mount table change is read at once.
//
// The walk treats what it finds as a tenant's: a descriptor counts only when its link
// (readlink of /proc/<pid>/fd/<n>) is exactly /dev/fuse (FuseDeviceLink), and only then is its
// fdinfo read. Nothing a descriptor points to is ever stat'ed or opened — a tenant's open file
// named fuse on a hung NFS or FUSE volume would otherwise stall the watcher (a stat through the
// magic link reaches the file's filesystem; readlink and fdinfo are answered from the kernel's
// own structures). A device node elsewhere than /dev, or a tenant's plain file at /dev/fuse in
// its own /dev, is handled by what the kernel says in fdinfo: once a walk has seen the kernel
// name a connection there, a descriptor that names none serves nothing mounted and makes no
// holder (a tenant's loop opening such a file costs no walk and no check); on a kernel that
// names none, every holder is watched whatever it serves (an exit then costs one check). The cost of a walk is
// bounded: at most OSOptions.MaxFDsPerProcess (16384) descriptors of each process, their names
// read 1024 at a time, one readlink each, plus one fdinfo read per /dev/fuse descriptor.
//
// The daemons of other pods (a CSI node plugin's s3fs) are visible only when the agent shares
// the host's PID namespace (hostPID, as the container remount needs); without it the Watcher
// sees the agent's own bridges and the periodic check remains the safety net for the rest.
//
// # API
//
// New(os, opts) builds a Watcher; Run(ctx) watches until ctx ends; Wake() is a channel that
// receives (coalesced) after any watched daemon exited. All OS effects go through OS (the real
// one is NewOS; tests use a fake).
package fusewatch
