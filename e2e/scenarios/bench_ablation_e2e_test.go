//go:build e2e

package scenarios

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/stack"
)

// BenchAblationEnv, when set, replaces BenchmarkPluginPodDeleted's window matrix with the
// ablation steps it holds (JSON, []AblationStep; `make bench-ablation`, issue 52): each step
// runs the agent with its arguments added to the installed ones and measures its incidents on
// its number of pods, in order. Each incident is a WindowCase whose Behaviour is the step's
// variant.
const BenchAblationEnv = "PVRESCUE_BENCH_ABLATION"

// AblationStep is one variant's turn: the agent's extra arguments (none: the shipped agent).
type AblationStep struct {
	Pods    int      `json:"pods"`
	Variant string   `json:"variant"`
	Args    []string `json:"args"`
	Cases   []string `json:"cases"`
}

// ablationSteps runs the steps of BenchAblationEnv; false when it is unset.
func ablationSteps(t *failRecorder, e *env, l *fieldLayout, res *PluginBenchResult, save func()) bool {
	v := os.Getenv(BenchAblationEnv)
	if v == "" {
		return false
	}
	var steps []AblationStep
	if err := json.Unmarshal([]byte(v), &steps); err != nil {
		t.Fatalf("%s: %v", BenchAblationEnv, err)
	}
	var pods []string
	installed := agentArgs(t, e)
	for i, s := range steps {
		if len(pods) > s.Pods {
			deleteLoadPods(t, e, l, pods[s.Pods:])
			pods = pods[:s.Pods]
		}
		pods = ensureLoadPods(t, e, l, pods, s.Pods)
		setAgentArgs(t, e, append(slices.Clone(installed), s.Args...))
		for _, kind := range s.Cases {
			c := windowIncident(t, e, l, kind, pods, 30*time.Second)
			c.Behaviour, c.Config = s.Variant, strings.Join(s.Args, " ")
			res.Window = append(res.Window, c)
			save()
			t.Logf("ablation step %d/%d, %s, %s, %d pods: container window p50 %.0f ms, max %.0f ms", i+1, len(steps), s.Variant, kind, s.Pods,
				percentileMs(c.ContainerWindowMs, 50), percentileMs(c.ContainerWindowMs, 100))
		}
	}
	setAgentArgs(t, e, installed)
	return true
}

// agentArgs returns the agent container's arguments in its DaemonSet.
func agentArgs(t *failRecorder, e *env) []string {
	ds, err := e.c.Client.AppsV1().DaemonSets(stack.Namespace).Get(context.Background(), stack.AgentDS, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the agent DaemonSet: %v", err)
	}
	return slices.Clone(ds.Spec.Template.Spec.Containers[0].Args)
}

// setAgentArgs sets the agent container's arguments and waits for the DaemonSet's ready pod
// that runs with them, then for its first passes over the node's mounts.
func setAgentArgs(t *failRecorder, e *env, args []string) {
	ctx := context.Background()
	ds, err := e.c.Client.AppsV1().DaemonSets(stack.Namespace).Get(ctx, stack.AgentDS, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the agent DaemonSet: %v", err)
	}
	if slices.Equal(ds.Spec.Template.Spec.Containers[0].Args, args) {
		return
	}
	ds.Spec.Template.Spec.Containers[0].Args = args
	if _, err := e.c.Client.AppsV1().DaemonSets(stack.Namespace).Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update the agent DaemonSet's arguments: %v", err)
	}
	waitFor(t, 3*time.Minute, "the agent's ready pod with arguments "+strings.Join(args, " "), func() (bool, string) {
		p, why := runningAgent(e)
		if p == nil {
			return false, why
		}
		if !slices.Equal(p.Spec.Containers[0].Args, args) {
			return false, "the agent pod runs other arguments: " + strings.Join(p.Spec.Containers[0].Args, " ")
		}
		for _, s := range p.Status.ContainerStatuses {
			if !s.Ready {
				return false, "not ready"
			}
		}
		return len(p.Status.ContainerStatuses) > 0, "no container status"
	})
	time.Sleep(3 * time.Second) // its first passes over the node's mounts and pods
}

// deleteLoadPods deletes the named load pods and waits until they are gone.
func deleteLoadPods(t *failRecorder, e *env, l *fieldLayout, names []string) {
	ctx := context.Background()
	for _, n := range names {
		if err := e.c.Client.CoreV1().Pods(l.ns).Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(1))}); err != nil {
			t.Fatalf("delete load pod %s: %v", n, err)
		}
	}
	waitFor(t, 3*time.Minute, "the load pods gone", func() (bool, string) {
		for _, n := range names {
			if _, err := e.c.Client.CoreV1().Pods(l.ns).Get(ctx, n, metav1.GetOptions{}); err == nil {
				return false, n + " still there"
			}
		}
		return true, ""
	})
}
