package s3mount

import (
	"context"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-logr/logr"
)

// cleanupTargets empties the targets of pods that are gone (deleted, or every container ended),
// top down: first our binds, then a dead FUSE mount of a configured S3 driver left under them
// (a driver whose NodeUnpublish unmounts only the top mount leaves it, and kubelet keeps the pod
// until the target holds no mount). A live mount that is not ours is never touched: kubelet and
// the driver tear it down.
func (r *Restorer) cleanupTargets(ctx context.Context, table MountTable, live map[string]bool) {
	log := logr.FromContextOrDiscard(ctx)
	done := map[string]bool{}
	left := 0
	defer func() {
		r.mu.Lock()
		r.goneTargetsMounted = left
		r.mu.Unlock()
	}()
	for _, m := range table {
		if done[m.MountPoint] {
			continue
		}
		uid, _, ok := ParseTargetPath(r.cfg.KubeletDir, m.MountPoint)
		if !ok || live[uid] {
			continue
		}
		done[m.MountPoint] = true
		// The mount we put at this target (a replayed hand-back or a bridge bind) is gone
		// although we did not remove it: kubelet's teardown took it (the driver's NodeUnpublish
		// unmounts the top only) and found the dead driver mount below, so kubelet left its
		// mount directory and vol_data.json behind and will not come back for them.
		rec := r.handedDev(m.MountPoint)
		stack := table.Stack(m.MountPoint)
		tornDown := rec != "" && !slices.ContainsFunc(stack, func(x MountInfo) bool { return x.Dev == rec })
		ours, driver := r.emptyTarget(ctx, m.MountPoint, table)
		if ours+driver > 0 {
			log.Info("emptied the target of a gone pod", "podUID", uid, "path", m.MountPoint, "ourBinds", ours, "deadDriverMounts", driver)
		}
		if ours+driver == len(stack) && tornDown && driver > 0 {
			r.finishTeardown(ctx, m.MountPoint)
		}
		if ours+driver < len(stack) {
			left++ // kubelet's teardown is under way: look again soon (nextCheckIn)
		}
	}
}

// finishTeardown does for an emptied target what kubelet's CSI TearDownAt (removeMountDir) does
// once the target is no longer a mount point: remove the (empty) mount directory, vol_data.json
// and the (empty) volume directory. Only empty directories are removed.
func (r *Restorer) finishTeardown(ctx context.Context, path string) {
	log := logr.FromContextOrDiscard(ctx)
	table, err := r.os.Mounter.MountTable()
	if err != nil || table.IsMountPoint(path) {
		return
	}
	volDir := filepath.Dir(path)
	for _, p := range []string{path, filepath.Join(volDir, VolDataFile), volDir} {
		if err := r.os.FS.Remove(p); err != nil {
			log.Error(err, "finishing kubelet's teardown of a gone pod's volume", "path", p)
			return
		}
	}
	if err := r.forgetHanded(path); err != nil {
		log.Error(err, "forgetting the record of a torn-down target", "path", path)
	}
	log.Info("finished kubelet's teardown of a gone pod's volume (its driver left a dead mount under ours)", "path", volDir)
}

// emptyTarget removes our mounts and dead S3-driver FUSE mounts from the top of path's stack.
func (r *Restorer) emptyTarget(ctx context.Context, path string, table MountTable) (ours, driver int) {
	log := logr.FromContextOrDiscard(ctx)
	stack := table.Stack(path)
	for i := len(stack) - 1; i >= 0; i-- {
		top := stack[i]
		if _, mine := PVFromFSName(top.Source); mine {
			if err := r.os.Mounter.Unmount(path, true); err != nil {
				log.Error(err, "removing our bind from a gone pod's target", "path", path)
				return ours, driver
			}
			r.removedRecorded(ctx, path, top)
			ours++
			continue
		}
		if !r.deadDriverMount(ctx, path, top) {
			return ours, driver
		}
		if err := r.os.Mounter.Unmount(path, true); err != nil {
			log.Error(err, "removing a dead driver mount from a gone pod's target", "path", path)
			return ours, driver
		}
		r.removedRecorded(ctx, path, top)
		driver++
	}
	return ours, driver
}

// removedRecorded forgets path's record when we ourselves removed the mount it names: its
// absence then says nothing about kubelet's teardown.
func (r *Restorer) removedRecorded(ctx context.Context, path string, m MountInfo) {
	if r.handedDev(path) != m.Dev {
		return
	}
	if err := r.forgetHanded(path); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "forgetting the record of a removed mount", "path", path)
	}
}

// deadDriverMount: top, the top mount at a gone pod's target path, is a FUSE mount whose
// filesystem is gone, of a volume kubelet recorded (vol_data.json) for a configured S3 driver.
func (r *Restorer) deadDriverMount(ctx context.Context, path string, top MountInfo) bool {
	if top.FSType != "fuse" && !strings.HasPrefix(top.FSType, "fuse.") {
		return false
	}
	data, err := r.os.FS.ReadFile(filepath.Join(filepath.Dir(path), VolDataFile))
	if err != nil {
		return false
	}
	vd, err := ParseVolData(data)
	if err != nil || !r.cfg.IsS3Driver(vd.DriverName) {
		return false
	}
	return IsDead(r.os.Statfs.Statfs(ctx, path, r.cfg.S3.StatfsTimeout.Duration))
}

// cleanupStagings stops staging mounts no target on this node uses any more.
func (r *Restorer) cleanupStagings(ctx context.Context, table MountTable, live map[string]bool) {
	log := logr.FromContextOrDiscard(ctx)
	// A bridge is used while a bind of ours is on a live pod's target (even when discovery missed
	// the pod's volume this round: stopping s3fs would kill that pod's mount), or a restore of its
	// PV is in flight. A bridge whose targets all moved to the driver's mount is retired.
	candidates := map[string]bool{}
	for _, m := range table {
		if pv, ok := r.layout.StagingPV(m); ok {
			candidates[pv] = true
		}
	}
	r.mu.Lock()
	for pv := range r.stagings {
		candidates[pv] = true
	}
	// A restore in flight (started by an earlier Sync) may be binding right now: skip its PV.
	// Restores set their binds before they clear inflight, so the table read below, after this
	// check, holds the binds of every restore found finished here.
	for pv := range candidates {
		if r.inflight[pv] {
			delete(candidates, pv)
		}
	}
	r.mu.Unlock()
	if len(candidates) == 0 {
		return
	}
	fresh, err := r.os.Mounter.MountTable()
	if err != nil {
		log.Error(err, "reading the mount table")
		return
	}
	// Only a bind of ours at the top of a live pod's target serves it; one covered by the
	// driver's mount (after a retire) does not hold the bridge.
	used := map[string]bool{}
	for _, m := range fresh {
		uid, _, ok := ParseTargetPath(r.cfg.KubeletDir, m.MountPoint)
		if !ok || !live[uid] {
			continue
		}
		if top, found := fresh.Top(m.MountPoint); found {
			if pv, ours := PVFromFSName(top.Source); ours {
				used[pv] = true
			}
		}
	}
	for pv := range candidates {
		if used[pv] {
			continue
		}
		path := r.layout.Staging(pv)
		r.retireStaging(ctx, pv)
		if err := r.os.FS.Remove(r.layout.PasswdFile(pv)); err != nil {
			log.Error(err, "removing passwd file", "pv", pv)
		}
		r.mu.Lock()
		delete(r.retry, pv)
		r.mu.Unlock()
		log.Info("retired unused staging mount", "pv", pv, "path", path)
	}
}

// unmountAll lazily unmounts every mount stacked at path (only used on agent-owned paths).
func (r *Restorer) unmountAll(path string, table MountTable) {
	for range table.Stack(path) {
		if err := r.os.Mounter.Unmount(path, true); err != nil {
			return
		}
	}
}
