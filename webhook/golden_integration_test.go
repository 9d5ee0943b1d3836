//go:build integration

package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// Every golden output is a pod a real kube-apiserver accepts and stores as it is: submitted by
// server-side dry-run create in a namespace enforcing Pod Security "restricted" (when the golden
// input is compliant) and in one with a ResourceQuota on requests and limits of cpu and memory
// (and no LimitRange), and read back equal to the golden file.
func TestGoldenOutputsAcceptedByAPIServer(t *testing.T) {
	_, restCfg := testenv.APIServer(t)
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const restrictedNS, quotaNS = "restricted", "quota"
	for name, labels := range map[string]map[string]string{
		restrictedNS: {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"},
		quotaNS:      nil,
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// No controller-manager here: the ServiceAccount admission needs the account to exist.
		if _, err := cs.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	hard := corev1.ResourceList{
		corev1.ResourceLimitsCPU: resource.MustParse("100"), corev1.ResourceLimitsMemory: resource.MustParse("100Gi"),
		corev1.ResourceRequestsCPU: resource.MustParse("100"), corev1.ResourceRequestsMemory: resource.MustParse("100Gi"),
	}
	q, err := cs.CoreV1().ResourceQuotas(quotaNS).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "limits"}, Spec: corev1.ResourceQuotaSpec{Hard: hard},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The quota controller (not running here) would fill the status; quota admission refuses
	// every pod while the status is unknown.
	used := corev1.ResourceList{}
	for k := range hard {
		used[k] = resource.MustParse("0")
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
	if _, err := cs.CoreV1().ResourceQuotas(quotaNS).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// create submits pod to namespace ns and returns what the server stored, and the pod as
	// submitted (in that namespace) to compare it with.
	create := func(ns string, pod *corev1.Pod) (got, sent *corev1.Pod, err error) {
		sent = pod.DeepCopy()
		sent.Namespace = ns
		got, err = cs.CoreV1().Pods(ns).Create(ctx, sent, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if got != nil {
			// The typed client drops apiVersion and kind when it decodes; the server does not.
			got.TypeMeta = sent.TypeMeta
		}
		return got, sent, err
	}

	files, err := filepath.Glob("testdata/golden/*.golden.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	compliant := 0
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".golden.json")
		input, _ := loadCase(t, "testdata/golden/"+name+".yaml")
		want := readGoldenPod(t, file)
		t.Run(name, func(t *testing.T) {
			if reasons := restricted(t, input); len(reasons) == 0 {
				compliant++
				t.Run("restricted namespace", func(t *testing.T) {
					got, sent, err := create(restrictedNS, want)
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					assertStoredAsGolden(t, sent, got)
				})
			}
			t.Run("namespace with a quota on limits", func(t *testing.T) {
				// The quota demands limits of the user's own containers too; give them theirs, and
				// leave pvrescue's exactly as the golden file has them.
				got, sent, err := create(quotaNS, withUserLimits(want))
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				assertStoredAsGolden(t, sent, got)
			})
		})
	}
	if compliant < 2 {
		t.Fatalf("only %d golden inputs are restricted-compliant; the restricted-* and non-root cases should be", compliant)
	}

	// Controls: both namespaces really refuse what pvrescue used to inject.
	t.Run("control: restricted refuses an injected container without securityContext", func(t *testing.T) {
		pod := readGoldenPod(t, "testdata/golden/restricted-compliant.golden.json")
		pod.Spec.InitContainers[0].SecurityContext = nil
		if _, _, err := create(restrictedNS, pod); !apierrors.IsForbidden(err) {
			t.Fatalf("want Forbidden, got %v", err)
		}
	})
	t.Run("control: quota refuses an injected container without limits", func(t *testing.T) {
		pod := withUserLimits(readGoldenPod(t, "testdata/golden/restricted-compliant.golden.json"))
		pod.Spec.InitContainers[0].Resources = corev1.ResourceRequirements{}
		if _, _, err := create(quotaNS, pod); !apierrors.IsForbidden(err) {
			t.Fatalf("want Forbidden, got %v", err)
		}
	})
}

func readGoldenPod(t *testing.T, file string) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return g.Pod
}

// withUserLimits gives every container pvrescue did not inject small requests and limits of cpu
// and memory where it has none.
func withUserLimits(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if roleOf(cs[i]) != "" {
				continue
			}
			if cs[i].Resources.Limits == nil {
				cs[i].Resources.Limits = small.DeepCopy()
			}
			if cs[i].Resources.Requests == nil {
				cs[i].Resources.Requests = small.DeepCopy()
			}
		}
	}
	return p
}

// assertStoredAsGolden checks that every field of want is in got with the same value. The API
// server may only add: defaults, metadata it owns, status, and the ServiceAccount admission's
// token volume and its mounts (dropped before comparing lists).
func assertStoredAsGolden(t *testing.T, want, got *corev1.Pod) {
	t.Helper()
	if _, ok := got.Annotations[contract.AnnotationStatus]; ok != (want.Annotations[contract.AnnotationStatus] != "") {
		t.Errorf("status annotation stored=%v, golden=%v", ok, !ok)
	}
	var w, g any
	for _, x := range []struct {
		pod *corev1.Pod
		out *any
	}{{want, &w}, {got, &g}} {
		raw, err := json.Marshal(x.pod)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, x.out); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range subsetDiff(w, g, "") {
		t.Errorf("stored pod differs from the golden file at %s", d)
	}
}

func subsetDiff(want, got any, at string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, stored %v", at, got)}
		}
		var out []string
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				out = append(out, fmt.Sprintf("%s/%s: missing (want %v)", at, k, wv))
				continue
			}
			out = append(out, subsetDiff(wv, gv, at+"/"+k)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want a list, stored %v", at, got)}
		}
		g = withoutTokenVolume(g)
		if len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %d elements stored, golden has %d", at, len(g), len(w))}
		}
		var out []string
		for i := range w {
			out = append(out, subsetDiff(w[i], g[i], fmt.Sprintf("%s/%d", at, i))...)
		}
		return out
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: stored %v, golden %v", at, got, want)}
		}
		return nil
	}
}

// withoutTokenVolume drops the service account token volume and mounts that the API server's
// ServiceAccount admission adds to every pod and container.
func withoutTokenVolume(list []any) []any {
	out := list[:0:0]
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			if n, _ := m["name"].(string); strings.HasPrefix(n, "kube-api-access-") {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}
