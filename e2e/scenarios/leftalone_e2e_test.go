//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// inlineS3Pod mounts an inline CSI volume of the S3 driver: the webhook classifies it as S3 without
// any PVC, so the same pod can be submitted to any namespace.
func inlineS3Pod(e *env, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false),
			Containers: []corev1.Container{{
				Name: "app", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", "sleep 3600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "bucket", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "bucket", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver: e.csi.Driver, VolumeAttributes: map[string]string{"bucket": s3Bucket},
			}}}},
		},
	}
}

func dryRunCreate(t *testing.T, e *env, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := e.c.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry-run create of pod %s in %s: %v", p.Name, ns, err)
	}
	return got
}

// mutated lists what the webhook visibly added to a stored pod.
func mutated(p *corev1.Pod) []string {
	var out []string
	if v := p.Annotations[contract.AnnotationStatus]; v != "" {
		out = append(out, "status annotation")
	}
	for _, c := range p.Spec.InitContainers {
		out = append(out, "init container "+c.Name)
	}
	for _, v := range p.Spec.Volumes {
		if v.Name == contract.VolumeName {
			out = append(out, "volume "+v.Name)
		}
	}
	for _, c := range p.Spec.Containers {
		if c.LivenessProbe != nil {
			out = append(out, "livenessProbe on "+c.Name)
		}
		for _, m := range c.VolumeMounts {
			if m.MountPropagation != nil {
				out = append(out, fmt.Sprintf("mountPropagation %s on %s", *m.MountPropagation, c.Name))
			}
		}
	}
	return out
}

func leftAlone(t *testing.T, e *env) {
	cs := e.c.Client
	framework.Namespace(t, cs, "e2e-optin", map[string]string{contract.LabelInject: contract.LabelInjectEnabled})
	framework.Namespace(t, cs, "e2e-unlabelled", nil)

	// The control proves the checks below can fail: in an opted-in namespace the same pod changes.
	control := dryRunCreate(t, e, "e2e-optin", inlineS3Pod(e, "control", nil))
	if len(mutated(control)) == 0 {
		t.Fatalf("control pod in an opted-in namespace was not mutated: the left-alone checks would prove nothing")
	}
	t.Logf("control pod (opted-in namespace) was mutated: %s", strings.Join(mutated(control), ", "))

	cases := []struct {
		what string
		ns   string
		pod  *corev1.Pod
	}{
		{"pod with the opt-out label", "e2e-optin", inlineS3Pod(e, "opted-out", map[string]string{contract.LabelInject: contract.LabelInjectOptOutVal})},
		{"pod in an unlabelled namespace", "e2e-unlabelled", inlineS3Pod(e, "unlabelled", nil)},
		{"pod in kube-system", "kube-system", inlineS3Pod(e, "system", nil)},
	}
	var specs []corev1.PodSpec
	for _, c := range cases {
		submitted := c.pod.DeepCopy()
		got := dryRunCreate(t, e, c.ns, c.pod)
		if m := mutated(got); len(m) > 0 {
			t.Errorf("%s was mutated: %s", c.what, strings.Join(m, ", "))
		}
		if diff := cmp.Diff(submitted.Labels, got.Labels); diff != "" {
			t.Errorf("%s: labels changed (-submitted +stored):\n%s", c.what, diff)
		}
		if len(got.Annotations) != 0 {
			t.Errorf("%s: annotations added: %v", c.what, got.Annotations)
		}
		// What the user wrote must be unchanged field by field (server defaults aside).
		for i, sc := range submitted.Spec.Containers {
			gc := got.Spec.Containers[i]
			if diff := cmp.Diff(sc.Command, gc.Command); diff != "" {
				t.Errorf("%s: command changed: %s", c.what, diff)
			}
			if diff := cmp.Diff(sc.VolumeMounts, gc.VolumeMounts); diff != "" {
				t.Errorf("%s: volumeMounts changed: %s", c.what, diff)
			}
		}
		if diff := cmp.Diff(submitted.Spec.Volumes, got.Spec.Volumes); diff != "" {
			t.Errorf("%s: volumes changed: %s", c.what, diff)
		}
		specs = append(specs, got.Spec)
	}
	// All three were stored identically (same defaults, nothing else).
	for i := 1; i < len(specs); i++ {
		if diff := cmp.Diff(specs[0], specs[i]); diff != "" {
			t.Errorf("%s and %s were stored differently:\n%s", cases[0].what, cases[i].what, diff)
		}
	}
}

func webhookDown(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	scale := func(n int) {
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
		if _, err := cs.AppsV1().Deployments(stack.Namespace).Patch(ctx, stack.WebhookDep, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("scale the webhook to %d: %v", n, err)
		}
	}
	scale(0)
	t.Cleanup(func() {
		scale(2)
		if err := stack.WaitWorkloads(ctx, e.c); err != nil {
			t.Errorf("webhook did not come back: %v", err)
		}
	})
	waitFor(t, time.Minute, "the webhook's pods to be gone", func() (bool, string) {
		pods, err := cs.CoreV1().Pods(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + stack.WebhookDep})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items))
	})
	p := s3Pod("while-down", e.c.BusyboxImage)
	p.Spec.Containers = p.Spec.Containers[:1]
	start := time.Now()
	if _, err := cs.CoreV1().Pods(s3NS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod not admitted while the webhook is down: %v", err)
	}
	admitted := time.Since(start)
	got := framework.WaitPod(t, cs, s3NS, "while-down", 2*time.Minute, "Running", framework.Running)
	if m := mutated(got); len(m) > 0 {
		t.Errorf("pod admitted while the webhook is down carries mutations: %v", m)
	}
	t.Logf("RESULT webhook down: pod admitted in %s without injection (failurePolicy Ignore) and Running; it has no probe and no HostToContainer, so if the agent cannot restore a lost FUSE mount in it (it still tries, as for any pod), nothing restarts its containers until it is recreated",
		admitted.Round(time.Millisecond))
}
