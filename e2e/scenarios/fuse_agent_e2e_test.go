//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent"
)

// agentRestarts deletes the agent's pod, then rolls the DaemonSet (what `kubectl rollout restart`
// does: a new template annotation), while the readers' restored mounts are in use: every read
// must keep working throughout; after each, check (no container restarted, …) runs and its
// returned state is logged.
func agentRestarts(t *testing.T, e *env, check func(*testing.T) any, rs ...reader) {
	ctx := context.Background()
	cs := e.c.Client
	seen := map[types.UID]bool{}
	old, why := runningAgent(e)
	if old == nil {
		t.Fatal(why)
	}
	seen[old.UID] = true

	during := func(what string, act func()) {
		t.Helper()
		// Every CSI target of the readers' pods, by unique mount IDs: the new agent must find
		// them healthy and leave them as they are (no replay, bridge, bind or remount).
		before := readerTargets(t, e, rs)
		done := make(chan struct{})
		type result struct {
			rounds   int
			failures []string
		}
		res := make(chan result, 1)
		go func() {
			n, f := keepReading(e, done, rs...)
			res <- result{n, f}
		}()
		t0 := time.Now()
		act()
		var next string
		waitFor(t, 3*time.Minute, "a new agent pod to run after "+what, func() (bool, string) {
			d, err := cs.AppsV1().DaemonSets(stack.Namespace).Get(ctx, stack.AgentDS, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedNumberScheduled != d.Status.DesiredNumberScheduled ||
				d.Status.NumberReady != d.Status.DesiredNumberScheduled {
				return false, "DaemonSet not rolled out: " + framework.PodTable(cs, stack.Namespace)
			}
			p, why := runningAgent(e)
			if p == nil {
				return false, why
			}
			if seen[p.UID] {
				return false, "still the old agent pod " + p.Name
			}
			seen[p.UID] = true
			next = p.Name
			return true, ""
		})
		up := time.Since(t0).Round(100 * time.Millisecond)
		// The new agent's first pass over the readers' pods: it exports their targets' health
		// once it checked them. Then the readers go on over two more of its S3 passes (one
		// began after that check) and whatever a pass may have started.
		checked := waitAgentChecked(t, e, rs)
		looked := waitS3Passes(t, e, 2, 3*time.Minute)
		close(done)
		r := <-res
		if len(r.failures) > 0 {
			t.Errorf("%s: %d failed reads in %d rounds over %d containers while the agent restarted:\n  %s", what, len(r.failures), r.rounds, len(rs), strings.Join(r.failures, "\n  "))
		}
		alone := checkLeftAlone(t, e, before)
		state := check(t)
		t.Logf("RESULT %s: new agent pod %s ready after %s, checked the readers' targets %s after the restart, two more S3 passes in %s; %d read rounds over %d containers, %d failed reads; left alone: %s; now %v",
			what, next, up, checked, looked.Round(100*time.Millisecond), r.rounds, len(rs), len(r.failures), alone, state)
	}

	during("agent pod deleted", func() {
		if err := cs.CoreV1().Pods(stack.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete the agent pod %s: %v", old.Name, err)
		}
	})
	during("agent DaemonSet rolled (rollout restart)", func() {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().UTC().Format(time.RFC3339))
		if _, err := cs.AppsV1().DaemonSets(stack.Namespace).Patch(ctx, stack.AgentDS, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch the agent DaemonSet's template: %v", err)
		}
	})
}

// readerTargets maps every S3 CSI target of the readers' pods on the node to its stack's identity
// (stackIdentity: unique mount IDs).
func readerTargets(t *testing.T, e *env, rs []reader) map[string]string {
	t.Helper()
	out := map[string]string{}
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.ns+"/"+r.pod] {
			continue
		}
		seen[r.ns+"/"+r.pod] = true
		p, err := e.c.Client.CoreV1().Pods(r.ns).Get(context.Background(), r.pod, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s/%s: %v", r.ns, r.pod, err)
		}
		dirs, _ := filepath.Glob(podTarget(e, string(p.UID), "*"))
		for _, d := range dirs {
			out[d] = mustStackIdentity(t, d)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no CSI target of the readers' pods on the node (%v): nothing to check", rs)
	}
	return out
}

// waitAgentChecked waits until the running agent exports pvrescue_s3_mount_healthy for every
// reader's pod it serves (nodeagent.Consents: those of opted-in namespaces, as shipped): it sets
// the series when its pass checks the pod's target, so a new agent shows it after its first pass
// over them. It returns how long that took.
func waitAgentChecked(t *testing.T, e *env, rs []reader) time.Duration {
	t.Helper()
	t0 := time.Now()
	var served []reader
	for _, r := range rs {
		p, err := e.c.Client.CoreV1().Pods(r.ns).Get(context.Background(), r.pod, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s/%s: %v", r.ns, r.pod, err)
		}
		ns, err := e.c.Client.CoreV1().Namespaces().Get(context.Background(), r.ns, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get namespace %s: %v", r.ns, err)
		}
		if config.Default().RescueAllNamespaces || nodeagent.Consents(p, ns) {
			served = append(served, r)
		}
	}
	if len(served) == 0 {
		t.Fatalf("the agent serves none of the readers' pods (%v): no pass of it can be seen", rs)
	}
	rs = served
	waitFor(t, time.Minute, "the new agent's pass over the readers' pods (pvrescue_s3_mount_healthy of each)", func() (bool, string) {
		agent, why := runningAgent(e)
		if agent == nil {
			return false, why
		}
		ok, body := httpGet("http://" + net.JoinHostPort(agent.Status.PodIP, "8080") + "/metrics")
		if !ok {
			return false, body
		}
		series := metricSeries(body, "pvrescue_s3_mount_healthy")
		for _, r := range rs {
			found := false
			for labels := range series {
				found = found || (strings.Contains(labels, `namespace="`+r.ns+`"`) && strings.Contains(labels, `pod="`+r.pod+`"`))
			}
			if !found {
				return false, fmt.Sprintf("no series for %s/%s yet: %v", r.ns, r.pod, series)
			}
		}
		return true, ""
	})
	return time.Since(t0).Round(100 * time.Millisecond)
}

// checkLeftAlone checks that the running agent (new since before was taken) left the healthy
// targets as they were: the same mounts at each (unique mount IDs), and its counters of dead
// mounts found, restores, mount replacements and container remounts all at 0. It returns what
// it read, for the log.
func checkLeftAlone(t *testing.T, e *env, before map[string]string) string {
	t.Helper()
	for path, was := range before {
		if now, err := stackIdentity(path); now != was {
			t.Errorf("the new agent changed the mounts at the healthy target %s: %s → %s (%v; now %s)", path, was, now, err, describeStack(mountsAt(path)))
		}
	}
	body := agentMetricsBody(t, e)
	var counts []string
	for _, name := range []string{"pvrescue_s3_dead_mounts_found_total", "pvrescue_s3_restores_total", "pvrescue_mount_replace_total", "pvrescue_container_remounts_total"} {
		var sum float64
		for _, v := range metricSeries(body, name) {
			sum += v
		}
		if sum != 0 {
			t.Errorf("the new agent acted on healthy mounts: %s = %v", name, metricSeries(body, name))
		}
		counts = append(counts, fmt.Sprintf("%s %.0f", name, sum))
	}
	return fmt.Sprintf("%d targets' mounts unchanged, %s", len(before), strings.Join(counts, ", "))
}

// metricSeries lists the samples of metric name in a /metrics body: labels ("{…}", "" for none)
// to value.
func metricSeries(body, name string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil {
			out[rest[:i]] = v
		}
	}
	return out
}
