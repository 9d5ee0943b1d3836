package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
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

func (panickingLookup) PV(context.Context, string, bool) (*corev1.PersistentVolume, error) {
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

// Answers are built in pooled buffers: concurrent admissions of different pods must each get
// their own answer, byte for byte the one a lone admission gets.
func TestServeHTTPConcurrentAnswersAreTheirOwn(t *testing.T) {
	pair, bodies := newServePair(t)
	type want struct{ body, answer []byte }
	var wants []want
	for _, b := range bodies {
		a := post(pair.ours, "application/json", bytes.NewReader(b))
		if strings.Contains(a.Body, `"patch":"`) {
			wants = append(wants, want{b, []byte(a.Body)})
		}
	}
	if len(wants) < 5 {
		t.Fatalf("only %d bodies are patched; want several different answers", len(wants))
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				w := wants[(g+i)%len(wants)]
				if a := post(pair.ours, "application/json", bytes.NewReader(w.body)); a.Body != string(w.answer) {
					errs <- fmt.Sprintf("goroutine %d, request %d: answer differs from the lone one:\n got %.300s\nwant %.300s", g, i, a.Body, w.answer)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
