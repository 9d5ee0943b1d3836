package containermount

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func (r *Remounter) report(pod *corev1.Pod, res RemountResult, fixedLabels []string, start time.Time) {
	if len(res.Fixed) > 0 {
		r.metrics.Duration.Observe(r.clock.Since(start).Seconds())
	}
	if r.rec == nil {
		return
	}
	if len(res.Fixed) > 0 {
		r.rec.Eventf(pod, corev1.EventTypeNormal, ReasonRestored,
			"Volume mount restored without a restart in container(s) %s (%s)",
			strings.Join(fixedLabels, ", "), strings.Join(res.Fixed, ", "))
	}
	if len(res.Failed) > 0 {
		var parts []string
		for _, k := range sortedKeys(res.Failed) {
			parts = append(parts, k+": "+res.Failed[k].Error())
		}
		r.rec.Eventf(pod, corev1.EventTypeWarning, ReasonFailed,
			"Volume mount still dead in container(s); the liveness probe remains the fallback: %s", strings.Join(parts, "; "))
	}
}

// Reason maps an error to the metrics label value.
func Reason(err error) string {
	for _, c := range []struct {
		err    error
		reason string
	}{
		{ErrLocked, "userns_locked"},
		{ErrNamespaceGone, "namespace_gone"},
		{ErrSource, "source"},
		{ErrSetns, "setns"},
		{ErrTargetChanged, "target_changed"},
		{ErrAttach, "attach"},
		{ErrVerify, "verify"},
		{ErrOutsideVolume, "outside_volume"},
		{ErrDeletedRoot, "deleted_root"},
		{context.DeadlineExceeded, "timeout"},
		{context.Canceled, "canceled"},
		{ErrUnsupported, "unsupported"},
		{ErrMountInfo, "mountinfo"},
	} {
		if errors.Is(err, c.err) {
			return c.reason
		}
	}
	return "other"
}

// containerNames maps container IDs (without the runtime scheme) to names.
func containerNames(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses,
		pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			if s.ContainerID != "" {
				out[TrimContainerID(s.ContainerID)] = s.Name
			}
		}
	}
	return out
}

// nsLabel names a namespace by its containers' names, or by its lowest pid when no container
// status matches (the sandbox, or a status not yet reported).
func nsLabel(ns Namespace, names map[string]string) string {
	var got []string
	for _, id := range ns.ContainerIDs {
		if n, ok := names[id]; ok && !contains(got, n) {
			got = append(got, n)
		}
	}
	if len(got) == 0 {
		return "pid " + strconv.Itoa(ns.Pids[0])
	}
	sort.Strings(got)
	return strings.Join(got, "+")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
