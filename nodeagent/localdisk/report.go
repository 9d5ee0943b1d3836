package localdisk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// report turns one pass's result into Events, PV annotations and metrics; it returns the PVs
// whose disk is missing (for the Node condition).
func (c *Controller) report(ctx context.Context, w wanted, res Result, detected time.Time) []string {
	log := logr.FromContextOrDiscard(ctx)
	cfg := c.deps.Config.LocalBlock
	now := c.deps.Clock.Now()
	var missing []string
	active := 0
	for _, st := range res.Volumes {
		pv := w.pvs[st.PV]
		log := log.WithValues("pv", st.PV, "path", st.Path)
		switch st.State {
		case StateFaked, StateMissing:
			missing = append(missing, st.PV)
			if _, ok := c.missingSince[st.PV]; !ok {
				c.missingSince[st.PV] = detected
			}
			c.metrics.DiskMissing.WithLabelValues(st.PV).Set(1)
			c.metrics.DiskMissingSince.WithLabelValues(st.PV).Set(float64(c.missingSince[st.PV].Unix()))
		default:
			delete(c.missingSince, st.PV)
			delete(c.warnedLong, st.PV)
			c.metrics.DiskMissing.DeleteLabelValues(st.PV)
			c.metrics.DiskMissingSince.DeleteLabelValues(st.PV)
		}
		if st.State != StateFaked {
			c.metrics.FakeActive.DeleteLabelValues(st.PV)
			c.metrics.FakeCreated.DeleteLabelValues(st.PV)
		}
		if pv == nil {
			continue // a recorded PV that could not be read: kept, not reported
		}
		switch st.State {
		case StateFaked:
			active++
			delete(c.lastProblem, st.PV)
			dev := LoopDevPath(c.opts.DevDir, st.Loop)
			c.metrics.FakeActive.WithLabelValues(st.PV).Set(1)
			if st.Created {
				c.metrics.FakeCreated.WithLabelValues(st.PV).Set(float64(now.Unix()))
				lat := now.Sub(c.missingSince[st.PV])
				c.metrics.FakeLatency.Observe(lat.Seconds())
				log.Info("fake device created", "device", dev, "link", st.Link, "latency", lat)
				c.deps.Recorder.Eventf(pv, corev1.EventTypeNormal, contract.ReasonFakeDeviceCreated,
					"local disk %s is missing on node %s; a %d-byte read-only fake device %s stands in at %s so pods can start",
					st.Path, c.deps.NodeName, cfg.FakeDeviceSizeBytes, dev, st.Link)
			}
			c.annotate(ctx, pv, dev)
		case StateMissing:
			c.reportMissing(ctx, w, pv, st)
		case StateInvalid:
			c.problem(ctx, pv, contract.ReasonInvalidLocalPath, fmt.Sprintf("local path not handled, nothing touched: %v", st.Err), "invalid")
		case StatePresent:
			delete(c.lastProblem, st.PV)
		}
		if since, ok := c.missingSince[st.PV]; ok && !c.warnedLong[st.PV] && now.Sub(since) >= cfg.MissingWarningAfter.Duration {
			c.warnedLong[st.PV] = true
			c.deps.Recorder.Eventf(pv, corev1.EventTypeWarning, contract.ReasonLocalDiskMissingTooLong,
				"local disk %s has been missing for %s; if it was replaced it will not come back: recreate the PV and the pods' claims",
				st.Path, now.Sub(since).Round(time.Second))
		}
	}
	for _, rt := range res.Retired {
		c.reportRetire(ctx, rt, w)
	}
	c.metrics.ActiveFakes.Set(float64(active))
	return missing
}

func (c *Controller) reportMissing(ctx context.Context, w wanted, pv *corev1.PersistentVolume, st VolumeStatus) {
	cfg := c.deps.Config.LocalBlock
	switch {
	case errors.Is(st.Err, ErrKernelName) || errors.Is(st.Err, ErrNotUnderLinkRoot):
		c.problem(ctx, pv, contract.ReasonLocalDiskNotFakeable, fmt.Sprintf("local disk %s is missing and is not faked: %v", st.Path, st.Err), "")
	case st.Err != nil:
		c.problem(ctx, pv, contract.ReasonFakeDeviceFailed, fmt.Sprintf("local disk %s is missing and no fake device could be made: %v", st.Path, st.Err), "create")
	case len(w.unguarded[pv.Name]) > 0:
		c.problem(ctx, pv, contract.ReasonLocalDiskMissing, fmt.Sprintf("local disk %s is missing; no fake device is made because pods on node %s use it without the pvrescue guard",
			st.Path, c.deps.NodeName), "")
		for _, pod := range w.unguarded[pv.Name] {
			if c.podsWarned[pod.UID] {
				continue
			}
			c.podsWarned[pod.UID] = true
			c.deps.Recorder.Eventf(pod, corev1.EventTypeWarning, contract.ReasonUnguardedPodOnMissingDisk,
				"pod %s/%s uses PV %s whose local disk %s is missing, but it has no pvrescue guard (%s; admitted while the webhook was down?): no fake device is made; recreate the pod so the webhook guards it",
				pod.Namespace, pod.Name, pv.Name, st.Path, contract.AnnotationStatus)
		}
	default:
		c.problem(ctx, pv, contract.ReasonLocalDiskMissing, fmt.Sprintf("local disk %s is missing; fake devices are disabled on node %s (label %s=%s enables them)",
			st.Path, c.deps.NodeName, cfg.NodeLabel, contract.LabelFakeDevicesEnabled), "")
	}
}

// problem reports a Warning once per distinct message.
func (c *Controller) problem(ctx context.Context, pv *corev1.PersistentVolume, reason, msg, errReason string) {
	if errReason != "" {
		c.metrics.Errors.WithLabelValues(errReason).Inc()
	}
	if c.lastProblem[pv.Name] == msg {
		return
	}
	c.lastProblem[pv.Name] = msg
	logr.FromContextOrDiscard(ctx).Info(msg, "pv", pv.Name, "reason", reason)
	c.deps.Recorder.Event(pv, corev1.EventTypeWarning, reason, msg)
}

func (c *Controller) reportRetire(ctx context.Context, rt RetireStatus, w wanted) {
	pv := w.pvs[rt.PV]
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", rt.PV, "path", rt.Path, "loop", rt.Loop)
	if rt.Err != nil {
		log.Error(rt.Err, "retiring fake device; will retry")
		c.metrics.Errors.WithLabelValues("retire").Inc()
	}
	if rt.DiskReturned && pv != nil {
		if !c.returned[rt.PV] {
			c.returned[rt.PV] = true
			log.Info("real disk returned")
			c.deps.Recorder.Eventf(pv, corev1.EventTypeNormal, contract.ReasonDiskReturned,
				"local disk %s is back on node %s; the fake device is retired once no pod uses it", rt.Path, c.deps.NodeName)
		}
		c.notifyPods(ctx, pv, w.pods[rt.PV], rt.Created)
	}
	if rt.Done {
		c.metrics.Retired.Inc()
		c.metrics.FakeActive.DeleteLabelValues(rt.PV)
		c.metrics.FakeCreated.DeleteLabelValues(rt.PV)
		delete(c.returned, rt.PV)
		log.Info("fake device retired")
		if pv != nil {
			c.deps.Recorder.Eventf(pv, corev1.EventTypeNormal, contract.ReasonFakeDeviceRetired,
				"fake device for %s detached and removed on node %s", rt.Path, c.deps.NodeName)
			c.annotate(ctx, pv, "")
		}
	}
}

// annotate sets (dev != "") or removes the fake-device annotation on the PV when it differs.
func (c *Controller) annotate(ctx context.Context, pv *corev1.PersistentVolume, dev string) {
	if pv == nil || pv.Annotations[contract.AnnotationFakeDevice] == dev {
		return
	}
	var val any
	if dev != "" {
		val = dev
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{contract.AnnotationFakeDevice: val}}})
	_, err := c.deps.Client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	// The view serves PVs from a short cache: drop ours so the next pass sees the annotation.
	c.deps.View.Forget("PersistentVolume", "", pv.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		logr.FromContextOrDiscard(ctx).Error(err, "annotate PV", "pv", pv.Name)
		c.metrics.Errors.WithLabelValues("api").Inc()
	}
}
