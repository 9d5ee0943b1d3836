package csiclient

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/go-logr/logr"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// SweepFresh cleans what an earlier agent left at its fresh paths when it died in the middle of
// a replay or a retire (the rescue's Prepare runs it before any restore). A mount at a fresh path
// whose device is in the stack at its kubelet path was put there: the agent detaches it itself
// (the driver's process now serves kubelet's path; see the package doc). Any other mount there
// was never put there: the driver is asked to undo its call (NodeUnpublishVolume or
// NodeUnstageVolume at that path), then whatever is left is detached. The fresh directories
// are then removed.
func (c *Client) SweepFresh(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx)
	table, err := c.Mounter.MountTable()
	if err != nil {
		log.Error(err, "reading the mount table to clean fresh paths")
		return
	}
	seen := map[string]bool{}
	for _, m := range table {
		if !seen[m.MountPoint] {
			seen[m.MountPoint] = true
			c.sweepOne(ctx, m.MountPoint, table)
		}
	}
	// Directories without a mount (a crash after the detach, or before the driver mounted).
	pods := filepath.Join(c.Config.KubeletDir, "pods")
	uids, _ := c.FS.ReadDir(pods)
	for _, uid := range uids {
		c.removeFreshDirs(ctx, filepath.Join(pods, uid, freshDirName), false)
	}
	c.removeFreshDirs(ctx, freshStageRoot(c.Config.KubeletDir), true)
}

// sweepOne handles one mount point holding a mount, when it is one of our fresh paths.
func (c *Client) sweepOne(ctx context.Context, fresh string, table stack.Table) {
	log := logr.FromContextOrDiscard(ctx).WithValues("path", fresh)
	var pvName, kubeletPath string
	stage := false
	if uid, pvEsc, ok := ParseFreshPublishPath(c.Config.KubeletDir, fresh); ok {
		pvName = pvEsc
		kubeletPath = TargetPath(c.Config.KubeletDir, uid, pvEsc) // escaping an escaped name changes nothing
	} else if pvName, stage = ParseFreshStagePath(c.Config.KubeletDir, fresh); !stage {
		return // not one of our fresh paths
	}
	pv, perr := c.View.PersistentVolume(ctx, pvName)
	if perr == nil && pv.Spec.CSI == nil {
		pv = nil
	}
	if stage && pv != nil {
		kubeletPath = KubeletStagingPath(c.Config.KubeletDir, pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)
	}
	top, _ := table.Top(fresh)
	placed := kubeletPath != "" && slices.ContainsFunc(table.Stack(kubeletPath), func(m stack.Mount) bool { return m.Dev == top.Dev })
	if !placed && pv != nil && c.Dialer != nil {
		cctx, cancel := context.WithTimeout(ctx, c.Timeout)
		if node, err := c.Dialer.Dial(cctx, c.pluginSocket(cctx, pv.Spec.CSI.Driver)); err == nil {
			c.undoCall(cctx, node, pv.Spec.CSI.VolumeHandle, fresh, stage)
			_ = node.Close()
		}
		cancel()
	}
	log.Info("cleaning a fresh path left by an earlier agent", "placedAtKubeletPath", placed, "pvKnown", pv != nil)
	c.DropFresh(ctx, fresh)
}

// removeFreshDirs removes the (empty, unmounted) directories under one of our fresh roots and
// the root itself; stage roots hold <pv>/stage.
func (c *Client) removeFreshDirs(ctx context.Context, root string, stage bool) {
	names, err := c.FS.ReadDir(root)
	if err != nil || len(names) == 0 {
		return
	}
	table, err := c.Mounter.MountTable()
	if err != nil {
		return
	}
	for _, n := range names {
		dir := filepath.Join(root, n)
		if stage {
			if table.IsMountPoint(filepath.Join(dir, "stage")) {
				continue
			}
			_ = c.FS.Remove(filepath.Join(dir, "stage"))
		}
		if table.IsMountPoint(dir) {
			continue
		}
		if err := c.FS.Remove(dir); err != nil {
			logr.FromContextOrDiscard(ctx).V(1).Info("fresh directory not removed", "path", dir, "err", err.Error())
		}
	}
	_ = c.FS.Remove(root)
}

// undoCall asks the driver to undo its call at one of our fresh paths.
func (c *Client) undoCall(ctx context.Context, node Node, volumeID, fresh string, stage bool) {
	var err error
	if stage {
		err = node.NodeUnstage(ctx, volumeID, fresh)
	} else {
		err = node.NodeUnpublish(ctx, volumeID, fresh)
	}
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("the driver did not undo its call at our fresh path; detaching it ourselves", "path", fresh, "err", err.Error())
	}
}
