package s3mount

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// The hand-off to the container remount (nodeagent.ContainerRemounter, package containermount):
// the dead mounts a restored target's pod may still hold in its running containers.

// deadAt is one restored target and the dead mounts its pod's running containers may still hold.
type deadAt struct {
	t    target
	dead []stack.Mount
}

// remount asks the container remounter (when configured) to move the pod's running containers
// from each dead mount onto the live one at the target, and reports the result.
func (r *Restorer) remount(ctx context.Context, t target, dead []stack.Mount) {
	r.remountAll(ctx, []deadAt{{t, dead}})
}

// remountAll is remount for several restored targets in one remounter pass (RemountPods): what
// does not depend on the pod (the node's processes, the agent's mount table) is read once.
func (r *Restorer) remountAll(ctx context.Context, ds []deadAt) {
	if r.d.Remounter == nil {
		return
	}
	var reqs []nodeagent.RemountRequest
	var of []target
	for _, d := range ds {
		for _, m := range d.dead {
			reqs = append(reqs, nodeagent.RemountRequest{Pod: d.t.pod, DeadDevice: m.Dev, DeadRoot: m.Root, LivePath: d.t.path})
			of = append(of, d.t)
		}
	}
	if len(reqs) == 0 {
		return
	}
	log := logr.FromContextOrDiscard(ctx)
	for i, o := range r.d.Remounter.RemountPods(ctx, reqs) {
		t, res, dev := of[i], o.Result, reqs[i].DeadDevice
		if o.Err != nil {
			log.Error(o.Err, "remounting in containers", "pod", klogRef(t.pod), "pv", t.pv, "deadDevice", dev)
			r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, contract.ReasonContainersRemounted,
				"S3 volume %s: could not put the restored mount into running containers: %v", t.pv, o.Err)
			continue
		}
		log.Info("remounted in containers", "pod", klogRef(t.pod), "pv", t.pv, "deadDevice", dev,
			"fixed", res.Fixed, "failed", len(res.Failed), "untouched", res.Untouched)
		if len(res.Fixed) > 0 || len(res.Failed) > 0 {
			typ := corev1.EventTypeNormal
			if len(res.Failed) > 0 {
				typ = corev1.EventTypeWarning
			}
			r.d.Recorder.Eventf(t.pod, typ, contract.ReasonContainersRemounted,
				"S3 volume %s: restored mount put into %d container(s), %d failed", t.pv, len(res.Fixed), len(res.Failed))
		}
	}
}
