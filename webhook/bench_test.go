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
