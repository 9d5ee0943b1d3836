package s3mount

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// replay restores the dead targets of one PV through its own node plugin, calling what kubelet
// called: NodeStageVolume (when the plugin stages) and NodePublishVolume per target, with the
// PV's volume ID, capability, volume context (plus pod info when the CSIDriver asks for it) and
// exactly the secrets kubelet passes. Each call goes to a fresh directory of ours, and the result
// is put over the dead mount at kubelet's path (see the package doc). ErrDriverDown when the plugin does not
// answer.
func (r *Restorer) replay(ctx context.Context, pv *corev1.PersistentVolume, ts []target) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pv.Name, "method", MethodReplay)
	cctx, cancel := context.WithTimeout(ctx, r.opts.MountTimeout)
	defer cancel()
	session, err := r.csi.Open(cctx, pv)
	if err != nil {
		return err
	}
	defer func() { _ = session.Close() }()
	// The targets' stacks before the restage: dropping a dead staging mount we put earlier at
	// kubelet's globalmount also drops its propagated copies at the targets, so the dead mount
	// running containers hold (this death's) is no longer in the targets' stacks afterwards, and
	// the container remounter must still be asked about it.
	var before stack.Table
	if session.Stages {
		before, _ = r.os.Mounter.MountTable()
	}
	if err := session.Restage(cctx); err != nil {
		return err
	}
	var errs []error
	for _, t := range ts {
		if err := r.republish(cctx, session, t, before.Stack(t.path)); err != nil {
			log.Error(err, "replaying NodePublishVolume", "pod", klogRef(t.pod), "path", t.path)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// republish publishes the volume for one pod at a fresh directory and puts the driver's mount
// on the pod's dead target. prior is the target's stack before the restage (nil without one).
func (r *Restorer) republish(ctx context.Context, session *csiclient.Session, t target, prior []stack.Mount) error {
	pv := session.PV
	fresh := csiclient.FreshPublishPath(r.cfg.KubeletDir, string(t.pod.UID), pv.Name)
	req, err := session.Request(ctx, t.pod, fresh, t.readOnly)
	if err != nil {
		return err
	}
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return err
	}
	if session.StagingPath != "" && table.IsMountPoint(t.path) && r.os.Statfs.Statfs(ctx, t.path, r.cfg.S3.StatfsTimeout.Duration) == nil {
		// The staging mount just replayed reached the target by itself: kubelet's directory is
		// a shared mount and the driver's publish was a bind of the staging path, so the new
		// staging mount propagated onto the target. That is the driver's own mount back.
		r.revivedByStaging(ctx, pv, t, table, prior)
		return nil
	}
	if err := session.Publish(ctx, req, table); err != nil {
		return err
	}
	dead, ro, ok, herr := r.cover(ctx, fresh, t, nil)
	if errors.Is(herr, stack.ErrResultRefused) {
		session.Undo(ctx, fresh)
		return herr
	}
	// The fresh directory is ours; the target (or nothing) now holds the driver's mount.
	session.DropFresh(ctx, fresh)
	if herr != nil || !ok {
		return herr
	}
	if table, err := r.os.Mounter.MountTable(); err == nil {
		if top, found := table.Top(t.path); found {
			dead = withPrior(dead, prior, top)
		}
	}
	r.restored(ctx, t, MethodReplay, contract.ReasonMountReplayed, ro, dead, "driver "+pv.Spec.CSI.Driver+" replayed "+r.replayedWith(pv)+", its own mount moved over the dead one")
	return nil
}

// revivedByStaging records a target that the replayed staging mount revived through mount
// propagation: the mount on top is recorded as one we put there (bounded stacks), the ones below are
// the dead mounts running containers may still hold.
// prior, the target's stack before the restage, adds the dead mount the restage removed (with
// the dead staging mount it propagated from): running containers hold that one.
func (r *Restorer) revivedByStaging(ctx context.Context, pv *corev1.PersistentVolume, t target, table stack.Table, prior []stack.Mount) {
	mounts := table.Stack(t.path)
	top := mounts[len(mounts)-1]
	if err := r.rules.Placed.Put(t.path, top.Dev); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "recording the replayed mount", "path", t.path)
	}
	r.restored(ctx, t, MethodReplay, contract.ReasonMountReplayed, t.readOnly || top.ReadOnly(), withPrior(mounts[:len(mounts)-1], prior, top),
		"driver "+pv.Spec.CSI.Driver+" staged again "+r.replayedWith(pv)+"; its mount reached the target through kubelet's shared staging path")
}

// replayedWith names what the replay passed the driver, from the PV read live along the chain:
// its volume handle and the mounter its attributes select (a PV recreated under the same name
// shows its own values here, not the deleted one's).
func (r *Restorer) replayedWith(pv *corev1.PersistentVolume) string {
	m, _, _ := r.cfg.S3.Profile(pv.Spec.CSI.Driver).Mounter(pv.Spec.CSI.VolumeAttributes)
	if m == "" {
		m = "the driver's default"
	}
	return fmt.Sprintf("with volume %s (PV uid %s), mounter %s", pv.Spec.CSI.VolumeHandle, pv.UID, m)
}

// withPrior adds to dead the mounts of prior (a target's earlier stack) that are not in dead and
// not of live's device, newest first: the dead mounts removed from the target meanwhile.
func withPrior(dead, prior []stack.Mount, live stack.Mount) []stack.Mount {
	out := slices.Clone(dead)
	for i := len(prior) - 1; i >= 0; i-- {
		m := prior[i]
		if m.Dev == live.Dev || slices.ContainsFunc(out, func(x stack.Mount) bool { return x.ID == m.ID || x.Dev == m.Dev && x.Root == m.Root }) {
			continue
		}
		out = append(out, m)
	}
	return out
}
