package s3mount

import (
	"context"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-logr/logr"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// pruneState forgets timers, retry state and health series of targets and PVs that are gone,
// so memory does not grow with history (table: the mount table this pass started with).
func (r *Restorer) pruneState(targets []target, table stack.Table) {
	paths := map[string]bool{}
	pvs := map[string]bool{}
	stagings := map[string]bool{}
	for _, t := range targets {
		paths[t.path] = true
		pvs[t.pv] = true
		stagings[t.staging] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.deadSince {
		if !paths[p] {
			delete(r.deadSince, p)
		}
	}
	for p := range r.hungSince {
		if !paths[p] {
			delete(r.hungSince, p)
		}
	}
	for p, k := range r.healthy {
		if !paths[p] {
			r.metrics.MountHealthy.DeleteLabelValues(k.pv, k.namespace, k.pod)
			delete(r.healthy, p)
		}
	}
	// A gone pod's target keeps its record while it is mounted: cleanupTargets reads it.
	_ = r.rules.Placed.Prune(func(p string) bool { return paths[p] || stagings[p] || table.IsMountPoint(p) })
	for pv := range r.retry {
		if !pvs[pv] && !r.inflight[pv] {
			delete(r.retry, pv)
		}
	}
}

// cleanupTargets removes our own mounts from the targets of pods that are gone (deleted, or
// every container ended) and leaves the driver's mounts, dead or alive, for the driver's own
// NodeUnpublishVolume: a teardown is never worse than without us. A driver whose unpublish is a
// plain umount of the target (k8s-csi-s3, Internal on EINVAL) fails for ever when the agent has
// emptied the target before it, so the last mount at a target stays (stack.Rules.Empty) until
// kubelet's teardown is provably over: the mount we put at the target vanished without us
// removing it — the driver's NodeUnpublish took it and succeeded, and kubelet will not call it
// again. Only then does the agent remove what is left (our binds below, then the driver's dead
// FUSE mount) and finish kubelet's removeMountDir.
func (r *Restorer) cleanupTargets(ctx context.Context, table stack.Table, live map[string]bool) {
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
		uid, _, ok := csiclient.ParseTargetPath(r.cfg.KubeletDir, m.MountPoint)
		if !ok || live[uid] {
			continue
		}
		done[m.MountPoint] = true
		// The mount we put at this target (a replayed driver mount or a bridge bind) is gone
		// although we did not remove it (every removal of ours forgets the record): kubelet's
		// teardown took it (the driver's NodeUnpublish unmounts the top only) and found the dead
		// driver mount below, so kubelet left its mount directory and vol_data.json behind and
		// will not come back for them.
		rec := r.rules.Placed.Dev(m.MountPoint)
		mounts := table.Stack(m.MountPoint)
		tornDown := rec != "" && !slices.ContainsFunc(mounts, func(x stack.Mount) bool { return x.Dev == rec })
		ours := r.rules.Empty(ctx, m.MountPoint, table, !tornDown)
		if ours > 0 {
			r.metrics.TeardownHelp.WithLabelValues(TeardownEmptied).Inc()
			log.Info("removed our own mounts from the target of a gone pod; the driver's stay for its NodeUnpublish", "podUID", uid, "path", m.MountPoint, "ourMounts", ours, "left", len(mounts)-ours)
		}
		if tornDown && ours+r.rules.ClearAfterTeardown(ctx, m.MountPoint, r.deadDriverMount) > 0 {
			r.finishTeardown(ctx, m.MountPoint) // only once nothing is mounted there any more
		}
		if r.oursLeftAt(m.MountPoint) {
			left++ // our part of the teardown waits for kubelet's: look again soon (nextCheckIn)
		}
	}
}

// oursLeftAt reports whether a gone pod's target still holds something the agent will act on
// once kubelet's teardown has run: a mount of ours (our fsname), or a recorded mount (Placed)
// whose removal by kubelet's teardown the agent finishes. A target holding only the driver's
// mounts is the driver's alone, however long its plugin stays away: no fast cadence for it.
func (r *Restorer) oursLeftAt(path string) bool {
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return true
	}
	mounts := table.Stack(path)
	if len(mounts) == 0 {
		return false
	}
	if r.rules.Placed.Dev(path) != "" {
		return true
	}
	return slices.ContainsFunc(mounts, func(m stack.Mount) bool {
		_, ours := stack.PVFromFSName(m.Source)
		return ours
	})
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
	for _, p := range []string{path, filepath.Join(volDir, csiclient.VolDataFile), volDir} {
		if err := r.os.FS.Remove(p); err != nil {
			log.Error(err, "finishing kubelet's teardown of a gone pod's volume", "path", p)
			return
		}
	}
	r.metrics.TeardownHelp.WithLabelValues(TeardownFinished).Inc()
	if err := r.rules.Placed.Forget(path); err != nil {
		log.Error(err, "forgetting the record of a torn-down target", "path", path)
	}
	log.Info("finished kubelet's teardown of a gone pod's volume (its driver left a dead mount under ours)", "path", volDir)
}

// deadDriverMount: top, the top mount at a gone pod's target path, is a FUSE mount whose
// filesystem is gone, of a volume kubelet recorded (vol_data.json) for a configured S3 driver.
// Asked only after kubelet's teardown of that target is over (ClearAfterTeardown).
func (r *Restorer) deadDriverMount(ctx context.Context, path string, top stack.Mount) bool {
	if top.FSType != "fuse" && !strings.HasPrefix(top.FSType, "fuse.") {
		return false
	}
	data, err := r.os.FS.ReadFile(filepath.Join(filepath.Dir(path), csiclient.VolDataFile))
	if err != nil {
		return false
	}
	vd, err := csiclient.ParseVolData(data)
	if err != nil || !r.cfg.IsS3Driver(vd.DriverName) {
		return false
	}
	return stack.IsDead(r.os.Statfs.Statfs(ctx, path, r.cfg.S3.StatfsTimeout.Duration))
}

// retireUnusedBridges retires the bridges no target on this node uses any more.
func (r *Restorer) retireUnusedBridges(ctx context.Context, table stack.Table, live map[string]bool) {
	log := logr.FromContextOrDiscard(ctx)
	// A bridge is used while a bind of ours is on a live pod's target (even when discovery missed
	// the pod's volume this round: stopping s3fs would kill that pod's mount), or a restore of its
	// PV is in flight. A bridge whose targets all moved to the driver's mount is retired.
	candidates := map[string]bool{}
	for _, m := range table {
		if pv, ok := r.layout.MountPV(m); ok {
			candidates[pv] = true
		}
	}
	for _, pv := range r.bridges.PVs() {
		candidates[pv] = true
	}
	r.mu.Lock()
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
		uid, _, ok := csiclient.ParseTargetPath(r.cfg.KubeletDir, m.MountPoint)
		if !ok || !live[uid] {
			continue
		}
		if top, found := fresh.Top(m.MountPoint); found {
			if pv, ours := stack.PVFromFSName(top.Source); ours {
				used[pv] = true
			}
		}
	}
	for pv := range candidates {
		if used[pv] {
			continue
		}
		path := r.layout.MountPoint(pv)
		r.bridges.Retire(ctx, pv)
		if err := r.os.FS.Remove(r.layout.PasswdFile(pv)); err != nil {
			log.Error(err, "removing passwd file", "pv", pv)
		}
		r.mu.Lock()
		delete(r.retry, pv)
		r.mu.Unlock()
		log.Info("retired unused bridge", "pv", pv, "path", path)
	}
}
