package nodeagent

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pvrescue/pvrescue/internal/contract"
)

func consentNS(name string, lbl map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}
}

func consentPod(ns, name string, lbl map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl}, Spec: corev1.PodSpec{NodeName: "n1"}}
}

var (
	optInLabels  = map[string]string{contract.LabelInject: contract.LabelInjectEnabled}
	optOutLabels = map[string]string{contract.LabelInject: contract.LabelInjectOptOutVal}
)

func TestConsents(t *testing.T) {
	for _, c := range []struct {
		what string
		pod  *corev1.Pod
		ns   *corev1.Namespace
		want bool
	}{
		{"opted-in namespace", consentPod("a", "p", nil), consentNS("a", optInLabels), true},
		{"pod labelled enabled too", consentPod("a", "p", optInLabels), consentNS("a", optInLabels), true},
		{"pod opted out", consentPod("a", "p", optOutLabels), consentNS("a", optInLabels), false},
		{"namespace without the label", consentPod("a", "p", nil), consentNS("a", nil), false},
		{"namespace labelled otherwise", consentPod("a", "p", nil), consentNS("a", map[string]string{contract.LabelInject: "true"}), false},
		// A tenant cannot consent for its namespace from its own pod.
		{"pod labelled enabled, namespace not", consentPod("a", "p", optInLabels), consentNS("a", nil), false},
		{"namespace unknown", consentPod("a", "p", nil), nil, false},
		{"another namespace's object", consentPod("a", "p", nil), consentNS("b", optInLabels), false},
	} {
		if got := Consents(c.pod, c.ns); got != c.want {
			t.Errorf("%s: Consents = %v, want %v", c.what, got, c.want)
		}
	}
}

func podNames(t *testing.T, v ClusterView) []string {
	t.Helper()
	pods, err := v.Pods().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	slices.Sort(out)
	return out
}

// The agent's view hides, by default, the pods the agent may not act for: a namespace that did
// not opt in, a pod labelled inject=false. A namespace labelled later shows its pods and wakes
// the rescues; one unlabelled hides them again.
func TestKubeViewRequireConsentListsOnlyConsentingPods(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		consentNS("in", optInLabels), consentNS("out", nil),
		consentPod("in", "a", nil), consentPod("in", "optout", optOutLabels), consentPod("out", "b", nil),
	)
	v, err := NewKubeView(cs, "n1", nil, ViewOptions{RequireConsent: true})
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 100)
	v.OnPodChange(func() { changed <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); v.Shutdown() }()
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := podNames(t, v), []string{"in/a"}; !slices.Equal(got, want) {
		t.Fatalf("pods listed = %v, want %v (no pod of a namespace that did not opt in, none labelled %s=%s)",
			got, want, contract.LabelInject, contract.LabelInjectOptOutVal)
	}
	if _, err := v.Pods().Pods("out").Get("b"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of a pod in a namespace that did not opt in: err = %v, want NotFound", err)
	}
	if _, err := v.Pods().Pods("in").Get("optout"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of an opted-out pod: err = %v, want NotFound", err)
	}
	if p, err := v.Pods().Pods("in").List(labels.Everything()); err != nil || len(p) != 1 {
		t.Fatalf("namespaced list of in = %d pods, %v; want 1", len(p), err)
	}
	drain := func() {
		for {
			select {
			case <-changed:
			default:
				return
			}
		}
	}
	waitFor := func(what string, want []string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Equal(podNames(t, v), want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: pods listed = %v, want %v", what, podNames(t, v), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no OnPodChange call", what)
		}
	}
	drain()
	if _, err := cs.CoreV1().Namespaces().Update(ctx, consentNS("out", optInLabels), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("namespace out labelled", []string{"in/a", "out/b"})
	drain()
	if _, err := cs.CoreV1().Namespaces().Update(ctx, consentNS("in", nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("namespace in unlabelled", []string{"out/b"})
}

// rescueAllNamespaces: every pod of the node, and no namespace is listed or watched.
func TestKubeViewWithoutConsentListsEveryPodAndNoNamespace(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		consentNS("in", optInLabels), consentNS("out", nil),
		consentPod("in", "a", nil), consentPod("in", "optout", optOutLabels), consentPod("out", "b", nil),
	)
	v, err := NewKubeView(cs, "n1", nil, ViewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); v.Shutdown() }()
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := podNames(t, v), []string{"in/a", "in/optout", "out/b"}; !slices.Equal(got, want) {
		t.Fatalf("pods listed = %v, want %v", got, want)
	}
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "namespaces" {
			t.Errorf("namespaces were read (%s) although consent is not required", a.GetVerb())
		}
	}
}
