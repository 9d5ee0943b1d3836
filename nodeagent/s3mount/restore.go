package s3mount

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/nodeagent"
)

// restore brings back one PV: a healthy bridge (staging) mount, then a bind onto each dead target.
func (r *Restorer) restore(ctx context.Context, pv string, ts []target) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pv)
	defer func() {
		r.mu.Lock()
		delete(r.inflight, pv)
		r.mu.Unlock()
	}()
	stagingPath := r.layout.Staging(pv)
	err := r.ensureStaging(ctx, pv)
	if err != nil {
		log.Error(err, "restore failed", "reason", Reason(err))
		r.metrics.Restores.WithLabelValues(MethodBridge, "failure").Inc()
		r.failed(ts, err)
		r.backoff(pv)
		return
	}
	for _, t := range ts {
		if berr := r.bindTarget(ctx, stagingPath, t); berr != nil {
			err = errors.Join(err, berr)
			r.metrics.Restores.WithLabelValues(MethodBridge, "failure").Inc()
			r.failed([]target{t}, berr)
		}
	}
	if err != nil {
		r.backoff(pv)
		return
	}
	r.mu.Lock()
	delete(r.retry, pv)
	r.mu.Unlock()
}

func (r *Restorer) failed(ts []target, err error) {
	reason := Reason(err)
	r.metrics.Failures.WithLabelValues(reason).Inc()
	for _, t := range ts {
		r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, EventMountRestoreFailed,
			"%s: restoring S3 volume %s: %v", reason, t.pv, err)
	}
}

func (r *Restorer) backoff(pv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.retry[pv]
	if rs == nil {
		rs = &retryState{}
		r.retry[pv] = rs
	}
	rs.failures++
	wait := r.opts.BackoffInitial
	for i := 1; i < rs.failures && wait < r.opts.BackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, r.opts.BackoffMax)
	rs.next = r.clk.Now().Add(wait)
}

// remount asks the container remounter (when configured) to move the pod's running containers
// from each dead mount onto the live one at the target, and reports the result.
func (r *Restorer) remount(ctx context.Context, t target, dead []MountInfo) {
	if r.d.Remounter == nil {
		return
	}
	log := logr.FromContextOrDiscard(ctx)
	for _, m := range dead {
		res, err := r.d.Remounter.RemountInContainers(ctx, nodeagent.RemountRequest{
			Pod: t.pod, DeadDevice: m.Dev, DeadRoot: m.Root, LivePath: t.path,
		})
		if err != nil {
			log.Error(err, "remounting in containers", "pod", klogRef(t.pod), "pv", t.pv, "deadDevice", m.Dev)
			r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, EventContainersRemount,
				"S3 volume %s: could not put the restored mount into running containers: %v", t.pv, err)
			continue
		}
		log.Info("remounted in containers", "pod", klogRef(t.pod), "pv", t.pv, "deadDevice", m.Dev,
			"fixed", res.Fixed, "failed", len(res.Failed), "untouched", res.Untouched)
		if len(res.Fixed) > 0 || len(res.Failed) > 0 {
			typ := corev1.EventTypeNormal
			if len(res.Failed) > 0 {
				typ = corev1.EventTypeWarning
			}
			r.d.Recorder.Eventf(t.pod, typ, EventContainersRemount,
				"S3 volume %s: restored mount put into %d container(s), %d failed", t.pv, len(res.Fixed), len(res.Failed))
		}
	}
}
