package webhook

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Benchmarks of the admission hot paths, benchstat-readable (make bench).

func BenchmarkClassify(b *testing.B) {
	pod, objs := loadCase(b, "testdata/golden/several-containers.yaml")
	m := newMutator(objs...)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.Classifier.Classify(ctx, "apps", pod)
	}
}

func BenchmarkMutate(b *testing.B) {
	for _, name := range []string{"local-block", "s3-pvc", "several-containers", "already-mutated", "no-pvc"} {
		b.Run(name, func(b *testing.B) {
			pod, objs := loadCase(b, "testdata/golden/"+name+".yaml")
			m := newMutator(objs...)
			cls := m.Classifier.Classify(context.Background(), "apps", pod)
			b.ReportAllocs()
			for b.Loop() {
				Mutate(pod.DeepCopy(), cls, m.Config)
			}
		})
	}
}

// BenchmarkMutateAdmission is one whole admission: HTTP body decode, classification, mutation,
// JSON patch and response encoding.
func BenchmarkMutateAdmission(b *testing.B) {
	file := "testdata/golden/several-containers.yaml"
	_, objs := loadCase(b, file)
	body := review("Pod", "pods", "CREATE", "apps", podJSON(b, file))
	wh := NewWebhook(newMutator(objs...), nil)
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
