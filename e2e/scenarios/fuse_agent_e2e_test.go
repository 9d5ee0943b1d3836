//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
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
		// Observe the new agent's first passes (discovery, health checks, checkInterval 2s as
		// shipped) while the readers go on: a window, not a wait for a condition.
		time.Sleep(agentObserveWindow)
		close(done)
		r := <-res
		if len(r.failures) > 0 {
			t.Errorf("%s: %d failed reads in %d rounds over %d containers while the agent restarted:\n  %s", what, len(r.failures), r.rounds, len(rs), strings.Join(r.failures, "\n  "))
		}
		state := check(t)
		t.Logf("RESULT %s: new agent pod %s ready after %s; %d read rounds over %d containers, %d failed reads; now %v",
			what, next, up, r.rounds, len(rs), len(r.failures), state)
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

// agentObserveWindow is how long reads go on after a new agent is ready (two shipped check intervals).
const agentObserveWindow = 4 * time.Second
