package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	jsonpatch "gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/pvrescue/pvrescue/hack/bench/workload"
)

// servePair is Webhook beside the reference it must answer exactly as: the same Handler served
// by controller-runtime's own admission.Webhook.
type servePair struct {
	ours      *Webhook
	framework *admission.Webhook
}

func newServePair(t testing.TB) (servePair, map[string][]byte) {
	t.Helper()
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	bodies := map[string][]byte{}
	var objs []client.Object
	for _, file := range files {
		_, o := loadCase(t, file)
		objs = append(objs, o...)
		bodies["golden "+filepath.Base(file)] = review("Pod", "pods", "CREATE", "apps", podJSON(t, file))
	}
	bench, err := workload.Objects(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, bench...)
	for name, pod := range map[string]any{"4-PVC pod": workload.FourPVCPod(), "64 KB pod": workload.ManagedFieldsPod(64 << 10)} {
		raw, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		bodies[name] = review("Pod", "pods", "CREATE", workload.Namespace, raw)
	}
	d := newDefaulter(objs...)
	return servePair{ours: NewWebhook(d, nil), framework: &admission.Webhook{Handler: NewHandler(d, nil)}}, bodies
}

// answer is what an HTTP client sees.
type answer struct {
	Code   int
	Header http.Header
	Body   string
}

func post(h http.Handler, contentType string, body io.Reader) answer {
	req := httptest.NewRequest(http.MethodPost, Path, body)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{Code: rec.Code, Header: rec.Header(), Body: rec.Body.String()}
}

// compare fails when the two servers answer body differently.
func (p servePair) compare(t *testing.T, contentType string, body func() io.Reader) answer {
	t.Helper()
	want, got := post(p.framework, contentType, body()), post(p.ours, contentType, body())
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("answer differs from the framework's (-framework +ours):\n%s", d)
	}
	return got
}

// Webhook.ServeHTTP decodes a pod CREATE once instead of three times; every answer, on that path
// and off it, must be the framework's byte for byte.
func TestServeHTTPAnswersAsTheFramework(t *testing.T) {
	pair, bodies := newServePair(t)
	pod := podJSON(t, "testdata/golden/several-containers.yaml")
	var asMap map[string]any
	if err := json.Unmarshal(pod, &asMap); err != nil {
		t.Fatal(err)
	}
	withMeta := func(meta string) []byte {
		m := map[string]json.RawMessage{}
		for k, v := range asMap {
			if k != "metadata" {
				m[k], _ = json.Marshal(v)
			}
		}
		if meta != "" {
			m["metadata"] = json.RawMessage(meta)
		}
		b, _ := json.Marshal(m)
		return b
	}
	v1 := string(review("Pod", "pods", "CREATE", "apps", pod))
	for name, body := range map[string]string{
		"v1beta1 review":               strings.Replace(v1, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1),
		"other review version":         strings.Replace(v1, "admission.k8s.io/v1", "admission.k8s.io/v2", 1),
		"no apiVersion":                strings.Replace(v1, `"apiVersion":"admission.k8s.io/v1",`, "", 1),
		"no kind":                      strings.Replace(v1, `"kind":"AdmissionReview",`, "", 1),
		"leading space":                "  \n" + v1,
		"trailing garbage":             v1 + " x",
		"update":                       string(review("Pod", "pods", "UPDATE", "apps", pod)),
		"subresource":                  strings.Replace(v1, `"namespace":`, `"subResource":"status","namespace":`, 1),
		"excluded namespace":           string(review("Pod", "pods", "CREATE", "kube-system", pod)),
		"configmap kind":               string(review("ConfigMap", "configmaps", "CREATE", "apps", []byte(`{"apiVersion":"v1","kind":"ConfigMap"}`))),
		"pod kind, configmap object":   string(review("Pod", "pods", "CREATE", "apps", []byte(`{"apiVersion":"v1","kind":"ConfigMap"}`))),
		"object null":                  string(review("Pod", "pods", "CREATE", "apps", nil)),
		"object a string":              string(review("Pod", "pods", "CREATE", "apps", []byte(`"hello"`))),
		"object an array":              string(review("Pod", "pods", "CREATE", "apps", []byte(`[]`))),
		"object of wrong types":        string(review("Pod", "pods", "CREATE", "apps", []byte(`{"spec":{"volumes":5}}`))),
		"no metadata":                  string(review("Pod", "pods", "CREATE", "apps", withMeta(""))),
		"metadata null":                string(review("Pod", "pods", "CREATE", "apps", withMeta("null"))),
		"metadata empty":               string(review("Pod", "pods", "CREATE", "apps", withMeta("{}"))),
		"metadata managedFields only":  string(review("Pod", "pods", "CREATE", "apps", withMeta(`{"managedFields":[{"manager":"m"}]}`))),
		"metadata twice, null last":    strings.Replace(string(review("Pod", "pods", "CREATE", "apps", withMeta("{}"))), `"metadata":{}`, `"metadata":{},"metadata":null`, 1),
		"request null":                 `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`,
		"empty object":                 `{}`,
		"garbage":                      "\x00not json",
		"an array":                     `[1,2]`,
		"null":                         `null`,
		"user, dry run, old object":    strings.Replace(v1, `"namespace":`, `"userInfo":{"username":"u","groups":["g"],"extra":{"k":["v"]}},"dryRun":true,"oldObject":{"x":1},"options":{"kind":"CreateOptions"},"namespace":`, 1),
		"uid and name with HTML chars": strings.Replace(v1, `"uid":"u1"`, `"uid":"<u&1>","name":"a<b>"`, 1),
	} {
		bodies[name] = []byte(body)
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			a := pair.compare(t, "application/json", func() io.Reader { return bytes.NewReader(body) })
			if a.Code != http.StatusOK {
				t.Errorf("HTTP status %d", a.Code)
			}
			patchApplies(t, body, a)
		})
	}
	t.Run("a golden pod is patched", func(t *testing.T) {
		a := pair.compare(t, "application/json", func() io.Reader { return bytes.NewReader([]byte(v1)) })
		if !strings.Contains(a.Body, `"patch":"`) {
			t.Errorf("no patch: %s", a.Body)
		}
	})
	t.Run("other content type", func(t *testing.T) {
		pair.compare(t, "text/plain", func() io.Reader { return strings.NewReader(v1) })
	})
	t.Run("no content type", func(t *testing.T) {
		pair.compare(t, "", func() io.Reader { return strings.NewReader(v1) })
	})
	t.Run("empty body", func(t *testing.T) {
		pair.compare(t, "application/json", func() io.Reader { return http.NoBody })
	})
	t.Run("read error", func(t *testing.T) {
		pair.compare(t, "application/json", func() io.Reader {
			return io.MultiReader(strings.NewReader(v1[:100]), errReader{errors.New("connection reset")})
		})
	})
	t.Run("body over the limit", func(t *testing.T) {
		big := v1[:len(v1)-2] + `,"pad":"` + strings.Repeat("x", maxRequestSize) + `"}}`
		a := pair.compare(t, "application/json", func() io.Reader { return strings.NewReader(big) })
		if a.Code == http.StatusOK && !strings.Contains(a.Body, "too large") {
			t.Errorf("a body over the limit was served: %.200s", a.Body)
		}
	})
}

// patchApplies fails when the answer carries a patch that does not apply to the request's object.
func patchApplies(t *testing.T, body []byte, a answer) {
	t.Helper()
	var in, out admissionv1.AdmissionReview
	if err := json.Unmarshal([]byte(a.Body), &out); err != nil || out.Response == nil {
		t.Fatalf("answer is not an AdmissionReview (%v): %.200s", err, a.Body)
	}
	if len(out.Response.Patch) == 0 {
		return
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
		t.Fatalf("patched, but the request does not decode: %v", err)
	}
	p, err := jsonpatchapply.DecodePatch(out.Response.Patch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Apply(in.Request.Object.Raw); err != nil {
		t.Errorf("patch does not apply to the request's object: %v\n%s", err, out.Response.Patch)
	}
}

// FuzzServeHTTPAnswersAsTheFramework: for any body, Webhook answers as the framework does.
func FuzzServeHTTPAnswersAsTheFramework(f *testing.F) {
	pair, bodies := newServePair(f)
	for _, b := range bodies {
		f.Add(b)
	}
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		pair.compare(t, "application/json", func() io.Reader { return bytes.NewReader(body) })
	})
}

// marshalPatch gives the bytes json.Marshal gives through jsonpatch's own MarshalJSON.
func TestMarshalPatchMatchesJSONPatch(t *testing.T) {
	ops := []jsonpatch.JsonPatchOperation{
		{Operation: "add", Path: "/a", Value: nil},
		{Operation: "replace", Path: "/b", Value: nil},
		{Operation: "remove", Path: "/c"},
		{Operation: "remove", Path: "/c", Value: "kept"},
		{Operation: "add", Path: "/metadata/annotations/pvrescue.io~1status", Value: `{"x":"<&>"}` + "\u2028"},
		{Operation: "add", Path: "/spec/x", Value: map[string]any{"annotations": map[string]string{"k": "v"}}},
		{Operation: "add", Path: "/spec/containers/0/env/-", Value: []any{1, 2.5, true, nil}},
		{Operation: "test", Path: "/d", Value: 0},
	}
	files, _ := filepath.Glob("testdata/golden/*.yaml")
	for _, file := range files {
		pod, objs := loadCase(t, file)
		in := newDefaulter(objs...).Default(t.Context(), "apps", pod)
		ops = append(ops, in.Patch...)
	}
	want, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	got, err := marshalPatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("marshalPatch differs from json.Marshal:\n got %s\nwant %s", got, want)
	}
	if len(ops) < 50 {
		t.Errorf("only %d operations compared: the golden cases patched nothing?", len(ops))
	}
}
