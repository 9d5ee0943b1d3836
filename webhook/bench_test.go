package webhook

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/hack/bench/workload"
)

// Benchmarks of the admission hot paths, benchstat-readable (make bench).

func BenchmarkClassify(b *testing.B) {
	pod, objs := loadCase(b, "testdata/golden/several-containers.yaml")
	m := newDefaulter(objs...)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.Classifier.Classify(ctx, "apps", pod)
	}
}

func BenchmarkInject(b *testing.B) {
	for _, name := range []string{"local-block", "s3-pvc", "several-containers", "already-mutated", "no-pvc"} {
		b.Run(name, func(b *testing.B) {
			pod, objs := loadCase(b, "testdata/golden/"+name+".yaml")
			m := newDefaulter(objs...)
			cls := m.Classifier.Classify(context.Background(), "apps", pod)
			b.ReportAllocs()
			for b.Loop() {
				Inject(pod.DeepCopy(), cls, m.Config)
			}
		})
	}
}

// BenchmarkAdmission is one whole admission: HTTP body decode, classification, mutation,
// JSON patch and response encoding.
func BenchmarkAdmission(b *testing.B) {
	file := "testdata/golden/several-containers.yaml"
	_, objs := loadCase(b, file)
	body := review("Pod", "pods", "CREATE", "apps", podJSON(b, file))
	wh := NewWebhook(newDefaulter(objs...), nil)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		wh.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d", rec.Code)
		}
	}
}

// BenchmarkServeHTTP is one whole admission over the HTTP handler for the pods the load run of
// make bench sends (hack/bench/workload): the 4-PVC pod and the ~64 KB pod, most of it
// managedFields and annotations.
func BenchmarkServeHTTP(b *testing.B) {
	objs, err := workload.Objects(testConfig())
	if err != nil {
		b.Fatal(err)
	}
	wh := NewWebhook(newDefaulter(objs...), nil)
	for _, p := range []struct {
		name string
		pod  *corev1.Pod
	}{{"4pvc", workload.FourPVCPod()}, {"64KB", workload.ManagedFieldsPod(64 << 10)}} {
		body, err := workload.ReviewBody(p.pod)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var rec *httptest.ResponseRecorder
			cpu0 := processCPU(b)
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec = httptest.NewRecorder()
				wh.ServeHTTP(rec, req)
			}
			// CPU time (garbage collection included) is steadier than wall time on a shared machine.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"patch":`)) {
				b.Fatalf("status %d, body %.300s", rec.Code, rec.Body.Bytes())
			}
		})
	}
}
