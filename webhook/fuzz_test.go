package webhook

import (
	"encoding/json"
	"path/filepath"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FuzzAdmission posts random bodies to the webhook. Whatever the body, the answer is an
// AdmissionReview; a refusal carries a 4xx code; an allowed patch applies to the request's pod and
// yields a pod that a second admission leaves alone (idempotency).
func FuzzAdmission(f *testing.F) {
	files, _ := filepath.Glob("testdata/golden/*.yaml")
	var objs []client.Object
	for _, file := range files {
		_, o := loadCase(f, file)
		objs = append(objs, o...)
		f.Add(review("Pod", "pods", "CREATE", "apps", podJSON(f, file)))
	}
	f.Add([]byte(""))
	f.Add([]byte("{"))
	f.Add([]byte("\xff\xfe garbage"))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"request":null}`))
	f.Add([]byte(`[1,2,3]`))
	f.Add(review("ConfigMap", "configmaps", "CREATE", "apps", []byte(`{"apiVersion":"v1","kind":"ConfigMap"}`)))
	f.Add(review("Pod", "pods", "CREATE", "apps", []byte(`{"apiVersion":"v1","kind":"Pod","spec":{"volumes":[{"name":"x","csi":null}]}}`)))
	f.Add(review("Pod", "pods", "CREATE", "apps", []byte(`{"apiVersion":"v1","kind":"Pod","spec":{"volumes":[{"name":"pvrescue","hostPath":{"path":"/"}},{"name":"b","persistentVolumeClaim":{"claimName":"bucket"}}],"containers":[{"name":"a","volumeMounts":[{"name":"b","mountPath":"/pvrescue"}]}]}}`)))

	wh := NewWebhook(newDefaulter(objs...), nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		r := serve(t, wh, body).Response
		if r.Result == nil {
			t.Fatalf("response without result")
		}
		if !r.Allowed {
			if r.Result.Code < 400 || r.Result.Code > 499 {
				t.Fatalf("refusal with code %d (%s), want 4xx", r.Result.Code, r.Result.Message)
			}
			return
		}
		if len(r.Patch) == 0 {
			return
		}
		var ar struct {
			Request struct {
				Namespace string          `json:"namespace"`
				Object    json.RawMessage `json:"object"`
			} `json:"request"`
		}
		if err := json.Unmarshal(body, &ar); err != nil {
			t.Fatalf("a patch for a body that is not JSON: %v", err)
		}
		patch, err := jsonpatch.DecodePatch(r.Patch)
		if err != nil {
			t.Fatalf("undecodable patch: %v", err)
		}
		out, err := patch.Apply(ar.Request.Object)
		if err != nil {
			t.Fatalf("patch does not apply: %v\n%s", err, r.Patch)
		}
		var pod corev1.Pod
		if err := json.Unmarshal(out, &pod); err != nil {
			t.Fatalf("patched object is not a pod: %v", err)
		}
		r2 := serve(t, wh, review("Pod", "pods", "CREATE", ar.Request.Namespace, out)).Response
		if !r2.Allowed || len(r2.Patch) > 0 {
			t.Fatalf("second admission not idempotent: allowed=%v patch=%s", r2.Allowed, r2.Patch)
		}
	})
}
