package charts_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/pvrescue/pvrescue/charts"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// Value sets the golden files and the lint cover: every TLS mode, monitoring on, and every knob.
var cases = map[string]string{
	"default": ``,
	"bootstrap": `
tls: {mode: bootstrap}
`,
	"existing-secret": `
tls:
  mode: existingSecret
  existingSecret:
    name: my-webhook-tls
    caBundle: |
      -----BEGIN CERTIFICATE-----
      MIIBdummy
      -----END CERTIFICATE-----
`,
	"monitoring": `
monitoring:
  enabled: true
  labels: {release: kube-prometheus-stack}
`,
	"custom": `
namespace: {create: false}
webhook:
  image: {repository: registry.example/pvrescue-webhook, tag: v1.2.3, pullPolicy: Always}
  replicas: 3
  podDisruptionBudget: {enabled: true, minAvailable: 2}
  resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 1Gi}}
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]}]
  priorityClassName: system-cluster-critical
  failurePolicy: Fail
  timeoutSeconds: 10
  namespaceSelector:
    matchLabels: {team: storage}
    matchExpressions: [{key: pvrescue.io/inject, operator: In, values: [enabled, "yes"]}]
agent:
  image: {repository: registry.example/pvrescue-agent, tag: v1.2.3, pullPolicy: Always}
  resources: {requests: {cpu: 50m, memory: 128Mi}, limits: {memory: 1Gi}}
  nodeSelector: {pvrescue.io/agent: "true"}
  tolerations: [{key: dedicated, operator: Equal, value: storage, effect: NoSchedule}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]}]
  priorityClassName: my-node-critical
  hostPID: false
  containerRemount: false
config:
  localBlock: {storageClasses: [fast-local]}
  kubeletDir: /var/lib/k0s/kubelet
`,
}

func values(t *testing.T, name string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(cases[name]), &v); err != nil {
		t.Fatalf("values %s: %v", name, err)
	}
	return v
}

func load(t *testing.T) *charts.Chart {
	t.Helper()
	ch, err := charts.Load()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func render(t *testing.T, vals map[string]any, rel charts.Release) []*unstructured.Unstructured {
	t.Helper()
	objs, err := charts.Render(load(t), vals, rel)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// `helm lint` (the SDK's linter, all rules) passes every value set without warnings.
func TestLint(t *testing.T) {
	for name := range cases {
		t.Run(name, func(t *testing.T) {
			res := lint.RunAll(charts.ChartDir, values(t, name), charts.DefaultNamespace)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m.Error())
				}
			}
			if len(res.Messages) > 0 {
				t.Logf("helm lint info: %v", res.Messages)
			}
		})
	}
}

// Golden files of `helm template`: testdata/<case>.yaml. UPDATE_GOLDEN=1 rewrites them.
func TestTemplateGolden(t *testing.T) {
	for name := range cases {
		t.Run(name, func(t *testing.T) {
			files, err := charts.RenderFiles(load(t), values(t, name), charts.DefaultRelease())
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range files {
				names = append(names, n)
			}
			sort.Strings(names)
			var b strings.Builder
			for _, n := range names {
				fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", n, strings.TrimSpace(files[n]))
			}
			golden := filepath.Join("testdata", name+".yaml")
			if os.Getenv("UPDATE_GOLDEN") != "" {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (create it with UPDATE_GOLDEN=1 go test ./charts/ and review it)", err)
			}
			if d := cmp.Diff(string(want), b.String()); d != "" {
				t.Errorf("render differs from %s (UPDATE_GOLDEN=1 to accept) (-golden +render):\n%s", golden, d)
			}
		})
	}
}

// The heart of the chart's contract: with default values it renders exactly the objects of
// `kustomize build manifests/`. The only differences allowed, each normalised below:
//   - kustomize names the ConfigMap pvrescue-config-<hash> (the hash rolls the pods on a config
//     change); the chart names it pvrescue-config and rolls pods with a checksum/config annotation;
//   - config.yaml is compared as parsed YAML (the chart renders it from values, without comments).
func TestDefaultRenderEqualsManifests(t *testing.T) {
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../manifests")
	if err != nil {
		t.Fatalf("kustomize build manifests/: %v", err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	kust, err := charts.SplitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	chart := render(t, nil, charts.DefaultRelease())

	want, got := index(t, kust), index(t, chart)
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("chart lacks %s", k)
		}
	}
	for k, g := range got {
		w, ok := want[k]
		if !ok {
			t.Errorf("chart renders %s, manifests/ do not", k)
			continue
		}
		if d := cmp.Diff(w, g); d != "" {
			t.Errorf("%s differs (-manifests +chart):\n%s", k, d)
		}
	}
}

var hashSuffix = regexp.MustCompile(`^(pvrescue-config)-[a-z0-9]{10}$`)

// index normalises objects (see TestDefaultRenderEqualsManifests) and keys them by kind/ns/name.
func index(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	m := map[string]map[string]any{}
	for _, o := range objs {
		o = o.DeepCopy()
		if hashSuffix.MatchString(o.GetName()) {
			o.SetName(hashSuffix.ReplaceAllString(o.GetName(), "$1"))
		}
		if o.GetKind() == "ConfigMap" {
			data, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
			var parsed map[string]any
			if err := yaml.Unmarshal([]byte(data), &parsed); err != nil {
				t.Fatalf("config.yaml of %s: %v", o.GetName(), err)
			}
			o.Object["data"] = map[string]any{"config.yaml": parsed}
		}
		if vols, ok, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes"); ok {
			for _, v := range vols {
				if cm, ok := v.(map[string]any)["configMap"].(map[string]any); ok {
					if n, _ := cm["name"].(string); hashSuffix.MatchString(n) {
						cm["name"] = hashSuffix.ReplaceAllString(n, "$1")
					}
				}
			}
			_ = unstructured.SetNestedSlice(o.Object, vols, "spec", "template", "spec", "volumes")
		}
		if ann, ok, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "annotations"); ok {
			delete(ann, "checksum/config")
			if len(ann) == 0 {
				unstructured.RemoveNestedField(o.Object, "spec", "template", "metadata", "annotations")
			} else {
				_ = unstructured.SetNestedStringMap(o.Object, ann, "spec", "template", "metadata", "annotations")
			}
		}
		// Round-trip through JSON so numbers compare alike whichever decoder made them.
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		var norm map[string]any
		if err := json.Unmarshal(b, &norm); err != nil {
			t.Fatal(err)
		}
		m[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = norm
	}
	return m
}

// Certificates are never regenerated by `helm upgrade`: in every TLS mode, install and upgrade
// renders are identical (no random key, certificate or password from a template function), no
// Secret is rendered, and the caBundle is rendered only when the user supplies it.
func TestUpgradeKeepsCertificates(t *testing.T) {
	forbidden := regexp.MustCompile(`\b(genCA|genCAWithKey|genSelfSignedCert|genSelfSignedCertWithKey|genSignedCert|genSignedCertWithKey|genPrivateKey|randAlphaNum|randAlpha|randNumeric|randAscii|randBytes|uuidv4|now|lookup)\b`)
	ch := load(t)
	for _, f := range ch.Templates {
		if loc := forbidden.FindString(string(f.Data)); loc != "" {
			t.Errorf("%s calls %s: its output would change on every upgrade", f.Name, loc)
		}
	}
	for _, name := range []string{"default", "bootstrap", "existing-secret"} {
		t.Run(name, func(t *testing.T) {
			install, err := charts.RenderFiles(ch, values(t, name), charts.DefaultRelease())
			if err != nil {
				t.Fatal(err)
			}
			rel := charts.DefaultRelease()
			rel.IsUpgrade = true
			upgrade, err := charts.RenderFiles(ch, values(t, name), rel)
			if err != nil {
				t.Fatal(err)
			}
			// The bootstrap Job's name carries the revision (it runs again on every upgrade): the
			// only difference allowed.
			revision := regexp.MustCompile(`(name: pvrescue-certs-bootstrap-)[0-9]+`)
			for f := range install {
				install[f] = revision.ReplaceAllString(install[f], "${1}N")
				upgrade[f] = revision.ReplaceAllString(upgrade[f], "${1}N")
			}
			if d := cmp.Diff(install, upgrade); d != "" {
				t.Errorf("upgrade render differs from install (-install +upgrade):\n%s", d)
			}
			for _, o := range render(t, values(t, name), charts.DefaultRelease()) {
				if o.GetKind() == "Secret" {
					t.Errorf("chart renders Secret %s; certificates must come from cert-manager, bootstrap or the user", o.GetName())
				}
				if o.GetKind() != "MutatingWebhookConfiguration" {
					continue
				}
				var mwc admissionregistrationv1.MutatingWebhookConfiguration
				decode(t, o, &mwc)
				bundle := mwc.Webhooks[0].ClientConfig.CABundle
				if name == "existing-secret" {
					if !strings.Contains(string(bundle), "MIIBdummy") {
						t.Errorf("caBundle = %q, want the supplied PEM", bundle)
					}
				} else if len(bundle) != 0 {
					t.Errorf("caBundle rendered in mode %s; it must be left to the injector", name)
				}
				_, inject := mwc.Annotations["cert-manager.io/inject-ca-from"]
				if inject != (name == "default") {
					t.Errorf("cert-manager.io/inject-ca-from present=%v in mode %s", inject, name)
				}
			}
		})
	}
}

func decode(t *testing.T, o *unstructured.Unstructured, out any) {
	t.Helper()
	b, err := yaml.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, out); err != nil {
		t.Fatalf("%s %s does not decode strictly: %v", o.GetKind(), o.GetName(), err)
	}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			decode(t, o, out)
			return
		}
	}
	t.Fatalf("%s %s not rendered", kind, name)
}

// Every value of the "custom" set reaches the object it is for.
func TestValuesApplied(t *testing.T) {
	objs := render(t, values(t, "custom"), charts.DefaultRelease())
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			t.Errorf("namespace.create=false still renders the Namespace")
		}
	}
	var d appsv1.Deployment
	find(t, objs, "Deployment", "pvrescue-webhook", &d)
	ps := d.Spec.Template.Spec
	c := ps.Containers[0]
	check := func(what string, got, want any) {
		t.Helper()
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", what, d)
		}
	}
	check("webhook replicas", *d.Spec.Replicas, int32(3))
	check("webhook image", c.Image, "registry.example/pvrescue-webhook:v1.2.3")
	check("webhook pullPolicy", c.ImagePullPolicy, corev1.PullAlways)
	check("webhook cpu request", c.Resources.Requests.Cpu().String(), "100m")
	check("webhook memory limit", c.Resources.Limits.Memory().String(), "1Gi")
	check("webhook nodeSelector", ps.NodeSelector, map[string]string{"node-role.kubernetes.io/control-plane": ""})
	check("webhook tolerations", len(ps.Tolerations), 1)
	check("webhook affinity replaced", ps.Affinity.PodAntiAffinity == nil && ps.Affinity.NodeAffinity != nil, true)
	check("webhook priorityClass", ps.PriorityClassName, "system-cluster-critical")

	var pdb policyv1.PodDisruptionBudget
	find(t, objs, "PodDisruptionBudget", "pvrescue-webhook", &pdb)
	check("pdb minAvailable", pdb.Spec.MinAvailable.IntValue(), 2)

	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	find(t, objs, "MutatingWebhookConfiguration", "pvrescue-webhook", &mwc)
	w := mwc.Webhooks[0]
	check("failurePolicy", *w.FailurePolicy, admissionregistrationv1.Fail)
	check("timeoutSeconds", *w.TimeoutSeconds, int32(10))
	check("namespaceSelector labels", w.NamespaceSelector.MatchLabels, map[string]string{"team": "storage"})
	check("namespaceSelector expressions", len(w.NamespaceSelector.MatchExpressions), 2)
	check("own namespace excluded", w.NamespaceSelector.MatchExpressions[1].Values, []string{"kube-system", "kube-public", "kube-node-lease", "pvrescue-system"})

	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "pvrescue-agent", &ds)
	aps := ds.Spec.Template.Spec
	ac := aps.Containers[0]
	check("agent image", ac.Image, "registry.example/pvrescue-agent:v1.2.3")
	check("agent pullPolicy", ac.ImagePullPolicy, corev1.PullAlways)
	check("agent memory limit", ac.Resources.Limits.Memory().String(), "1Gi")
	check("agent nodeSelector", aps.NodeSelector, map[string]string{"pvrescue.io/agent": "true"})
	check("agent tolerations", aps.Tolerations[0].Key, "dedicated")
	check("agent affinity", aps.Affinity != nil && aps.Affinity.NodeAffinity != nil, true)
	check("agent priorityClass", aps.PriorityClassName, "my-node-critical")
	check("agent hostPID", aps.HostPID, false)
	check("agent container remount off", ac.Args[len(ac.Args)-1], "--container-remount=false")

	// The config: values merged over defaults, helper image following the webhook image, and the
	// agent's host mounts following the config's directories.
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", "pvrescue-config", &cm)
	cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("rendered config does not parse: %v", err)
	}
	check("storage classes", cfg.LocalBlock.StorageClasses, []string{"fast-local"})
	check("helper image", cfg.Helper.Image, "registry.example/pvrescue-webhook:v1.2.3")
	var kubeletMount bool
	for _, m := range ac.VolumeMounts {
		if m.MountPath == "/var/lib/k0s/kubelet" {
			kubeletMount = true
		}
	}
	check("agent mounts config.kubeletDir", kubeletMount, true)
	for _, v := range aps.Volumes {
		if v.Name == "kubelet-dir" {
			check("kubelet hostPath", v.HostPath.Path, "/var/lib/k0s/kubelet")
		}
	}
}

// Every rendered object of every value set decodes strictly into its API type: a misspelt field
// in a template fails here, not on a cluster.
func TestRenderedObjectsDecodeStrictly(t *testing.T) {
	types := map[string]func() any{
		"Namespace": func() any { return &corev1.Namespace{} }, "ConfigMap": func() any { return &corev1.ConfigMap{} },
		"Service": func() any { return &corev1.Service{} }, "ServiceAccount": func() any { return &corev1.ServiceAccount{} },
		"Deployment": func() any { return &appsv1.Deployment{} }, "DaemonSet": func() any { return &appsv1.DaemonSet{} },
		"PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
		"ClusterRole":         func() any { return &rbacv1.ClusterRole{} }, "ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
		"Role": func() any { return &rbacv1.Role{} }, "RoleBinding": func() any { return &rbacv1.RoleBinding{} },
		"Job": func() any { return &batchv1.Job{} }, "CronJob": func() any { return &batchv1.CronJob{} },
		"MutatingWebhookConfiguration":     func() any { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
		"ValidatingAdmissionPolicy":        func() any { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
		"ValidatingAdmissionPolicyBinding": func() any { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
	}
	for name := range cases {
		for _, o := range render(t, values(t, name), charts.DefaultRelease()) {
			if newObj, ok := types[o.GetKind()]; ok {
				decode(t, o, newObj())
			} else if o.GetAPIVersion() != "cert-manager.io/v1" && o.GetAPIVersion() != "monitoring.coreos.com/v1" {
				t.Errorf("%s: unexpected kind %s %s (add it to this test)", name, o.GetAPIVersion(), o.GetKind())
			}
		}
	}
}

// NOTES.txt (printed by `helm install`) names the images with the one version, says what to label
// next with the labels the webhook and the agent act on, and how to check it works. Golden files:
// testdata/NOTES-<case>.txt (UPDATE_GOLDEN=1 rewrites them).
func TestNotes(t *testing.T) {
	ch := load(t)
	for _, name := range []string{"default", "custom"} {
		t.Run(name, func(t *testing.T) {
			notes, err := charts.RenderNotes(ch, values(t, name), charts.DefaultRelease())
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "NOTES-"+name+".txt")
			if os.Getenv("UPDATE_GOLDEN") != "" {
				if err := os.WriteFile(golden, []byte(notes), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (create it with UPDATE_GOLDEN=1 go test ./charts/ and review it)", err)
			}
			if d := cmp.Diff(string(want), notes); d != "" {
				t.Errorf("NOTES.txt differs from %s (UPDATE_GOLDEN=1 to accept) (-golden +render):\n%s", golden, d)
			}
		})
	}
	notes, err := charts.RenderNotes(ch, nil, charts.DefaultRelease())
	if err != nil {
		t.Fatal(err)
	}
	def := config.Default()
	for _, want := range []string{
		"ghcr.io/pvrescue/pvrescue-webhook:" + ch.Metadata.AppVersion,
		"ghcr.io/pvrescue/pvrescue-agent:" + ch.Metadata.AppVersion,
		"kubectl label namespace <app-namespace> " + contract.LabelInject + "=" + contract.LabelInjectEnabled,
		"kubectl label node <node> " + def.LocalBlock.NodeLabel + "=" + contract.LabelFakeDevicesEnabled,
		"kubectl pvrescue status\n",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("default NOTES.txt lacks %q:\n%s", want, notes)
		}
	}
	rel := charts.DefaultRelease()
	rel.Namespace = "storage"
	if notes, err = charts.RenderNotes(ch, values(t, "custom"), rel); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notes, "kubectl pvrescue status --pvrescue-namespace storage") {
		t.Errorf("NOTES.txt in namespace storage does not pass it to kubectl pvrescue:\n%s", notes)
	}
}

// With the tags left empty, the webhook, agent and helper images all carry the chart's appVersion,
// and the chart's pull secrets reach every pod it renders (webhook, agent, certificate bootstrap).
func TestImagesFollowAppVersion(t *testing.T) {
	ch := load(t)
	v := map[string]any{"tls": map[string]any{"mode": "bootstrap"}, "imagePullSecrets": []any{map[string]any{"name": "my-registry"}}}
	objs := render(t, v, charts.DefaultRelease())
	wantImages := map[string]bool{
		"ghcr.io/pvrescue/pvrescue-webhook:" + ch.Metadata.AppVersion: true,
		"ghcr.io/pvrescue/pvrescue-agent:" + ch.Metadata.AppVersion:   true,
	}
	pods := 0
	for _, o := range objs {
		var spec *corev1.PodSpec
		switch o.GetKind() {
		case "Deployment", "DaemonSet":
			var w struct {
				Spec struct{ Template corev1.PodTemplateSpec } `json:"spec"`
			}
			b, _ := json.Marshal(o.Object)
			if err := json.Unmarshal(b, &w); err != nil {
				t.Fatal(err)
			}
			spec = &w.Spec.Template.Spec
		case "Job":
			var j batchv1.Job
			decode(t, o, &j)
			spec = &j.Spec.Template.Spec
		case "CronJob":
			var j batchv1.CronJob
			decode(t, o, &j)
			spec = &j.Spec.JobTemplate.Spec.Template.Spec
		case "ConfigMap":
			if o.GetName() == "pvrescue-config" {
				data, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
				cfg, err := config.Parse([]byte(data))
				if err != nil {
					t.Fatal(err)
				}
				if !wantImages[cfg.Helper.Image] || !strings.Contains(cfg.Helper.Image, "webhook") {
					t.Errorf("helper.image %s: want the webhook image at appVersion %s", cfg.Helper.Image, ch.Metadata.AppVersion)
				}
			}
		}
		if spec == nil {
			continue
		}
		pods++
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if !wantImages[c.Image] {
				t.Errorf("%s %s container %s: image %s, want one tagged appVersion %s", o.GetKind(), o.GetName(), c.Name, c.Image, ch.Metadata.AppVersion)
			}
		}
		if d := cmp.Diff([]corev1.LocalObjectReference{{Name: "my-registry"}}, spec.ImagePullSecrets); d != "" {
			t.Errorf("%s %s imagePullSecrets (-want +got):\n%s", o.GetKind(), o.GetName(), d)
		}
	}
	if pods != 4 {
		t.Errorf("checked %d pod templates, want 4 (webhook, agent, bootstrap Job and CronJob)", pods)
	}
}

// A wrong value fails `helm install/upgrade/template` at values.schema.json with the path of the
// value and what is allowed; the template's own checks say the same when the schema is skipped
// (`--skip-schema-validation`).
func TestBadValuesFail(t *testing.T) {
	for _, tc := range []struct{ values, schema, template string }{
		{`tls: {mode: bogus}`, "at '/tls/mode': value must be one of 'cert-manager', 'bootstrap', 'existingSecret'", "tls.mode must be"},
		{`tls: {mode: existingSecret}`, "at '/tls/existingSecret/name': minLength: got 0, want 1", "tls.existingSecret.name is required"},
		{`tls: {mode: existingSecret, existingSecret: {name: x}}`, "at '/tls/existingSecret/caBundle': '' does not match pattern", "tls.existingSecret.caBundle"},
		{`webhook: {failurePolicy: Sometimes}`, "at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'", "webhook.failurePolicy must be"},
		{`webhook: {timeoutSeconds: 31}`, "at '/webhook/timeoutSeconds': maximum: got 31, want 30", "webhook.timeoutSeconds must be within 1..30"},
		{`namespace: {create: "yes"}`, "at '/namespace/create': got string, want boolean", ""},
		{`agent: {hostPID: "false"}`, "at '/agent/hostPID': got string, want boolean", ""},
		{`agent: {image: {tag: "v1:2"}}`, "at '/agent/image/tag'", ""},
		{`webhook: {image: {repository: "registry.example/pvrescue-webhook:v1"}}`, "at '/webhook/image/repository'", ""},
		{`webhook: {image: {pullPolicy: Sometimes}}`, "at '/webhook/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'", ""},
		{`imagePullSecrets: [my-registry]`, "at '/imagePullSecrets/0': got string, want object", ""},
		{`webhok: {replicas: 3}`, "additional properties 'webhok' not allowed", ""},
		{`config: {helper: {imagePullPolicy: Sometimes}}`, "at '/config/helper/imagePullPolicy'", ""},
	} {
		v := map[string]any{}
		if err := yaml.Unmarshal([]byte(tc.values), &v); err != nil {
			t.Fatal(err)
		}
		_, err := charts.RenderFiles(load(t), v, charts.DefaultRelease())
		if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.schema) {
			t.Errorf("values %s: error %v, want the schema's message containing %q", tc.values, err, tc.schema)
		}
		if tc.template == "" {
			continue
		}
		noSchema := load(t)
		noSchema.Schema = nil
		_, err = charts.RenderFiles(noSchema, v, charts.DefaultRelease())
		if err == nil || !strings.Contains(err.Error(), tc.template) {
			t.Errorf("values %s without the schema: error %v, want one containing %q", tc.values, err, tc.template)
		}
	}
}

// Every value set of the golden files passes the schema, and so does every key of values.yaml
// (the schema forbids unknown keys, so a value added to values.yaml must be added to it too).
func TestSchemaAcceptsDefaults(t *testing.T) {
	ch := load(t)
	if len(ch.Schema) == 0 {
		t.Fatal("chart has no values.schema.json")
	}
	for name := range cases {
		if _, err := charts.RenderFiles(ch, values(t, name), charts.DefaultRelease()); err != nil {
			t.Errorf("values %s: %v", name, err)
		}
	}
	// What the e2e suite's Helm install and upgrade pass (e2e/stack.HelmValues and helm_e2e_test.go):
	// images in a local registry with a port, TLS bootstrap, a changed timeout and cpu request.
	e2e := `
namespace: {create: false}
webhook:
  image: {repository: 127.0.0.1:40123/pvrescue/pvrescue-webhook, tag: e2e}
  timeoutSeconds: 10
  resources: {requests: {cpu: 60m}}
agent:
  image: {repository: 127.0.0.1:40123/pvrescue/pvrescue-agent, tag: e2e}
tls: {mode: bootstrap}
imagePullSecrets: [{name: my-registry}]
config:
  helper: {image: 127.0.0.1:40123/pvrescue/pvrescue-helper:e2e}
`
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(e2e), &v); err != nil {
		t.Fatal(err)
	}
	if _, err := charts.RenderFiles(ch, v, charts.DefaultRelease()); err != nil {
		t.Errorf("e2e values: %v", err)
	}
}

// The bootstrap Job and CronJob run the webhook binary's `certs bootstrap` against the release
// namespace with RBAC for exactly its two Secrets and the webhook configuration.
func TestBootstrapMode(t *testing.T) {
	objs := render(t, values(t, "bootstrap"), charts.DefaultRelease())
	var job batchv1.Job
	find(t, objs, "Job", "pvrescue-certs-bootstrap-1", &job)
	// Not a hook: helm install --wait waits for the webhook, whose pods need the Secret this Job
	// writes, before any post-install hook runs.
	if got, ok := job.Annotations[charts.AnnotationHook]; ok {
		t.Errorf("bootstrap Job is a %q hook: helm install --wait would never run it", got)
	}
	c := job.Spec.Template.Spec.Containers[0]
	if d := cmp.Diff([]string{"certs", "bootstrap", "--namespace=pvrescue-system"}, c.Args); d != "" {
		t.Errorf("bootstrap args (-want +got):\n%s", d)
	}
	var cj batchv1.CronJob
	find(t, objs, "CronJob", "pvrescue-certs", &cj)
	if cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image != c.Image {
		t.Errorf("CronJob and Job images differ")
	}
	var role rbacv1.Role
	find(t, objs, "Role", "pvrescue-certs", &role)
	if d := cmp.Diff([]string{"pvrescue-ca", "pvrescue-webhook-tls"}, role.Rules[1].ResourceNames); d != "" {
		t.Errorf("Role resourceNames (-want +got):\n%s", d)
	}
	var d appsv1.Deployment
	find(t, objs, "Deployment", "pvrescue-webhook", &d)
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "serving-cert" && v.Secret.SecretName != "pvrescue-webhook-tls" {
			t.Errorf("webhook mounts %s, bootstrap writes pvrescue-webhook-tls", v.Secret.SecretName)
		}
	}
	for _, o := range objs {
		if o.GetAPIVersion() == "cert-manager.io/v1" {
			t.Errorf("bootstrap mode renders cert-manager object %s %s", o.GetKind(), o.GetName())
		}
	}
}
