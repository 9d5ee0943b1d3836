package s3mount

import (
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// OS bundles every effect the restorer has on the node, so the logic runs against fakes in
// unit tests and against the real node (NewOS, Linux only) in node tests and production.
type OS struct {
	Mounter stack.Mounter
	Procs   s3fs.ProcessStarter
	// Cgroups moves our s3fs bridges out of the agent container's cgroups.
	Cgroups s3fs.Cgroups
	Statfs  stack.StatfsChecker
	FS      stack.FS
	// CSI dials node plugins for replay; nil turns replay off.
	CSI csiclient.Dialer
	// Plugins wakes the check when a node plugin's socket appears; nil: periodic checks only.
	Plugins csiclient.Watcher
	// Registry finds node plugins through kubelet's plugin registration; nil: the usual
	// <kubelet>/plugins/<driver>/csi.sock only.
	Registry csiclient.Registry
	// FUSE aborts hung FUSE connections (s3.abortHungAfter); nil: never aborted.
	FUSE stack.FUSEConnections
	// Replacer puts restored mounts beneath the dead ones at kubelet's paths and detaches the
	// dead ones; nil: bound on top (stacked).
	Replacer stack.Replacer
}
