package containermount

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

func (r *Remounter) report(pod *corev1.Pod, res RemountResult, fixedLabels []string) {
	if r.rec == nil {
		return
	}
	// Mount points and container names are quoted: a tenant chooses the bytes of a mountPath.
	if len(res.Fixed) > 0 {
		r.rec.Eventf(pod, corev1.EventTypeNormal, ReasonRestored,
			"Volume mount restored without a restart in container(s) %s (%s)",
			strings.Join(fixedLabels, ", "), quoteAll(res.Fixed))
	}
	var failed, skipped, foreign []string
	for _, k := range sortedKeys(res.Failed) {
		if errors.Is(res.Failed[k], ErrNotRuntimeNamespace) {
			foreign = append(foreign, strconv.Quote(k)+": "+res.Failed[k].Error())
		} else if errors.Is(res.Failed[k], ErrUnverified) {
			skipped = append(skipped, strconv.Quote(k)+": "+res.Failed[k].Error())
		} else {
			failed = append(failed, strconv.Quote(k)+": "+res.Failed[k].Error())
		}
	}
	if len(failed) > 0 {
		r.rec.Eventf(pod, corev1.EventTypeWarning, ReasonFailed,
			"Volume mount still dead in container(s); the liveness probe remains the fallback: %s", strings.Join(failed, "; "))
	}
	if len(skipped) > 0 {
		r.rec.Eventf(pod, corev1.EventTypeWarning, ReasonSkipped,
			"Volume mount left dead in container(s) whose pod spec and mount table disagree (nothing was mounted there); "+
				"the liveness probe remains the fallback: %s", strings.Join(skipped, "; "))
	}
	if len(foreign) > 0 {
		r.rec.Eventf(pod, corev1.EventTypeWarning, ReasonSkipped,
			"Volume mount left dead in mount namespace(s) a container's own process made (not the runtime's; a mount put there "+
				"could be remounted writable by its owner), nothing was mounted there; the liveness probe remains the fallback: %s",
			strings.Join(foreign, "; "))
	}
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// Reason maps an error to the metrics label value.
func Reason(err error) string {
	for _, c := range []struct {
		err    error
		reason string
	}{
		{ErrNotRuntimeNamespace, "not_runtime_namespace"},
		{ErrLocked, "userns_locked"},
		{ErrNamespaceGone, "namespace_gone"},
		{ErrSource, "source"},
		{ErrSetns, "setns"},
		{ErrTargetChanged, "target_changed"},
		{ErrAttach, "attach"},
		{ErrVerify, "verify"},
		{ErrOutsideVolume, "outside_volume"},
		{ErrDeletedRoot, "deleted_root"},
		{ErrUnverified, "unverified"},
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

// nsNames returns the names of the containers of ns that the pod's statuses name.
func nsNames(ns Namespace, names map[string]string) []string {
	var got []string
	for _, id := range ns.ContainerIDs {
		if n, ok := names[id]; ok && !contains(got, n) {
			got = append(got, n)
		}
	}
	return got
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
