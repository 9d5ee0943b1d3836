package localdisk

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
)

func TestStartedOnFake(t *testing.T) {
	fake := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: fake.Add(d)} }
	running := func(d time.Duration) corev1.ContainerState {
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *at(d)}}
	}
	failed := func(d time.Duration) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, StartedAt: *at(d)}}
	}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	pod := func(policy string, start *metav1.Time, inits, apps []corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{StartTime: start, InitContainerStatuses: inits, ContainerStatuses: apps}}
		if policy != "" {
			p.Annotations = map[string]string{contract.AnnotationFakeDevicePolicy: policy}
		}
		return p
	}
	guardSt := func(s, last corev1.ContainerState) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: "guard", State: s, LastTerminationState: last}}
	}
	app := func(s corev1.ContainerState) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: "app", State: s}}
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no start time yet", pod("", nil, nil, nil), true},
		{"started after the fake", pod("", at(time.Minute), nil, nil), true},
		{"started within the slack", pod("", at(-startSlack/2), nil, nil), true},
		{"running since before the loss", pod("", at(-time.Hour), guardSt(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: *at(-time.Hour)}}, corev1.ContainerState{}), app(running(-time.Hour))), false},
		{"seen before the fake, waited for the disk, guard ran on the fake", pod("", at(-5*time.Second), guardSt(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: *at(2 * time.Second)}}, corev1.ContainerState{}), app(running(3*time.Second))), true},
		{"app restarted after the loss, first start before: not on the fake", pod("", at(-time.Hour), nil, []corev1.ContainerStatus{{Name: "app", State: running(time.Minute), LastTerminationState: failed(-time.Hour)}}), false},
		{"require held by its guard, seen before the fake", pod(contract.PolicyRequire, at(-time.Hour), guardSt(failed(-time.Hour), corev1.ContainerState{}), app(waiting)), true},
		{"require running since before the loss", pod(contract.PolicyRequire, at(-time.Hour), nil, app(running(-time.Hour))), false},
		{"filter pod seen before the fake, never started", pod(contract.PolicyFilter, at(-time.Hour), nil, app(waiting)), false},
		{"unknown fake time", pod("", at(-time.Hour), nil, nil), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			since := fake
			if c.name == "unknown fake time" {
				since = time.Time{}
			}
			if got := startedOnFake(c.pod, since); got != c.want {
				t.Fatalf("startedOnFake = %v, want %v", got, c.want)
			}
		})
	}
}
