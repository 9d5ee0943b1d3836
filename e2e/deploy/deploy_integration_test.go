//go:build integration

package deploy

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

const namespace = "pvrescue-system"

// certManagerCRDs finds deploy/crds of the cert-manager module this e2e module requires.
func certManagerCRDs(t *testing.T) string {
	t.Helper()
	dir, err := stack.CertManagerCRDDir("")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// render runs kustomize on manifests/ exactly as `kubectl apply -k` would.
func render(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(testenv.RepoRoot(), "manifests"))
	if err != nil {
		t.Fatalf("kustomize build manifests/: %v", err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// warnings collects the apiserver's admission warnings (Pod Security "warn" mode reports there).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

func TestManifestsApplyWithServerSideDryRun(t *testing.T) {
	objs := render(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	want := map[string]int{
		"Namespace": 1, "ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "ConfigMap": 1,
		"Deployment": 1, "PodDisruptionBudget": 1, "Service": 1, "MutatingWebhookConfiguration": 1,
		"DaemonSet": 1, "Issuer": 2, "Certificate": 2,
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("rendered %d %s, want %d (all kinds: %v)", kinds[k], k, n, kinds)
		}
	}

	_, cfg := testenv.APIServer(t, certManagerCRDs(t))
	warn := &warnings{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = warn
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	ctx := context.Background()

	apply := func(o *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, err
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			if o.GetNamespace() == "" {
				t.Errorf("%s %s is namespaced but has no namespace", gvk.Kind, o.GetName())
			}
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		opts := metav1.ApplyOptions{FieldManager: "pvrescue-e2e", Force: true}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		return ri.Apply(ctx, o.GetName(), o, opts)
	}

	// The namespace and service accounts exist for real (pods are admitted against them below);
	// everything else is a server-side dry-run apply: validated, defaulted, admitted, not stored.
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
	applied := 0
	for _, o := range objs {
		real := o.GetKind() == "Namespace" || o.GetKind() == "ServiceAccount"
		got, err := apply(o, !real)
		if err != nil {
			t.Errorf("%s %s/%s rejected: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			continue
		}
		if got.GetKind() != o.GetKind() || got.GetName() != o.GetName() {
			t.Errorf("apply of %s %s returned %s %s", o.GetKind(), o.GetName(), got.GetKind(), got.GetName())
		}
		applied++
		// Pod Security warns on workloads too: expected for the privileged agent only.
		if w := warn.take(); len(w) > 0 && (o.GetKind() != "DaemonSet" || !strings.Contains(w[0], `PodSecurity "restricted`)) {
			t.Errorf("%s %s: apiserver warnings: %v", o.GetKind(), o.GetName(), w)
		}
	}
	t.Logf("%d of %d rendered objects accepted by kube-apiserver %s (server-side apply, dry-run except Namespace and ServiceAccounts)", applied, len(objs), testenv.KubeVersion)

	// Dry-run must not have stored anything.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().Deployments(namespace).Get(ctx, "pvrescue-webhook", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("dry-run stored the Deployment (get: %v)", err)
	}

	// Pod Security: the namespace enforces "privileged" and warns at "restricted". The webhook's pod
	// must meet restricted (no warning), the agent's cannot (a warning naming privileged).
	for _, o := range objs {
		var tmpl corev1.PodTemplateSpec
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			mustConvert(t, o, &d)
			tmpl = d.Spec.Template
		case "DaemonSet":
			var d appsv1.DaemonSet
			mustConvert(t, o, &d)
			tmpl = d.Spec.Template
		default:
			continue
		}
		pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
		pod.Name, pod.Namespace = o.GetName()+"-dryrun", namespace
		pod.Spec.NodeName = "node-a"
		if _, err := cs.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("pod of %s %s not admitted: %v", o.GetKind(), o.GetName(), err)
			continue
		}
		w := warn.take()
		switch o.GetKind() {
		case "Deployment":
			if len(w) != 0 {
				t.Errorf("webhook pod should meet Pod Security restricted, warnings: %v", w)
			}
		case "DaemonSet":
			if len(w) == 0 || !strings.Contains(strings.Join(w, " "), "privileged") {
				t.Errorf("agent pod: expected a restricted-profile warning about privileged, got %v", w)
			}
			t.Logf("agent pod admitted under enforce=privileged; restricted warns as documented: %v", w)
		}
	}
}

func mustConvert(t *testing.T, u *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		data, _ := yaml.Marshal(u.Object)
		t.Fatalf("convert %s: %v\n%s", u.GetKind(), err, data)
	}
}
