//go:build e2e

package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
)

// TestClusterUp proves the harness: the node registers Ready, a busybox pod from the local
// registry runs on the bridge network, reaches the apiserver through the kubernetes Service's
// ClusterIP, and its log and exec work through the apiserver and kubelet.
func TestClusterUp(t *testing.T) {
	c := framework.Up(t, "cluster")
	ctx := context.Background()
	framework.Namespace(t, c.Client, "e2e-smoke", nil)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "busybox", Namespace: "e2e-smoke"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "bb",
				Image: c.BusyboxImage,
				// Prove the ClusterIP route to the apiserver, then stay up for exec.
				Command: []string{"sh", "-c", "if echo | nc -w 5 10.0.0.1 443; then echo service-ip-ok; else echo service-ip-failed; fi; exec sleep 3600"},
			}},
		},
	}
	start := time.Now()
	if _, err := c.Client.CoreV1().Pods("e2e-smoke").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	p := framework.WaitPod(t, c.Client, "e2e-smoke", "busybox", 2*time.Minute, "Running", framework.Running)
	t.Logf("busybox pod Running in %s with IP %s", time.Since(start).Round(100*time.Millisecond), p.Status.PodIP)
	if !strings.HasPrefix(p.Status.PodIP, "10.244.0.") {
		t.Errorf("pod IP %q is not in the bridge subnet 10.244.0.0/24", p.Status.PodIP)
	}
	var logs string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		logs, err = framework.Logs(ctx, c.Client, "e2e-smoke", "busybox", "bb")
		if err == nil && strings.Contains(logs, "service-ip-") {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !strings.Contains(logs, "service-ip-ok") {
		t.Errorf("pod could not reach the apiserver at the kubernetes Service IP; log: %q", logs)
	}
	out, stderr, err := framework.Exec(ctx, c.Config, c.Client, "e2e-smoke", "busybox", "bb", "cat", "/proc/1/cmdline")
	if err != nil || !strings.Contains(out, "sleep") {
		t.Errorf("exec in pod: out=%q stderr=%q err=%v", out, stderr, err)
	}
}
