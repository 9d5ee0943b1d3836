// Package framework holds what the end-to-end tests share: bringing the cluster up once per test
// binary, bounded waits on pods, logs and exec.
package framework

import (
	"bytes"
	"context"
	"fmt"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// WorkDir is where an e2e run keeps its files: e2e/.work/<name> in the checkout.
func WorkDir(name string) string {
	return filepath.Join(testenv.RepoRoot(), "e2e", ".work", name)
}

// ClusterOptions returns the cluster options for this checkout (binaries from bin/k8s/<version>).
func ClusterOptions(name string) *cluster.Options {
	o := cluster.NewOptions(WorkDir(name))
	o.KubeBinDir = filepath.Join(testenv.RepoRoot(), "bin", "k8s", testenv.KubeVersion)
	if e := filepath.Join(o.KubeBinDir, "etcd"); fileExists(e) {
		o.Etcd = e
	}
	return o
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Up brings a cluster up for the test and tears it down when the test ends, failing or not.
// On failure the components' logs stay in e2e/.work/<name>/logs and their tails are printed.
func Up(t testing.TB, name string) *cluster.Cluster {
	t.Helper()
	return UpWith(t, name, nil)
}

// UpWith is Up with the cluster options changed by configure first (nil: none), e.g. to start
// the pull registry.
func UpWith(t testing.TB, name string, configure func(*cluster.Options)) *cluster.Cluster {
	t.Helper()
	testenv.RequireRoot(t)
	ctrllog.SetLogger(logr.Discard()) // controller-runtime's client is used quietly
	o := ClusterOptions(name)
	if configure != nil {
		configure(o)
	}
	o.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Up(ctx, o)
	if err != nil {
		t.Fatalf("bring the cluster up: %v\n(logs in %s)", err, o.LogDir())
	}
	t.Logf("cluster up in %s: node %s Ready, apiserver %s", time.Since(start).Round(100*time.Millisecond), o.NodeName, c.Server)
	t.Cleanup(func() {
		if Demo() {
			fmt.Printf("\n=== The cluster stays up (make demo). Use it with:\n\n    export KUBECONFIG=%s\n    kubectl get pods -A -o wide\n\nWhere to look:\n    kubectl describe pod -n e2e-local app-0          # the guard init container, the exec wrapper\n    kubectl get events -A --sort-by=.lastTimestamp   # the agent's events (fake created, evicted, restored)\n    kubectl get pv -o custom-columns=NAME:.metadata.name,FAKE:.metadata.annotations.pvrescue\\.io/fake-device\n    kubectl logs -n pvrescue-system ds/pvrescue-agent\n    curl -s http://$(kubectl get pod -n pvrescue-system -l app.kubernetes.io/name=pvrescue-agent -o jsonpath='{.items[0].status.podIP}'):8080/metrics | grep ^pvrescue\n\nLogs of every component: %s\nRemove everything: make demo-down\n", c.Kubeconfig, o.LogDir())
			return
		}
		if t.Failed() {
			o.KeepLogs = true
			for _, n := range []string{"kubelet", "containerd", "kube-controller-manager", "kube-scheduler"} {
				t.Logf("--- last lines of %s.log ---\n%s", n, cluster.Tail(filepath.Join(o.LogDir(), n+".log"), 20))
			}
		}
		start := time.Now()
		if err := c.Down(); err != nil {
			t.Errorf("tear the cluster down: %v", err)
		}
		t.Logf("cluster torn down in %s", time.Since(start).Round(100*time.Millisecond))
	})
	return c
}

// DemoEnv set to 1 makes the suite a demo: narrated, and the cluster is left up (make demo).
const DemoEnv = "PVRESCUE_DEMO"

// Demo reports whether the suite runs as `make demo`.
func Demo() bool { return os.Getenv(DemoEnv) == "1" }

// Namespace creates a namespace with labels and deletes it when the test ends.
func Namespace(t testing.TB, cs kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// WaitPod polls the pod until cond holds, failing the test after timeout with the pod's phase,
// container states and recent events.
func WaitPod(t testing.TB, cs kubernetes.Interface, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last *corev1.Pod
	var lastErr error
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			if cond(p) {
				return p
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for pod %s/%s to be %s (last error: %v)\n%s", timeout, ns, name, what, lastErr, DescribePod(cs, last))
			return nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Running is true when the pod is Running with every container ready.
func Running(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return true
}

// Succeeded is true when the pod has completed successfully.
func Succeeded(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded }

// DescribePod summarizes a pod for failure messages: phase, container states, events.
func DescribePod(cs kubernetes.Interface, p *corev1.Pod) string {
	if p == nil {
		return "(pod never seen)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s phase=%s reason=%s message=%s\n", p.Namespace, p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	all := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, s := range all {
		fmt.Fprintf(&b, "  container %s ready=%v restarts=%d state=%s\n", s.Name, s.Ready, s.RestartCount, stateString(s.State))
	}
	evs, err := cs.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "  event %s %s: %s\n", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

func stateString(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting(" + s.Waiting.Reason + ": " + s.Waiting.Message + ")"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(%s, exit %d: %s)", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "unknown"
}

// Logs returns a container's log.
func Logs(ctx context.Context, cs kubernetes.Interface, ns, pod, container string) (string, error) {
	b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	return string(b), err
}

// Exec runs cmd in a container through the apiserver and kubelet, returning stdout and stderr.
func Exec(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod, container string, cmd ...string) (string, string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	var out, errb bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb})
	return out.String(), errb.String(), err
}

// PodTable renders the pods of a namespace like `kubectl get pods -o wide`, for the narration.
func PodTable(cs kubernetes.Interface, ns string) string {
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %-28s %-10s %-9s %-8s %s\n", "NAME", "PHASE", "READY", "RESTARTS", "IP")
	for _, p := range pods.Items {
		ready, total, restarts := 0, len(p.Status.ContainerStatuses), int32(0)
		for _, s := range p.Status.ContainerStatuses {
			if s.Ready {
				ready++
			}
			restarts += s.RestartCount
		}
		fmt.Fprintf(&b, "  %-28s %-10s %d/%-7d %-8d %s\n", p.Name, p.Status.Phase, ready, total, restarts, p.Status.PodIP)
	}
	return b.String()
}

// MountTable lists the mounts at or below path from /proc/self/mountinfo: mount point, type, source.
func MountTable(path string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err.Error()
	}
	var out strings.Builder
	for _, m := range mountinfo.ParseLenient(string(b)) {
		if strings.HasPrefix(m.MountPoint, path) {
			fmt.Fprintf(&out, "  %q  %s  %q\n", m.MountPoint, m.FSType, m.Source)
		}
	}
	return out.String()
}
