package s3mount

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// bindTarget binds the bridge's staging mount onto one dead target.
func (r *Restorer) bindTarget(ctx context.Context, stagingPath string, t target) error {
	dead, ro, ok, err := r.cover(ctx, stagingPath, t)
	if err != nil || !ok {
		return err
	}
	// Recorded like a replayed mount: when it vanishes from a gone pod's target without us
	// removing it, kubelet's teardown (the driver's NodeUnpublish) took it (cleanup.go).
	r.rules.RecordTop(ctx, t.path, "the bridge bind")
	r.restored(ctx, t, MethodBridge, contract.ReasonMountBridged, ro, dead, "fresh s3fs bound over the dead mount")
	return nil
}

// cover puts the live mount at source (the driver's at a fresh path, or our bridge) on top of
// the dead target t (stack.Rules.Cover), checked against the driver's dead mount there and its
// profile's FUSE type (and our own bridge's types when source is the bridge).
func (r *Restorer) cover(ctx context.Context, source string, t target) (dead []stack.Mount, ro, ok bool, err error) {
	bridge := source == r.layout.MountPoint(t.pv)
	return r.rules.Cover(ctx, source, t.path, t.readOnly, func(table stack.Table) stack.Check {
		c := stack.CheckFor(table, t.path, r.cfg.S3.Profile(t.driver).FUSEType)
		if bridge {
			c.FUSETypes = append(c.FUSETypes, stack.OurFUSETypes...)
		}
		return c
	})
}

// restored records a restored target: timers, metrics, log, Event, and the container remount.
func (r *Restorer) restored(ctx context.Context, t target, method, reason string, ro bool, dead []stack.Mount, how string) {
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
	r.remount(ctx, t, dead)
}

// resolve reads the PV and its credentials secret (the PV's own references only) into what s3fs
// needs.
func (r *Restorer) resolve(ctx context.Context, pvName string) (s3fs.Volume, s3fs.Credentials, error) {
	pv, err := r.d.View.PersistentVolume(ctx, pvName)
	if err != nil {
		return s3fs.Volume{}, s3fs.Credentials{}, fmt.Errorf("get PV %s: %w", pvName, err)
	}
	vol, err := s3fs.ResolveVolume(pv, r.cfg.S3.Parameters, r.cfg.S3.Profile(pv.Spec.CSI.Driver))
	if err != nil {
		return s3fs.Volume{}, s3fs.Credentials{}, err
	}
	ref := vol.SecretRef
	secret, err := r.d.View.Secret(ctx, ref.Namespace, ref.Name)
	if apierrors.IsNotFound(err) {
		return s3fs.Volume{}, s3fs.Credentials{}, fmt.Errorf("%w: %s/%s", s3fs.ErrSecretNotFound, ref.Namespace, ref.Name)
	}
	if err != nil {
		return s3fs.Volume{}, s3fs.Credentials{}, fmt.Errorf("get secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	creds, err := s3fs.ParseCredentials(secret, r.cfg.S3.SecretKeys)
	if err != nil {
		return s3fs.Volume{}, s3fs.Credentials{}, err
	}
	return vol, creds, nil
}
