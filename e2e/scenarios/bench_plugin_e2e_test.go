//go:build e2e

package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/stack"
)

// Environment of BenchmarkPluginPodDeleted (set by `make bench`, hack/bench section "e2e").
const (
	// BenchOutEnv names the JSON file the results are written to (PluginBenchResult).
	BenchOutEnv = "PVRESCUE_BENCH_OUT"
	// BenchRepeatsEnv is the number of plugin pod deletions (default 8).
	BenchRepeatsEnv = "PVRESCUE_BENCH_REPEATS"
)

// PluginBenchResult is what BenchmarkPluginPodDeleted writes to $PVRESCUE_BENCH_OUT.
type PluginBenchResult struct {
	Layout string `json:"layout"`
	Driver string `json:"driver"`
	// ReadableMs: plugin pod deletion requested → the node's target reads the file again, one
	// per run; DeadMs: deletion → the target first answered ENOTCONN; RegisteredMs: deletion →
	// the DaemonSet's new plugin pod Running and ready (its registrar has registered the plugin).
	ReadableMs   []float64 `json:"readableMs"`
	DeadMs       []float64 `json:"deadMs"`
	RegisteredMs []float64 `json:"registeredMs"`
	// SetupSeconds is the cluster and install time before the runs.
	SetupSeconds float64 `json:"setupSeconds"`
	// Grace is the plugin pod's termination grace period.
	GraceSeconds int64 `json:"graceSeconds"`
}

// BenchmarkPluginPodDeleted: the test CSI plugin runs as a DaemonSet pod with the upstream
// manifest's mounts (yandex layout: s3fs at kubelet's staging path, a bind per target); its pod
// is deleted, its s3fs die with it, the DaemonSet brings a new pod, and the agent replays through
// it. Each run is timed from the delete request to the app's file reading back at the pod's
// target on the node (polled every 10 ms). A whole cluster per invocation: run it with
// -benchtime 1x; `make bench` does (hack/bench section "e2e").
func BenchmarkPluginPodDeleted(b *testing.B) {
	start := time.Now()
	e := newEnv(b, "bench", false)
	ctx := context.Background()
	l := fieldLayouts()[0]
	pod := fusePodSetup(b, e, l)
	target := filepath.Join(podTarget(e, string(pod.UID), l.pv), "app.txt")
	res := PluginBenchResult{Layout: l.layout, Driver: l.driver, SetupSeconds: time.Since(start).Seconds()}
	repeats := 8
	if v := os.Getenv(BenchRepeatsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a positive number", BenchRepeatsEnv, v)
		}
		repeats = n
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for i := 0; i < repeats; i++ {
		old, err := l.plugin.Pod(ctx)
		if err != nil {
			b.Fatalf("run %d: %v", i, err)
		}
		if old.Spec.TerminationGracePeriodSeconds != nil {
			res.GraceSeconds = *old.Spec.TerminationGracePeriodSeconds
		}
		if !hostReads(target, l.want) {
			b.Fatalf("run %d: %s does not read %q before the deletion", i, target, l.want)
		}
		t0 := time.Now()
		if err := e.c.Client.CoreV1().Pods(stack.CSINamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			b.Fatalf("run %d: delete plugin pod %s: %v", i, old.Name, err)
		}
		var dead time.Duration
		ok := pollEvery(10*time.Millisecond, 3*time.Minute, func() bool {
			if dead == 0 {
				if _, err := os.Stat(target); errors.Is(err, syscall.ENOTCONN) {
					dead = time.Since(t0)
				}
				return false
			}
			return hostReads(target, l.want)
		})
		if !ok {
			checkKubeletMounts(b, e, "the reads fail")
			b.Fatalf("run %d: %s not readable again within 3m of the plugin pod's deletion (dead after %s)", i, target, dead)
		}
		readable := time.Since(t0)
		if _, err := l.plugin.WaitRegistered(ctx, old.UID); err != nil {
			b.Fatalf("run %d: the DaemonSet's new plugin pod: %v", i, err)
		}
		registered := time.Since(t0)
		res.ReadableMs, res.DeadMs, res.RegisteredMs = append(res.ReadableMs, ms(readable)), append(res.DeadMs, ms(dead)), append(res.RegisteredMs, ms(registered))
		b.Logf("run %d: plugin pod %s deleted → target dead %s, readable %s; new plugin pod ready by %s",
			i, old.Name, dead.Round(time.Millisecond), readable.Round(time.Millisecond), registered.Round(time.Millisecond))
		time.Sleep(time.Second)
	}
	checkKubeletMounts(b, e, "after the runs")
	if out := os.Getenv(BenchOutEnv); out != "" {
		j, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(out, j, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// pollEvery calls cond every interval until it holds (true) or timeout has passed (false).
func pollEvery(interval, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(interval)
	}
	return false
}
