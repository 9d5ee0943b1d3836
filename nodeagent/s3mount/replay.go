package s3mount

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Volume-context keys kubelet adds when the CSIDriver sets podInfoOnMount.
const (
	ctxPodName        = "csi.storage.k8s.io/pod.name"
	ctxPodNamespace   = "csi.storage.k8s.io/pod.namespace"
	ctxPodUID         = "csi.storage.k8s.io/pod.uid"
	ctxServiceAccount = "csi.storage.k8s.io/serviceAccount.name"
	ctxEphemeral      = "csi.storage.k8s.io/ephemeral"
)

// replay restores the dead targets of one PV through its own node plugin, calling what kubelet
// called: NodeStageVolume (when the plugin stages) and NodePublishVolume per target, with the
// PV's volume ID, capability, volume context (plus pod info when the CSIDriver asks for it) and
// exactly the secrets kubelet passes. Each call goes to a fresh directory of ours, and the result
// is handed over to kubelet's path (see the package doc). ErrDriverDown when the plugin does not
// answer.
func (r *Restorer) replay(ctx context.Context, pv *corev1.PersistentVolume, ts []target) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pv.Name, "method", MethodReplay)
	src := pv.Spec.CSI
	socket := r.pluginSocket(ctx, src.Driver)
	cctx, cancel := context.WithTimeout(ctx, r.opts.MountTimeout)
	defer cancel()
	node, err := r.os.CSI.Dial(cctx, socket)
	if err != nil {
		return err
	}
	defer node.Close()
	stages, err := node.StageUnstage(cctx)
	if err != nil {
		return err
	}
	capability := VolumeCapability(pv)
	pubCtx, err := r.publishContext(cctx, pv)
	if err != nil {
		return err
	}
	// The targets' stacks before the restage: dropping a dead staging mount we handed back
	// earlier at kubelet's globalmount also drops its propagated copies at the targets, so the
	// dead mount running containers hold (this death's) is no longer in the targets' stacks
	// afterwards, and the container remounter must still be asked about it.
	var before stack.Table
	if stages {
		before, _ = r.os.Mounter.MountTable()
	}
	stagingPath := ""
	if stages {
		stagingPath = KubeletStagingPath(r.cfg.KubeletDir, src.Driver, src.VolumeHandle)
		if err := r.restage(cctx, node, pv, capability, pubCtx, stagingPath, FreshStagePath(r.cfg.KubeletDir, pv.Name)); err != nil {
			return err
		}
	}
	var errs []error
	for _, t := range ts {
		fresh := FreshPublishPath(r.cfg.KubeletDir, string(t.pod.UID), pv.Name)
		if err := r.republish(cctx, node, pv, capability, pubCtx, stagingPath, fresh, t, before.Stack(t.path)); err != nil {
			log.Error(err, "replaying NodePublishVolume", "pod", klogRef(t.pod), "path", t.path)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// restage stages the volume again when kubelet's staging path is not the driver's live mount
// (dead, or our bridge): the plugin stages at a fresh directory, whose mount is then bound over
// kubelet's staging path (on top of the dead one; no container uses that path) and the fresh
// directory unmounted. Our own mounts on top there (a bridge, a dead earlier hand-back) go first,
// so the stack stays the driver's dead mount plus one live mount.
func (r *Restorer) restage(ctx context.Context, node CSINode, pv *corev1.PersistentVolume, capability *csi.VolumeCapability, pubCtx map[string]string, stagingPath, fresh string) error {
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return err
	}
	mounted := table.IsMountPoint(stagingPath)
	if top, ok := table.Top(stagingPath); ok {
		if _, ours := stack.PVFromFSName(top.Source); !ours && r.os.Statfs.Statfs(ctx, stagingPath, r.cfg.S3.StatfsTimeout.Duration) == nil {
			return nil // the driver's staging is live
		}
	}
	secrets, err := r.secretData(ctx, pv.Spec.CSI.NodeStageSecretRef)
	if err != nil {
		return err
	}
	if err := r.freshDir(fresh, table); err != nil {
		return err
	}
	if err := node.NodeStage(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: pv.Spec.CSI.VolumeHandle, StagingTargetPath: fresh, VolumeCapability: capability,
		PublishContext: pubCtx, Secrets: secrets, VolumeContext: pv.Spec.CSI.VolumeAttributes,
	}); err != nil {
		r.undoFresh(ctx, node, pv.Spec.CSI.VolumeHandle, fresh, true)
		return fmt.Errorf("%w: NodeStageVolume: %w", ErrReplay, err)
	}
	if _, err := r.rules.Check(ctx, fresh, stack.CheckFor(table, stagingPath, r.cfg.S3.Profile(pv.Spec.CSI.Driver).FUSEType)); err != nil {
		r.undoFresh(ctx, node, pv.Spec.CSI.VolumeHandle, fresh, true)
		return err
	}
	defer r.dropFresh(ctx, fresh)
	if !mounted {
		// Only a path that is not a mount point may need creating: on a dead FUSE mount point
		// stat fails with ENOTCONN and mkdir with EEXIST.
		if err := r.os.FS.MkdirAll(stagingPath, 0o750); err != nil {
			return fmt.Errorf("%w: create %s: %w", stack.ErrMount, stagingPath, err)
		}
	}
	if err := r.rules.DropOurTops(ctx, stagingPath); err != nil {
		return err
	}
	if err := r.os.Mounter.Bind(fresh, stagingPath, false); err != nil {
		return err
	}
	r.rules.RecordTop(ctx, stagingPath, "the restaged mount")
	return nil
}

// republish publishes the volume for one pod at a fresh directory and hands it over to the
// pod's dead target. prior is the target's stack before the restage (nil without one).
func (r *Restorer) republish(ctx context.Context, node CSINode, pv *corev1.PersistentVolume, capability *csi.VolumeCapability, pubCtx map[string]string, stagingPath, fresh string, t target, prior []stack.Mount) error {
	secrets, err := r.secretData(ctx, pv.Spec.CSI.NodePublishSecretRef)
	if err != nil {
		return err
	}
	volCtx, err := r.volumeContext(ctx, pv, t.pod)
	if err != nil {
		return err
	}
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return err
	}
	if stagingPath != "" && table.IsMountPoint(t.path) && r.os.Statfs.Statfs(ctx, t.path, r.cfg.S3.StatfsTimeout.Duration) == nil {
		// The staging mount just replayed reached the target by itself: kubelet's directory is
		// a shared mount and the driver's publish was a bind of the staging path, so the new
		// staging mount propagated onto the target. That is the driver's own mount back.
		r.revivedByStaging(ctx, pv, t, table, prior)
		return nil
	}
	if err := r.freshDir(fresh, table); err != nil {
		return err
	}
	if err := node.NodePublish(ctx, publishRequest(pv, capability, pubCtx, stagingPath, fresh, t.readOnly, secrets, volCtx)); err != nil {
		r.undoFresh(ctx, node, pv.Spec.CSI.VolumeHandle, fresh, false)
		return fmt.Errorf("%w: NodePublishVolume: %w", ErrReplay, err)
	}
	dead, ro, ok, herr := r.cover(ctx, fresh, t)
	if errors.Is(herr, stack.ErrResultRefused) {
		r.undoFresh(ctx, node, pv.Spec.CSI.VolumeHandle, fresh, false)
		return herr
	}
	if herr == nil && ok {
		r.rules.RecordTop(ctx, t.path, "the replayed mount")
	}
	// The fresh directory is ours; the target (or nothing) now holds the driver's mount.
	r.dropFresh(ctx, fresh)
	if herr != nil || !ok {
		return herr
	}
	if table, err := r.os.Mounter.MountTable(); err == nil {
		if top, found := table.Top(t.path); found {
			dead = withPrior(dead, prior, top)
		}
	}
	r.restored(ctx, t, MethodReplay, EventMountReplayed, ro, dead, "driver "+pv.Spec.CSI.Driver+" replayed, its own mount moved over the dead one")
	return nil
}

// revivedByStaging records a target that the replayed staging mount revived through mount
// propagation: the mount on top is recorded as handed back (bounded stacks), the ones below are
// the dead mounts running containers may still hold.
// prior, the target's stack before the restage, adds the dead mount the restage removed (with
// the dead staging mount it propagated from): running containers hold that one.
func (r *Restorer) revivedByStaging(ctx context.Context, pv *corev1.PersistentVolume, t target, table stack.Table, prior []stack.Mount) {
	mounts := table.Stack(t.path)
	top := mounts[len(mounts)-1]
	if err := r.rules.Placed.Put(t.path, top.Dev); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "recording the replayed mount", "path", t.path)
	}
	r.restored(ctx, t, MethodReplay, EventMountReplayed, t.readOnly || top.ReadOnly(), withPrior(mounts[:len(mounts)-1], prior, top),
		"driver "+pv.Spec.CSI.Driver+" staged again; its mount reached the target through kubelet's shared staging path")
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

// dropFresh removes a fresh directory of ours after a hand-back: the mounts there (the driver's,
// whose FUSE connection now lives on in the bind at kubelet's path) are detached by the agent
// itself, never through the driver's NodeUnpublishVolume/NodeUnstageVolume — see the package
// doc — and the directory, with its parent of ours when empty, removed.
func (r *Restorer) dropFresh(ctx context.Context, fresh string) {
	log := logr.FromContextOrDiscard(ctx)
	if table, err := r.os.Mounter.MountTable(); err == nil {
		r.rules.UnmountAll(fresh, table)
		if table, err = r.os.Mounter.MountTable(); err == nil && table.IsMountPoint(fresh) {
			log.Error(stack.ErrMount, "a fresh directory of ours is still mounted; it stays until the next start", "path", fresh)
			return
		}
	}
	for _, p := range []string{fresh, filepath.Dir(fresh)} {
		if err := r.os.FS.Remove(p); err != nil {
			log.V(1).Info("fresh directory not removed", "path", p, "err", err.Error())
			return
		}
	}
}

// undoFresh removes the driver's mount at a fresh path of ours whose result was not handed
// over (refused, or the call failed half-way): through the driver first — that mount serves
// nothing else, so its NodeUnpublishVolume/NodeUnstageVolume may wait for or stop the daemon
// behind it, and it is the only way to reach a mount the node does not see — then whatever is
// still visible there is detached by the agent and the directory removed.
func (r *Restorer) undoFresh(ctx context.Context, node CSINode, volumeID, fresh string, stage bool) {
	r.undoCall(ctx, node, volumeID, fresh, stage)
	r.dropFresh(ctx, fresh)
}

// freshDir makes dir an empty directory with nothing mounted (it is ours: left-overs go).
func (r *Restorer) freshDir(dir string, table stack.Table) error {
	r.rules.UnmountAll(dir, table)
	if err := r.os.FS.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("%w: create %s: %w", stack.ErrMount, dir, err)
	}
	return nil
}

// secretData reads a secret kubelet would pass (nil ref: none) as the CSI secrets map.
func (r *Restorer) secretData(ctx context.Context, ref *corev1.SecretReference) (map[string]string, error) {
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	s, err := r.d.View.Secret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%s: %w", s3fs.ErrSecretNotFound, ref.Namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// volumeContext is the PV's volume attributes plus, when the CSIDriver sets podInfoOnMount,
// the pod information kubelet adds.
func (r *Restorer) volumeContext(ctx context.Context, pv *corev1.PersistentVolume, pod *corev1.Pod) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range pv.Spec.CSI.VolumeAttributes {
		out[k] = v
	}
	drv, err := r.d.View.CSIDriver(ctx, pv.Spec.CSI.Driver)
	if apierrors.IsNotFound(err) {
		return out, nil // no CSIDriver object: kubelet adds no pod info either
	}
	if err != nil {
		// Never replay with a context that may lack what kubelet would add.
		return nil, fmt.Errorf("%w: read CSIDriver %s: %w", ErrReplay, pv.Spec.CSI.Driver, err)
	}
	if drv.Spec.PodInfoOnMount != nil && *drv.Spec.PodInfoOnMount {
		out[ctxPodName] = pod.Name
		out[ctxPodNamespace] = pod.Namespace
		out[ctxPodUID] = string(pod.UID)
		out[ctxServiceAccount] = pod.Spec.ServiceAccountName
		out[ctxEphemeral] = "false"
	}
	return out, nil
}

// VolumeCapability is the capability kubelet sends for a filesystem PV: its first access mode
// mapped to the CSI one, its fsType and mount options.
func VolumeCapability(pv *corev1.PersistentVolume) *csi.VolumeCapability {
	mode := csi.VolumeCapability_AccessMode_UNKNOWN
	if len(pv.Spec.AccessModes) > 0 {
		switch pv.Spec.AccessModes[0] {
		case corev1.ReadWriteOnce:
			mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
		case corev1.ReadOnlyMany:
			mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		case corev1.ReadWriteMany:
			mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		case corev1.ReadWriteOncePod:
			mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
	}
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
			FsType: pv.Spec.CSI.FSType, MountFlags: pv.Spec.MountOptions}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

// publishRequest is kubelet's NodePublishVolume request for pv at targetPath.
func publishRequest(pv *corev1.PersistentVolume, capability *csi.VolumeCapability, pubCtx map[string]string, stagingPath, targetPath string, ro bool,
	secrets, volCtx map[string]string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId: pv.Spec.CSI.VolumeHandle, PublishContext: pubCtx, StagingTargetPath: stagingPath, TargetPath: targetPath,
		VolumeCapability: capability, Readonly: ro, Secrets: secrets, VolumeContext: volCtx,
	}
}
