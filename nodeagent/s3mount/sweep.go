package s3mount

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/go-logr/logr"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// sweepFresh cleans what an earlier agent left at its fresh paths when it died in the middle of
// a replay or a hand-back (Prepare runs it before any restore). A mount at a fresh path whose
// device is in the stack at its kubelet path was handed over: the agent detaches it itself
// (the driver's process now serves kubelet's path; see the package doc). Any other mount there
// was never handed over: the driver is asked to undo its call (NodeUnpublishVolume or
// NodeUnstageVolume at that path), then whatever is left is detached. The fresh directories
// are then removed.
func (r *Restorer) sweepFresh(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx)
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		log.Error(err, "reading the mount table to clean fresh paths")
		return
	}
	seen := map[string]bool{}
	for _, m := range table {
		if seen[m.MountPoint] || !isFreshPath(r.cfg.KubeletDir, m.MountPoint) {
			continue
		}
		seen[m.MountPoint] = true
		r.sweepOne(ctx, m.MountPoint, table)
	}
	// Directories without a mount (a crash after the detach, or before the driver mounted).
	pods := filepath.Join(r.cfg.KubeletDir, "pods")
	uids, _ := r.os.FS.ReadDir(pods)
	for _, uid := range uids {
		r.removeFreshDirs(ctx, filepath.Join(pods, uid, freshDirName), false)
	}
	r.removeFreshDirs(ctx, freshStageRoot(r.cfg.KubeletDir), true)
}

// sweepOne handles one fresh path holding a mount.
func (r *Restorer) sweepOne(ctx context.Context, fresh string, table stack.Table) {
	log := logr.FromContextOrDiscard(ctx).WithValues("path", fresh)
	var pvName, kubeletPath string
	stage := false
	if uid, pvEsc, ok := ParseFreshPublishPath(r.cfg.KubeletDir, fresh); ok {
		pvName = pvEsc
		kubeletPath = filepath.Join(r.cfg.KubeletDir, "pods", uid, "volumes", csiPluginDir, pvEsc, "mount")
	} else if pvEsc, ok := ParseFreshStagePath(r.cfg.KubeletDir, fresh); ok {
		pvName, stage = pvEsc, true
	}
	pv, perr := r.d.View.PersistentVolume(ctx, pvName)
	if perr == nil && pv.Spec.CSI == nil {
		pv = nil
	}
	if stage && pv != nil {
		kubeletPath = KubeletStagingPath(r.cfg.KubeletDir, pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)
	}
	top, _ := table.Top(fresh)
	handed := kubeletPath != "" && slices.ContainsFunc(table.Stack(kubeletPath), func(m stack.Mount) bool { return m.Dev == top.Dev })
	if !handed && pv != nil && r.os.CSI != nil {
		cctx, cancel := context.WithTimeout(ctx, r.opts.MountTimeout)
		if node, err := r.os.CSI.Dial(cctx, r.pluginSocket(cctx, pv.Spec.CSI.Driver)); err == nil {
			r.undoCall(cctx, node, pv.Spec.CSI.VolumeHandle, fresh, stage)
			_ = node.Close()
		}
		cancel()
	}
	log.Info("cleaning a fresh path left by an earlier agent", "handedOver", handed, "pvKnown", pv != nil)
	r.dropFresh(ctx, fresh)
}

// removeFreshDirs removes the (empty, unmounted) directories under one of our fresh roots and
// the root itself; stage roots hold <pv>/stage.
func (r *Restorer) removeFreshDirs(ctx context.Context, root string, stage bool) {
	names, err := r.os.FS.ReadDir(root)
	if err != nil || len(names) == 0 {
		return
	}
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return
	}
	for _, n := range names {
		dir := filepath.Join(root, n)
		if stage {
			if table.IsMountPoint(filepath.Join(dir, "stage")) {
				continue
			}
			_ = r.os.FS.Remove(filepath.Join(dir, "stage"))
		}
		if table.IsMountPoint(dir) {
			continue
		}
		if err := r.os.FS.Remove(dir); err != nil {
			logr.FromContextOrDiscard(ctx).V(1).Info("fresh directory not removed", "path", dir, "err", err.Error())
		}
	}
	_ = r.os.FS.Remove(root)
}

// undoCall asks the driver to undo its call at one of our fresh paths.
func (r *Restorer) undoCall(ctx context.Context, node CSINode, volumeID, fresh string, stage bool) {
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
