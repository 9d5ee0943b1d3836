//go:build integration

package nodeagent

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// Consent on a real kube-apiserver: the view lists only the pods of namespaces labelled
// pvrescue.io/inject=enabled that are not labelled inject=false, read from the Namespace
// objects of its informer; labelling a namespace later shows its pods and wakes the rescues,
// removing the label hides them again.
func TestKubeViewConsentOnAnAPIServer(t *testing.T) {
	_, cfg := testenv.APIServer(t)
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, lbl := range map[string]map[string]string{"opted-in": {contract.LabelInject: contract.LabelInjectEnabled}, "plain": nil} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*corev1.Pod{podOn("opted-in", "app", "node-a"), podOn("opted-in", "optout", "node-a"), podOn("plain", "app", "node-a")} {
		if p.Name == "optout" {
			p.Labels = map[string]string{contract.LabelInject: contract.LabelInjectOptOutVal}
		}
		if _, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, changed := startNodeView(ctx, t, client, ViewOptions{RequireConsent: true})
	want := func(what string, names ...string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return slices.Equal(podNames(t, v), names), nil
		}); err != nil {
			t.Fatalf("%s: the view lists %v, want %v", what, podNames(t, v), names)
		}
	}
	want("at start", "opted-in/app")
	for len(changed) > 0 {
		<-changed
	}
	ns, err := admin.CoreV1().Namespaces().Get(ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{contract.LabelInject: contract.LabelInjectEnabled}
	if _, err := admin.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("namespace plain labelled", "opted-in/app", "plain/app")
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no OnPodChange call after a namespace opted in")
	}
	ns, err = admin.CoreV1().Namespaces().Get(ctx, "opted-in", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(ns.Labels, contract.LabelInject)
	if _, err := admin.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("namespace opted-in unlabelled", "plain/app")
}
