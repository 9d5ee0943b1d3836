package webhook

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// panickingLookup fails the way a bug in classification would.
type panickingLookup struct{}

func (panickingLookup) PVC(context.Context, string, string) (*corev1.PersistentVolumeClaim, error) {
	panic("lookup bug")
}

func (panickingLookup) StorageClass(context.Context, string) (*storagev1.StorageClass, error) {
	panic("lookup bug")
}

// A panic while admitting a pod decoded by Webhook is recovered as the framework recovers it:
// the same 500 answer, with the request's UID.
func TestServeHTTPRecoversPanicAsTheFramework(t *testing.T) {
	cfg := testConfig()
	d := &Defaulter{Config: cfg, Classifier: &Classifier{Config: cfg, Lookup: panickingLookup{}}, Namespace: "pvrescue-system"}
	pair := servePair{ours: NewWebhook(d, nil), framework: &admission.Webhook{Handler: NewHandler(d, nil)}}
	body := review("Pod", "pods", "CREATE", "apps", podJSON(t, "testdata/golden/several-containers.yaml"))
	a := pair.compare(t, "application/json", func() io.Reader { return bytes.NewReader(body) })
	if a.Code != http.StatusOK || !strings.Contains(a.Body, `"code":500`) || !strings.Contains(a.Body, "lookup bug") || !strings.Contains(a.Body, `"uid":"u1"`) {
		t.Errorf("want the framework's recovered 500 answer with the request's UID, got %d %s", a.Code, a.Body)
	}
}

// The request logger carries the framework's request values where the handler logs (V(1)),
// and is the plain logger below that, where the handler writes nothing.
func TestRequestLogger(t *testing.T) {
	req := &admission.Request{}
	req.UID, req.Namespace, req.Name = "u1", "apps", "p"
	for _, verbosity := range []int{0, 1} {
		var lines []string
		base := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: verbosity})
		requestLogger(base, req).Info("x")
		want := verbosity >= 1
		if got := len(lines) == 1 && strings.Contains(lines[0], `"requestID"="u1"`); got != want {
			t.Errorf("verbosity %d: request values attached = %v, want %v (%q)", verbosity, got, want, lines)
		}
	}
}
