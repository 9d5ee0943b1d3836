package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"
)

// maxRequestSize is controller-runtime's limit on an admission body (two 3 MB objects and the rest).
const maxRequestSize = 7 << 20

// Webhook serves admissions over HTTP as controller-runtime's admission.Webhook does, with the
// same responses byte for byte, but decodes a pod CREATE once: the framework scans the body
// three times (its kind, the review with the pod copied as raw bytes, then the pod), which was
// most of the cost of a large pod. Any request it is not sure of — not a v1 or v1beta1 review of
// a v1 pod CREATE with an object, a body that does not decode, a read error, a body over the
// limit, another content type — goes to the framework unchanged.
type Webhook struct {
	handler   *Handler
	framework *admission.Webhook
	// decoded is the framework's Handle around the handler for a pod decoded here (it comes in
	// the context): its panic recovery, request logger and response completion.
	decoded *admission.Webhook
	log     logr.Logger
}

var _ http.Handler = &Webhook{}

// NewWebhook wraps the handler for an HTTP server (malformed bodies become 400 responses there).
func NewWebhook(d *Defaulter, metrics *Metrics) *Webhook {
	h := NewHandler(d, metrics)
	w := &Webhook{handler: h, framework: &admission.Webhook{Handler: h}, log: logf.Log.WithName("admission")}
	w.decoded = &admission.Webhook{Handler: admission.HandlerFunc(w.admitDecoded), LogConstructor: requestLogger}
	return w
}

// requestLogger is the framework's request logger where the handler logs (V(1) and finer);
// below that the handler writes nothing, so the request's values are not attached.
func requestLogger(base logr.Logger, req *admission.Request) logr.Logger {
	if !base.V(1).Enabled() {
		return base
	}
	return admission.DefaultLogConstructor(base, req)
}

// decodedRequest is what ServeHTTP hands admitDecoded through the context.
type decodedRequest struct {
	pod *admissionPod
	// patch is a pooled buffer the patch is encoded into; ServeHTTP returns it to the pool
	// once the answer is written.
	patch *[]byte
}

type decodedRequestKey struct{}

// admitDecoded answers for the pod ServeHTTP decoded, with the patch already encoded, which
// leaves the framework's Complete nothing to encode. (A patch that fails to encode here is left
// to Complete, which answers the error as before.)
func (w *Webhook) admitDecoded(ctx context.Context, req admission.Request) admission.Response {
	dr, _ := ctx.Value(decodedRequestKey{}).(*decodedRequest)
	resp := w.handler.admit(ctx, req, dr.pod)
	if len(resp.Patches) > 0 {
		if raw, err := appendPatch(*dr.patch, resp.Patches); err == nil {
			*dr.patch = raw // the grown buffer goes back to the pool
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType, resp.Patches = raw, &pt, nil
		}
	}
	return resp
}

// podReview is an AdmissionReview whose object is decoded as the pod the handler reads; the
// request's other raw objects are skipped (the handler never reads them).
type podReview struct {
	metav1.TypeMeta `json:",inline"`
	Request         *struct {
		admissionv1.AdmissionRequest `json:",inline"`
		// These shadow the embedded request's fields of the same JSON names.
		Object    *admissionPod `json:"object"`
		OldObject skipJSON      `json:"oldObject"`
		Options   skipJSON      `json:"options"`
	} `json:"request"`
}

// Review versions the framework decodes into the same v1 type; anything else goes to it.
var (
	reviewV1      = admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
	reviewV1beta1 = schema.GroupVersionKind{Group: admissionv1.GroupName, Version: "v1beta1", Kind: "AdmissionReview"}
)

func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		w.framework.ServeHTTP(rw, r)
		return
	}
	buf := bodyBufs.get()
	defer bodyBufs.put(buf)
	body, rest := readBody(r, *buf)
	*buf = body
	if rest != nil || r.Header.Get("Content-Type") != "application/json" {
		r.Body = rest
		if r.Body == nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		w.framework.ServeHTTP(rw, r)
		return
	}
	defer func() { _ = r.Body.Close() }() // read to the end; as the framework does
	var rev podReview
	err := kjson.UnmarshalCaseSensitivePreserveInts(body, &rev)
	gvk := rev.GroupVersionKind()
	if err != nil || gvk != reviewV1 && gvk != reviewV1beta1 || rev.Request == nil || rev.Request.Object == nil ||
		rev.Request.Kind != metav1.GroupVersionKind(podKind) || rev.Request.SubResource != "" || rev.Request.Operation != admissionv1.Create {
		r.Body = io.NopCloser(bytes.NewReader(body))
		w.framework.ServeHTTP(rw, r)
		return
	}
	req := admission.Request{AdmissionRequest: rev.Request.AdmissionRequest}
	if log := w.log.V(5); log.Enabled() {
		admission.DefaultLogConstructor(w.log, &req).V(5).Info("received request")
	}
	dr := &decodedRequest{pod: rev.Request.Object, patch: patchBufs.get()}
	resp := w.decoded.Handle(context.WithValue(r.Context(), decodedRequestKey{}, dr), req)
	ar := admissionv1.AdmissionReview{Response: &resp.AdmissionResponse}
	ar.SetGroupVersionKind(gvk)
	writeReview(rw, ar)
	patchBufs.put(dr.patch) // the answer, patch included, is written: nothing refers to it now
}

// writeReview writes ar as the framework does, with its fallback when the encoding fails.
func writeReview(w io.Writer, ar admissionv1.AdmissionReview) {
	// The bytes json.NewEncoder(w).Encode(ar) writes, in one Write as it does.
	buf := reviewBufs.get()
	b, err := appendReview(*buf, &ar)
	if err == nil {
		_, err = w.Write(b)
	}
	*buf = b
	reviewBufs.put(buf)
	// The named logger is made only when it logs: naming one costs allocations on every answer.
	if err != nil {
		log := logf.Log.WithName("admission")
		log.Error(err, "unable to encode and write the response")
		serverError := admission.Errored(http.StatusInternalServerError, err)
		if err = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{Response: &serverError.AdmissionResponse}); err != nil {
			log.Error(err, "still unable to encode and write the InternalServerError response")
		}
		return
	}
	if log := logf.Log.V(5); log.Enabled() {
		log = log.WithName("admission")
		res := ar.Response
		if res.Result != nil {
			log = log.WithValues("code", res.Result.Code, "reason", res.Result.Reason, "message", res.Result.Message)
		}
		log.Info("wrote response", "requestID", res.UID, "allowed", res.Allowed)
	}
}

// Scratch buffers, free again once their request is answered: nothing decoded from a body refers
// to its bytes (strings and byte slices are copies; the framework reads its own copy), the patch
// is encoded into the answer, and the writer copies the answer. A rare huge one is not kept.
var (
	bodyBufs   = bufPool{max: 1 << 20}
	patchBufs  = bufPool{max: 256 << 10}
	reviewBufs = bufPool{max: 256 << 10}
)

type bufPool struct {
	pool sync.Pool
	max  int
}

// get returns an empty buffer.
func (p *bufPool) get() *[]byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

func (p *bufPool) put(b *[]byte) {
	if cap(*b) <= p.max {
		*b = (*b)[:0]
		p.pool.Put(b)
	}
}

// readBody reads the whole body into buf, grown once to the Content-Length (io.ReadAll grows
// by doubling from 512 bytes). rest is nil when the body was read cleanly within the limit;
// otherwise it replays to the framework what was read, then the same error or the unread rest.
func readBody(r *http.Request, body []byte) ([]byte, io.ReadCloser) {
	if n := r.ContentLength; n > 0 && n < maxRequestSize && int(n) >= cap(body) {
		body = make([]byte, 0, n+1) // room to see EOF without growing
	}
	lr := io.LimitReader(r.Body, maxRequestSize)
	for {
		if len(body) == cap(body) {
			body = append(body, 0)[:len(body)]
		}
		n, err := lr.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		switch {
		case err == io.EOF && len(body) >= maxRequestSize:
			return body, replay{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		case err == io.EOF:
			return body, nil
		case err != nil:
			return body, replay{io.MultiReader(bytes.NewReader(body), errReader{err}), r.Body}
		}
	}
}

// replay reads from its reader and closes the original body.
type replay struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
