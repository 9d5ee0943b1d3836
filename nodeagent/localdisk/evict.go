package localdisk

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// evictOnReturn: the pod asked to be evicted when the real disk returns — explicitly (the
// restart annotation), or by its policy: a `require` pod's guard refuses the fake and its init
// container retries forever, so only a new pod reaches the returned disk.
func evictOnReturn(pod *corev1.Pod) bool {
	return pod.Annotations[contract.AnnotationRestartOnDiskReturn] == "true" ||
		pod.Annotations[contract.AnnotationFakeDevicePolicy] == contract.PolicyRequire
}

// startSlack absorbs the skew between kubelet's timestamps and the agent's clock.
const startSlack = time.Second

// startedOnFake: the pod's devices may be the fake made at fakeSince (zero: unknown, so yes).
// Kubelet maps a pod's devices after it first sees the pod (Status.StartTime) and before its
// first container starts, so either one at or after fakeSince says so. The first container start
// matters when kubelet saw the pod before the fake was made and waited for the missing disk.
// A `require` pod whose application never started is held by its guard: it can only be on the
// fake or not yet mapped, and in both cases a new pod is what reaches the returned disk.
func startedOnFake(pod *corev1.Pod, fakeSince time.Time) bool {
	if fakeSince.IsZero() || pod.Status.StartTime == nil {
		return true
	}
	since := fakeSince.Add(-startSlack)
	if !pod.Status.StartTime.Time.Before(since) {
		return true
	}
	if first := firstContainerStart(pod); !first.IsZero() && !first.Before(since) {
		return true
	}
	return pod.Annotations[contract.AnnotationFakeDevicePolicy] == contract.PolicyRequire && !appStarted(pod)
}

// firstContainerStart is the earliest start kubelet reports for any container of the pod.
func firstContainerStart(pod *corev1.Pod) time.Time {
	var first time.Time
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, st := range list {
			for _, t := range []*metav1.Time{startedAt(st.State), startedAt(st.LastTerminationState)} {
				if t != nil && !t.IsZero() && (first.IsZero() || t.Time.Before(first)) {
					first = t.Time
				}
			}
		}
	}
	return first
}

func startedAt(s corev1.ContainerState) *metav1.Time {
	switch {
	case s.Running != nil:
		return &s.Running.StartedAt
	case s.Terminated != nil:
		return &s.Terminated.StartedAt
	}
	return nil
}

// appStarted: an application (non-init) container has run.
func appStarted(pod *corev1.Pod) bool {
	for _, st := range pod.Status.ContainerStatuses {
		if st.State.Running != nil || st.State.Terminated != nil || st.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// notifyPods tells the pods of this node that use pv and started while the fake was in place to
// restart, and evicts (Eviction API: PodDisruptionBudgets apply) those that asked for it. "Started
// after the fake was made" is how a pod is known to run on the fake: a pod started earlier opened
// the real disk.
func (c *Controller) notifyPods(ctx context.Context, pv *corev1.PersistentVolume, pods []*corev1.Pod, fakeSince time.Time) {
	log := logr.FromContextOrDiscard(ctx)
	for _, pod := range pods {
		if c.podsNotified[pod.UID] || pod.DeletionTimestamp != nil || terminal(pod) {
			continue
		}
		if !startedOnFake(pod, fakeSince) {
			continue
		}
		if !evictOnReturn(pod) {
			c.podsNotified[pod.UID] = true
			c.deps.Recorder.Eventf(pod, corev1.EventTypeNormal, contract.ReasonRealDiskReturned,
				"real disk returned for PV %s; restart the pod to use it (annotate %s=\"true\" to let pvrescue evict it)",
				pv.Name, contract.AnnotationRestartOnDiskReturn)
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
		err := c.deps.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, ev)
		switch {
		case err == nil || apierrors.IsNotFound(err):
			c.podsNotified[pod.UID] = true
			log.Info("evicted pod so it restarts on the real disk", "pod", pod.Namespace+"/"+pod.Name)
			c.deps.Recorder.Eventf(pod, corev1.EventTypeNormal, contract.ReasonEvictedForRealDisk,
				"real disk returned for PV %s; evicted so the pod restarts on it", pv.Name)
		case apierrors.IsTooManyRequests(err):
			// A PodDisruptionBudget forbids it now: try again next pass (at the latest the
			// periodic resync), told once per pod.
			log.Info("eviction blocked by a disruption budget; retrying", "pod", pod.Namespace+"/"+pod.Name, "reason", err.Error())
			if !c.podsBlocked[pod.UID] {
				c.podsBlocked[pod.UID] = true
				c.deps.Recorder.Eventf(pod, corev1.EventTypeWarning, contract.ReasonEvictionBlocked,
					"real disk returned for PV %s; eviction refused for now (%v); pvrescue retries on every pass", pv.Name, err)
			}
		default:
			log.Error(err, "evict pod", "pod", pod.Namespace+"/"+pod.Name)
			c.metrics.Errors.WithLabelValues("api").Inc()
		}
	}
}
