package s3mount

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// What every way of restoring a target ends with: our mount goes over the dead one (stack), then
// the record of the restore (timers, metrics, log, Event) and the container remount
// (remount.go).

// cover puts the live mount at source (the driver's at a fresh path, or our bridge) on top of
// the dead target t (stack.Rules.Cover), checked against the driver's dead mount there and its
// profile's FUSE type (and our own bridge's types when source is the bridge). pass is what a
// bridge pass shares between its targets (nil: each target is covered on its own).
func (r *Restorer) cover(ctx context.Context, source string, t target, pass *bindPass) (dead []stack.Mount, ro, ok bool, err error) {
	bridge := source == r.layout.MountPoint(t.pv)
	return r.rules.Cover(ctx, source, t.path, t.readOnly, func(table stack.Table) stack.Check {
		c := stack.CheckFor(table, t.path, r.cfg.S3.Profile(t.driver).FUSEType)
		if pass != nil {
			c.Answered = pass.answered
		}
		if bridge {
			c.FUSETypes = append(c.FUSETypes, stack.OurFUSETypes...)
		}
		return c
	})
}

// bindPass is what one bridge pass shares between the targets it binds its one bridge mount
// over: the sources that answered (the bridge's daemon is asked once).
type bindPass struct {
	answered *stack.Answers
}

// restored records a restored target: timers, metrics, log, Event, and the container remount.
func (r *Restorer) restored(ctx context.Context, t target, method, reason string, ro bool, dead []stack.Mount, how string) {
	r.record(ctx, t, method, reason, ro, how)
	r.remount(ctx, t, dead)
}

// record is restored without the container remount: timers, metrics, log, Event.
func (r *Restorer) record(ctx context.Context, t target, method, reason string, ro bool, how string) {
	r.mu.Lock()
	since, ok := r.deadSince[t.path]
	delete(r.deadSince, t.path)
	delete(r.hungSince, t.path)
	r.mu.Unlock()
	// A target restored without having been seen dead by this agent (a retire, a pod that got a
	// bind of our bridge from kubelet's staging path) has no detection time.
	var elapsed time.Duration
	if ok {
		elapsed = r.clk.Since(since)
		r.metrics.TimeToRestore.Observe(elapsed.Seconds())
	}
	r.metrics.Restores.WithLabelValues(method, "success").Inc()
	r.metrics.MountHealthy.WithLabelValues(t.pv, t.pod.Namespace, t.pod.Name).Set(1)
	logr.FromContextOrDiscard(ctx).Info("restored S3 mount", "method", method, "reason", reason, "pod", klogRef(t.pod), "pv", t.pv, "path", t.path,
		"readOnly", ro, "afterDetection", map[bool]any{true: elapsed, false: "unknown"}[ok])
	r.d.Recorder.Eventf(t.pod, corev1.EventTypeNormal, reason,
		"S3 volume %s mounted again (%s%s)", t.pv, how, map[bool]string{true: ", read-only", false: ""}[ro])
}
