package webhook

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// restricted evaluates pod with the apiserver's own Pod Security evaluator at restricted:latest
// and returns the reasons it is refused (none when it is allowed).
func restricted(t testing.TB, pod *corev1.Pod) []string {
	t.Helper()
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := policy.AggregateCheckResults(e.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec))
	if res.Allowed {
		return nil
	}
	return res.ForbiddenReasons
}

// Every golden input that Pod Security "restricted" accepts is still accepted once mutated: what
// pvrescue injects never makes a compliant pod non-compliant.
func TestMutationKeepsPodSecurityRestricted(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	compliant := 0
	for _, in := range files {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			pod, objs := loadCase(t, in)
			if reasons := restricted(t, pod); len(reasons) > 0 {
				t.Logf("input not restricted-compliant (%s); nothing to keep", strings.Join(reasons, "; "))
				return
			}
			compliant++
			got := pod.DeepCopy()
			newDefaulter(objs...).Default(context.Background(), pod.Namespace, got)
			if reasons := restricted(t, got); len(reasons) > 0 {
				t.Errorf("a restricted-compliant pod became non-compliant: %s", strings.Join(reasons, "; "))
			}
		})
	}
	// The cases written to be compliant must be among them, or this test proves nothing.
	if compliant < 2 {
		t.Fatalf("only %d golden inputs are restricted-compliant; the restricted-* cases should be", compliant)
	}
}

// The injected containers are compliant on their own, whatever the pod says: a pod-level
// securityContext is not needed for them to pass.
func TestInjectedContainersAreRestricted(t *testing.T) {
	cfg := testConfig()
	for _, psc := range []*corev1.PodSecurityContext{nil, {}, {RunAsUser: ptrTo[int64](0)}, {RunAsUser: ptrTo[int64](1000), RunAsNonRoot: ptrTo(true)}} {
		for _, c := range []corev1.Container{guardContainer(cfg, psc, "pvrescue", &guardPlan{name: "pvrescue-guard", out: "/pvrescue", devs: []device{{volume: "d", path: "/dev/d", claim: "d"}}}, "filter", true), installContainer(cfg, psc, "pvrescue", "pvrescue-install", true)} {
			pod := &corev1.Pod{Spec: corev1.PodSpec{
				SecurityContext: psc,
				InitContainers:  []corev1.Container{c},
				// A compliant app container, so only the injected one is judged.
				Containers: []corev1.Container{{Name: "app", Image: "x", SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptrTo(true), AllowPrivilegeEscalation: ptrTo(false),
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				}}},
			}}
			// A pod-level runAsUser 0 is refused by itself; the container must still name its own user.
			rootPod := psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0
			if reasons := restricted(t, pod); len(reasons) > 0 && !rootPod {
				t.Errorf("%s with pod securityContext %+v is refused: %s", c.Name, psc, strings.Join(reasons, "; "))
			}
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: root filesystem not read-only: %+v", c.Name, sc)
			}
			if c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: requests and limits of cpu and memory must be set: %+v", c.Name, c.Resources)
			}
			inherits := psc != nil && psc.RunAsUser != nil && *psc.RunAsUser != 0
			if inherits != (sc.RunAsUser == nil) {
				t.Errorf("%s: pod runAsUser %v, container runAsUser %v: want the pod's non-root user inherited, else %d", c.Name, psc, sc.RunAsUser, cfg.Helper.RunAsUser)
			}
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
