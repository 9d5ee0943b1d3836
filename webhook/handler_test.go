package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// review wraps a raw object into an AdmissionReview body.
func review(kind, resource, op, ns string, object []byte) []byte {
	obj := "null"
	if object != nil {
		obj = string(object)
	}
	return fmt.Appendf(nil, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",`+
		`"kind":{"group":"","version":"v1","kind":%q},"resource":{"group":"","version":"v1","resource":%q},`+
		`"namespace":%q,"operation":%q,"object":%s}}`, kind, resource, ns, op, obj)
}

func podJSON(t testing.TB, file string) []byte {
	t.Helper()
	pod, _ := loadCase(t, file)
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// serve posts body to the webhook and decodes the AdmissionReview it answers with.
func serve(t testing.TB, h http.Handler, body []byte) admissionv1.AdmissionReview {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("response is not an AdmissionReview (%v): %q", err, rec.Body.String())
	}
	return out
}

func TestHandlerHTTP(t *testing.T) {
	pod, objs := loadCase(t, "testdata/golden/several-containers.yaml")
	raw, _ := json.Marshal(pod)
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	wh := NewWebhook(newDefaulter(objs...), metrics)

	cm := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)
	tests := []struct {
		name       string
		body       []byte
		allowed    bool
		code       int32
		msg        string // substring of the result message
		patched    bool
		warnings   int
		wantResult string
	}{
		{"pod create is mutated", review("Pod", "pods", "CREATE", "apps", raw), true, 200, "", true, 1, ResultInjected},
		{"update passes untouched", review("Pod", "pods", "UPDATE", "apps", raw), true, 200, "", false, 0, ResultSkipped},
		{"own namespace untouched", review("Pod", "pods", "CREATE", "pvrescue-system", raw), true, 200, "", false, 0, ResultSkipped},
		{"kube-system untouched", review("Pod", "pods", "CREATE", "kube-system", raw), true, 200, "", false, 0, ResultSkipped},
		{"non-pod kind", review("ConfigMap", "configmaps", "CREATE", "apps", cm), false, 400, "v1 Pods only", false, 0, ResultError},
		{"pod kind but configmap object", review("Pod", "pods", "CREATE", "apps", cm), false, 400, "", false, 0, ResultError},
		{"no object", review("Pod", "pods", "CREATE", "apps", nil), false, 400, "no pod object", false, 0, ResultError},
		{"object is not json", review("Pod", "pods", "CREATE", "apps", []byte(`"hello"`)), false, 400, "", false, 0, ResultError},
		{"garbage body", []byte("\x00not json"), false, 400, "", false, 0, ""},
		{"empty review", []byte(`{}`), false, 400, "v1 Pods only", false, 0, ResultError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := counterValue(t, metrics.Admissions.WithLabelValues(tt.wantResult, reasonFor(tt.wantResult)))
			r := serve(t, wh, tt.body).Response
			if r.Allowed != tt.allowed || r.Result == nil || r.Result.Code != tt.code {
				t.Fatalf("allowed=%v result=%+v, want allowed=%v code=%d", r.Allowed, r.Result, tt.allowed, tt.code)
			}
			if !strings.Contains(r.Result.Message, tt.msg) {
				t.Errorf("message %q does not contain %q", r.Result.Message, tt.msg)
			}
			if (len(r.Patch) > 0) != tt.patched {
				t.Errorf("patch = %s, want patched=%v", r.Patch, tt.patched)
			}
			if len(r.Warnings) != tt.warnings {
				t.Errorf("warnings = %q, want %d", r.Warnings, tt.warnings)
			}
			if tt.wantResult != "" && reasonFor(tt.wantResult) != "" {
				if after := counterValue(t, metrics.Admissions.WithLabelValues(tt.wantResult, reasonFor(tt.wantResult))); after != before+1 {
					t.Errorf("admissions{result=%s} went %v -> %v, want +1", tt.wantResult, before, after)
				}
			}
		})
	}
	var h dto.Metric
	if err := metrics.Latency.WithLabelValues(ResultInjected).(prometheus.Histogram).Write(&h); err != nil || h.GetHistogram().GetSampleCount() == 0 {
		t.Errorf("latency histogram recorded nothing for injected admissions (%v)", err)
	}
}

// reasonFor gives the reason the table's cases produce for a result ("" when it varies).
func reasonFor(result string) string {
	switch result {
	case ResultInjected:
		return ReasonInjected
	case ResultError:
		return ReasonBadRequest
	}
	return ""
}

func TestHandlerPatchIsValidAndIdempotent(t *testing.T) {
	raw := podJSON(t, "testdata/golden/several-containers.yaml")
	_, objs := loadCase(t, "testdata/golden/several-containers.yaml")
	wh := NewWebhook(newDefaulter(objs...), nil)
	r := serve(t, wh, review("Pod", "pods", "CREATE", "apps", raw)).Response
	patch, err := jsonpatch.DecodePatch(r.Patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(raw)
	if err != nil {
		t.Fatal(err)
	}
	// Reinvocation (reinvocationPolicy IfNeeded) on our own output must produce no patch.
	r2 := serve(t, wh, review("Pod", "pods", "CREATE", "apps", out)).Response
	if !r2.Allowed || len(r2.Patch) > 0 {
		t.Errorf("second admission patched again: %s", r2.Patch)
	}
}

// A pod carrying managedFields gets a patch that never touches them and that, applied to the
// original object, gives the same pod as for the pod without them.
func TestHandlerPatchKeepsManagedFields(t *testing.T) {
	_, objs := loadCase(t, "testdata/golden/several-containers.yaml")
	wh := NewWebhook(newDefaulter(objs...), nil)
	plain := podJSON(t, "testdata/golden/several-containers.yaml")

	var pod map[string]any
	if err := json.Unmarshal(plain, &pod); err != nil {
		t.Fatal(err)
	}
	managed := []any{map[string]any{
		"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
		"fieldsV1": map[string]any{"f:spec": map[string]any{"f:containers": map[string]any{}}},
	}}
	pod["metadata"].(map[string]any)["managedFields"] = managed
	withMF, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}

	apply := func(raw []byte) map[string]any {
		t.Helper()
		r := serve(t, wh, review("Pod", "pods", "CREATE", "apps", raw)).Response
		if !r.Allowed || len(r.Patch) == 0 {
			t.Fatalf("admission allowed=%v patch=%q", r.Allowed, r.Patch)
		}
		if bytes.Contains(r.Patch, []byte("managedFields")) {
			t.Errorf("patch touches managedFields: %s", r.Patch)
		}
		patch, err := jsonpatch.DecodePatch(r.Patch)
		if err != nil {
			t.Fatal(err)
		}
		out, err := patch.Apply(raw)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	got, want := apply(withMF), apply(plain)
	if diff := cmp.Diff(managed, got["metadata"].(map[string]any)["managedFields"]); diff != "" {
		t.Errorf("managedFields changed (-want +got):\n%s", diff)
	}
	delete(got["metadata"].(map[string]any), "managedFields")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mutated pod differs with managedFields present (-without +with):\n%s", diff)
	}
}

func TestConfigurationBuilder(t *testing.T) {
	a := NewMutatingWebhookConfiguration(ConfigurationOptions{CABundle: []byte("CA")})
	b := NewMutatingWebhookConfiguration(ConfigurationOptions{CABundle: []byte("CA")})
	ya, _ := yaml.Marshal(a)
	yb, _ := yaml.Marshal(b)
	if !bytes.Equal(ya, yb) {
		t.Fatal("builder is not deterministic")
	}
	w := a.Webhooks[0]
	if a.Name != "pvrescue-webhook" || w.ClientConfig.Service == nil || w.ClientConfig.Service.Name != "pvrescue-webhook" ||
		w.ClientConfig.Service.Namespace != "pvrescue-system" || *w.ClientConfig.Service.Path != Path || *w.ClientConfig.Service.Port != 443 {
		t.Errorf("client config: %+v", w.ClientConfig)
	}
	if *w.FailurePolicy != "Ignore" || *w.TimeoutSeconds != 5 || *w.ReinvocationPolicy != "IfNeeded" || *w.SideEffects != "None" {
		t.Errorf("policies: %s", ya)
	}
	if in := w.NamespaceSelector.MatchExpressions[0]; in.Key != "pvrescue.io/inject" || in.Operator != "In" || strings.Join(in.Values, ",") != "enabled" {
		t.Errorf("namespace opt-in: %+v", in)
	}
	ns := w.NamespaceSelector.MatchExpressions[1]
	if ns.Key != "kubernetes.io/metadata.name" || strings.Join(ns.Values, ",") != "kube-system,kube-public,kube-node-lease,pvrescue-system" {
		t.Errorf("namespace selector: %+v", w.NamespaceSelector)
	}
	if len(a.Annotations) != 0 {
		t.Errorf("annotations without CAInjectFrom: %v", a.Annotations)
	}
	u := NewMutatingWebhookConfiguration(ConfigurationOptions{Namespace: "other", URL: "https://127.0.0.1:9443" + Path, CAInjectFrom: "other/tls"})
	if u.Annotations[AnnotationInjectCAFrom] != "other/tls" {
		t.Errorf("inject-ca-from annotation: %v", u.Annotations)
	}
	if u.Webhooks[0].ClientConfig.Service != nil || *u.Webhooks[0].ClientConfig.URL != "https://127.0.0.1:9443"+Path {
		t.Errorf("URL client config: %+v", u.Webhooks[0].ClientConfig)
	}
	if v := u.Webhooks[0].NamespaceSelector.MatchExpressions[1].Values; v[len(v)-1] != "other" {
		t.Errorf("own namespace not excluded: %v", v)
	}
}

func TestHasCandidateVolumes(t *testing.T) {
	for _, tt := range []struct {
		vol  corev1.VolumeSource
		want bool
	}{
		{corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}, false},
		{corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{}}, true},
		{corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}, true},
		{corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{}}, true},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: tt.vol}}}}
		if got := HasCandidateVolumes(pod); got != tt.want {
			t.Errorf("HasCandidateVolumes(%+v) = %v, want %v", tt.vol, got, tt.want)
		}
	}
}

func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// The deployed manifest must be exactly what the builder produces (manifests/ is another
// package's file; this keeps the two from drifting).
func TestConfigurationMatchesManifest(t *testing.T) {
	data, err := os.ReadFile("../manifests/mutatingwebhookconfiguration.yaml")
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	var fromFile admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &fromFile); err != nil {
		t.Fatal(err)
	}
	built := NewMutatingWebhookConfiguration(ConfigurationOptions{CAInjectFrom: "pvrescue-system/pvrescue-webhook-tls"})
	if d := cmp.Diff(built, &fromFile); d != "" {
		t.Errorf("manifests/mutatingwebhookconfiguration.yaml differs from NewMutatingWebhookConfiguration (-builder +manifest):\n%s", d)
	}
}
