package gobench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/pvrescue/pvrescue/hack/bench/workload"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/sidecar"
	"github.com/pvrescue/pvrescue/webhook"
)

func defaulter(b *testing.B) (*webhook.Defaulter, *config.Config) {
	b.Helper()
	cfg := config.Default()
	objs, err := workload.Objects(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return &webhook.Defaulter{Config: cfg, Namespace: "pvrescue-system",
		Classifier: &webhook.Classifier{Config: cfg, Lookup: webhook.NewStaticLookup(objs...)}}, cfg
}

func BenchmarkClassify4PVC(b *testing.B) {
	m, _ := defaulter(b)
	pod := workload.FourPVCPod()
	ctx := context.Background()
	var c webhook.Classification
	for b.Loop() {
		c = m.Classifier.Classify(ctx, workload.Namespace, pod)
	}
	// Two block devices and one bucket must be recognised, or the benchmark measures a miss.
	if !c.Is(workload.ClaimBlock0, webhook.KindLocalBlock) || !c.Is(workload.ClaimS3, webhook.KindS3) {
		b.Fatalf("classification = %+v", c)
	}
}

func BenchmarkInject4PVC(b *testing.B) {
	m, cfg := defaulter(b)
	orig := workload.FourPVCPod()
	cls := m.Classifier.Classify(context.Background(), workload.Namespace, orig)
	var res webhook.Injection
	for b.Loop() {
		pod := orig.DeepCopy()
		res = webhook.Inject(pod, cls, cfg)
	}
	if !res.Injected() {
		b.Fatal("nothing injected")
	}
}

func BenchmarkDeepCopy4PVC(b *testing.B) {
	// The copy in BenchmarkInject4PVC, alone, to subtract it.
	orig := workload.FourPVCPod()
	for b.Loop() {
		_ = orig.DeepCopy()
	}
}

type noop struct{}

func (noop) Default(context.Context, *corev1.Pod) error { return nil }

// BenchmarkHandler runs the whole admission handler (decode, classify, mutate, JSON patch) beside
// the no-op defaulter on the same framework: the floor.
func BenchmarkHandler(b *testing.B) {
	m, _ := defaulter(b)
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme) // built-in group cannot fail
	handlers := []struct {
		name string
		h    admission.Handler
	}{
		{"floor", admission.WithDefaulter[*corev1.Pod](scheme, noop{}).Handler},
		{"pvrescue", webhook.NewHandler(m, nil)},
	}
	pods := []struct {
		name string
		pod  *corev1.Pod
	}{{"4pvc", workload.FourPVCPod()}, {"64KB", workload.ManagedFieldsPod(64 << 10)}, {"100vol", workload.HundredVolumePod()}}
	for _, p := range pods {
		req, err := workload.ReviewRequest(p.pod)
		if err != nil {
			b.Fatal(err)
		}
		for _, h := range handlers {
			b.Run(fmt.Sprintf("pod=%s/handler=%s", p.name, h.name), func(b *testing.B) {
				var resp admission.Response
				b.SetBytes(int64(len(req.Object.Raw)))
				// Each call is timed too, for the p99 (the target is on the tail).
				lat := make([]time.Duration, 0, 1024)
				for b.Loop() {
					start := time.Now()
					resp = h.h.Handle(context.Background(), admission.Request{AdmissionRequest: *req})
					lat = append(lat, time.Since(start))
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[(len(lat)*99+99)/100-1].Nanoseconds()), "p99-ns")
				if !resp.Allowed || resp.Result != nil && resp.Result.Code != http.StatusOK {
					b.Fatalf("response %+v", resp.Result)
				}
				if (h.name == "pvrescue") != (len(resp.Patches) > 0) {
					b.Fatalf("%s: %d patch operations", h.name, len(resp.Patches))
				}
			})
		}
	}
}

func BenchmarkGuardInspect16(b *testing.B) {
	devs := sidecar.FakeDevices{}
	o := sidecar.NewGuardOptions()
	for i := 0; i < 16; i++ {
		p := fmt.Sprintf("/dev/data%d", i)
		size := int64(64 << 20)
		if i%2 == 1 {
			size = 512
		}
		devs[p] = sidecar.FakeDevice{Size: size}
		o.Devices = append(o.Devices, sidecar.DeviceSpec{Path: p, Claim: fmt.Sprintf("claim-%d", i)})
	}
	var r sidecar.Report
	for b.Loop() {
		r = sidecar.Inspect(devs, o)
	}
	fakes := 0
	for _, d := range r.Devices {
		if d.Fake {
			fakes++
		}
	}
	if fakes != 8 {
		b.Fatalf("%d fakes, want 8", fakes)
	}
}
