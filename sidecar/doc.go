// Package sidecar is pvrescue-sidecar, the helper the webhook injects into pods. It must stay
// small, static (CGO_ENABLED=0) and free of Kubernetes client code: it runs as an init container
// and as a livenessProbe, where start-up time matters (a unit test checks its import graph).
//
// The command line is a contract with the webhook (names in internal/contract):
//
//	pvrescue-sidecar install --to /pvrescue/bin
//	    Copies its own executable to /pvrescue/bin/pvrescue-sidecar (temp file + rename, 0755),
//	    so images without a shell can run the probe and the exec wrapper.
//
//	pvrescue-sidecar guard --device /dev/data1=claimA --device /dev/data2=claimB \
//	    --policy filter|require --out /pvrescue --fake-size 512 [--termination-log /dev/termination-log]
//	    Measures each block device from sysfs (/sys/dev/block/MAJ:MIN/size, 512-byte sectors) —
//	    no open of the node, so it works as any user (the helper image runs as 65532 and device
//	    nodes are root:disk 0660); a device of exactly --fake-size bytes is fake.
//	    Writes /pvrescue/devices.json (schema: Report) and /pvrescue/dev/<basename> symlinks to the
//	    real devices only, and a one-line summary to the termination log and stdout. Devices that
//	    cannot be measured (missing node, not a block device, size 0) are recorded with an error
//	    and get no link. Exit 0; under policy require, exit 1 (ExitRefused) when any device is fake
//	    or unreadable; exit 2 (ExitError) on a bad command line or when the outputs cannot be
//	    written. The symlinks point at the guard container's device paths, so the webhook must give
//	    the app containers the same devicePath for each claim.
//
//	pvrescue-sidecar exec --devices /pvrescue/devices.json -- CMD ARGS...
//	    Removes the device nodes devices.json marks fake (after checking each is still a block
//	    device of the fake size), then execve's CMD (PATH lookup as execvp; environment kept), so
//	    PID, signals and exit code are the command's. A missing devices.json means no guard ran:
//	    it just execs. Problems (unreadable report, node that cannot be removed) go to stderr and
//	    never stop the command. Exit 127 when CMD is not found, 126 when it cannot be executed.
//	    Non-root containers: the wrapper cannot unlink a node in the container's root-owned /dev
//	    (EACCES). It then says so on stderr, points at /pvrescue/dev (the filtered view, real
//	    devices only) and runs the command anyway: the app must open its devices through the
//	    filtered view or read devices.json to tell the fake. The fake cannot harm it: the agent
//	    attaches it read-only, and its node (root 0660) is not even openable by a non-root user.
//
//	pvrescue-sidecar probe --timeout 3s /mnt/a /mnt/b
//	    statfs on every path concurrently, all bounded by one timeout; prints "PATH: ok" or
//	    "PATH: reason (ERRNO)" per path and exits 1 when a path failed (a dead mount: ENOTCONN,
//	    EIO, ...), 0 otherwise. A statfs stuck on a hung FUSE mount is abandoned and reported, but
//	    does not fail the probe: a restarted container would get the same hung mount (the node
//	    agent reports it, MountHung, and may abort it, s3.abortHungAfter). Each statfs runs in a
//	    child process of the helper (`pvrescue-sidecar statfs PATH`, internal): a daemon that
//	    has read the request and hangs holds its caller beyond SIGKILL, and were the caller a
//	    thread of the probe, the probe could not exit and kubelet would count a timeout.
package sidecar
