package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	jsonpatch "gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/pvrescue/pvrescue/internal/config"
)

// Golden files: testdata/golden/<case>.yaml holds cluster objects and one Pod; <case>.golden.json
// holds the outcome, warnings and mutated pod. UPDATE_GOLDEN=1 rewrites them.

func testConfig() *config.Config {
	cfg := config.Default()
	cfg.Helper.Image = "example.test/pvrescue-webhook:test"
	return cfg
}

type golden struct {
	Result   string                         `json:"result"`
	Reason   string                         `json:"reason"`
	Warnings []string                       `json:"warnings"`
	Patch    []jsonpatch.JsonPatchOperation `json:"patch"`
	Pod      *corev1.Pod                    `json:"pod"`
}

func loadCase(t testing.TB, file string) (*corev1.Pod, []client.Object) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	var objs []client.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var obj client.Object
		switch tm.Kind {
		case "Pod":
			pod = &corev1.Pod{}
			obj = pod
		case "PersistentVolumeClaim":
			obj = &corev1.PersistentVolumeClaim{}
		case "PersistentVolume":
			obj = &corev1.PersistentVolume{}
		case "StorageClass":
			obj = &storagev1.StorageClass{}
		default:
			t.Fatalf("%s: unexpected kind %q", file, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if obj != client.Object(pod) {
			objs = append(objs, obj)
		}
	}
	if pod == nil {
		t.Fatalf("%s: no Pod", file)
	}
	return pod, objs
}

func newDefaulter(objs ...client.Object) *Defaulter {
	cfg := testConfig()
	return &Defaulter{Config: cfg, Classifier: &Classifier{Config: cfg, Lookup: NewStaticLookup(objs...)}, Namespace: "pvrescue-system"}
}

func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range files {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			pod, objs := loadCase(t, in)
			m := newDefaulter(objs...)
			ctx := context.Background()

			got := pod.DeepCopy()
			o := m.Default(ctx, pod.Namespace, got)

			// Decide (the admission's path) answers exactly as Default and leaves the pod alone.
			untouched := pod.DeepCopy()
			if d := cmp.Diff(o, m.Decide(ctx, pod.Namespace, untouched)); d != "" {
				t.Errorf("Decide differs from Default (-default +decide):\n%s", d)
			}
			if d := cmp.Diff(pod, untouched); d != "" {
				t.Errorf("Decide changed the pod (-in +out):\n%s", d)
			}
			g := golden{Result: o.Result, Reason: o.Reason, Warnings: o.Warnings, Patch: o.Patch, Pod: got}
			out, err := json.MarshalIndent(g, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, '\n')
			goldenFile := strings.TrimSuffix(in, ".yaml") + ".golden.json"
			if os.Getenv("UPDATE_GOLDEN") == "1" {
				if err := os.WriteFile(goldenFile, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(goldenFile)
			if err != nil {
				t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
			}
			if !bytes.Equal(want, out) {
				t.Errorf("%s is stale (UPDATE_GOLDEN=1 go test ./webhook/ -run TestGolden refreshes it); diff -want +got:\n%s",
					goldenFile, cmp.Diff(string(want), string(out)))
			}

			if strings.HasPrefix(name, "already-mutated") {
				if d := cmp.Diff(pod, got); d != "" {
					t.Errorf("an already-mutated pod was changed (-in +out):\n%s", d)
				}
			}

			// The patch alone, applied to the input's JSON, gives the golden pod.
			if d := cmp.Diff(got, applyPatch(t, pod, o.Patch)); d != "" {
				t.Errorf("the patch applied to the input differs from the golden pod (-golden +patched):\n%s", d)
			}

			// Idempotency: mutating the output again records no operation, changes nothing and says the same.
			again := got.DeepCopy()
			o2 := m.Default(ctx, pod.Namespace, again)
			if d := cmp.Diff(got, again); d != "" {
				t.Errorf("second mutation changed the pod (-first +second):\n%s", d)
			}
			if len(o2.Patch) != 0 {
				t.Errorf("second mutation recorded operations: %+v", o2.Patch)
			}
			if d := cmp.Diff(o.Warnings, o2.Warnings); d != "" {
				t.Errorf("second mutation warned differently:\n%s", d)
			}

			// The admission path (decode, defaulter, JSON patch) yields the same pod.
			patched, warnings := admitThroughHandler(t, m, pod)
			if d := cmp.Diff(got, patched); d != "" {
				t.Errorf("patched pod differs from Default's (-default +patch):\n%s", d)
			}
			if d := cmp.Diff(o.Warnings, warnings); d != "" {
				t.Errorf("handler warnings differ (-mutate +handler):\n%s", d)
			}
		})
	}
}

// applyPatch applies ops to the JSON of pod, as the API server does, and decodes the result.
func applyPatch(t testing.TB, pod *corev1.Pod, ops []jsonpatch.JsonPatchOperation) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	out := raw
	if len(ops) > 0 {
		p, err := json.Marshal(ops)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := jsonpatchapply.DecodePatch(p)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = patch.Apply(raw); err != nil {
			t.Fatalf("apply patch: %v\n%s", err, p)
		}
	}
	got := &corev1.Pod{}
	if err := json.Unmarshal(out, got); err != nil {
		t.Fatal(err)
	}
	return got
}

// admitThroughHandler sends pod through the admission handler and applies the returned patch.
func admitThroughHandler(t testing.TB, m *Defaulter, pod *corev1.Pod) (*corev1.Pod, []string) {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(m, nil)
	resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "uid-1",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: pod.Namespace,
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}})
	if !resp.Allowed {
		t.Fatalf("not allowed: %+v", resp.Result)
	}
	out := raw
	if len(resp.Patches) > 0 {
		p, err := json.Marshal(resp.Patches)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := jsonpatchapply.DecodePatch(p)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = patch.Apply(raw); err != nil {
			t.Fatalf("apply patch: %v", err)
		}
	}
	got := &corev1.Pod{}
	if err := json.Unmarshal(out, got); err != nil {
		t.Fatal(err)
	}
	return got, resp.Warnings
}

// A missing PV and a PV bound to another claim get the same answer, word for word (outcome,
// warnings, patch, status annotation): a tenant's claim may name any PV, and a different answer
// would tell it which PV names exist.
func TestGoldenMissingAndForeignPVAnswerAlike(t *testing.T) {
	answer := func(file string) []byte {
		t.Helper()
		pod, objs := loadCase(t, file)
		o := newDefaulter(objs...).Default(context.Background(), pod.Namespace, pod)
		out, err := json.MarshalIndent(golden{Result: o.Result, Reason: o.Reason, Warnings: o.Warnings, Patch: o.Patch, Pod: pod}, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	missing, foreign := answer("testdata/golden/s3-missing-pv.yaml"), answer("testdata/golden/s3-foreign-pv.yaml")
	if !bytes.Equal(missing, foreign) {
		t.Errorf("a missing PV and a foreign PV are answered differently (-missing +foreign):\n%s", cmp.Diff(string(missing), string(foreign)))
	}
	for _, f := range []string{"s3-missing-pv", "s3-foreign-pv"} {
		if b, err := os.ReadFile("testdata/golden/" + f + ".golden.json"); err != nil || !bytes.Equal(bytes.TrimSuffix(b, []byte("\n")), foreign) {
			t.Errorf("testdata/golden/%s.golden.json is not the one answer (%v)", f, err)
		}
	}
}
