package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"
)

// Path is where the API server sends pod admissions.
const Path = "/mutate-v1-pod"

// ErrBadRequest marks admission requests this webhook cannot serve (not a v1 pod, no object).
var ErrBadRequest = errors.New("bad admission request")

// DefaultLookupTimeout bounds the API reads of one admission; it leaves headroom under the 5 s timeoutSeconds of the configuration.
const DefaultLookupTimeout = 3 * time.Second

// Handler is the admission handler: it checks the request, decodes the pod, runs the Defaulter
// and answers with the JSON patch of the operations it performed (never a diff of the whole pod),
// its warnings, and a metrics record.
type Handler struct {
	defaulter *Defaulter
	metrics   *Metrics
}

// NewHandler builds the admission handler; metrics may be nil.
func NewHandler(d *Defaulter, metrics *Metrics) *Handler {
	return &Handler{defaulter: d, metrics: metrics}
}

var podKind = corev1.SchemeGroupVersion.WithKind("Pod")

// Handle implements admission.Handler.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	return h.admit(ctx, req, nil)
}

// admit answers req; obj, when set, is req's object already decoded (Webhook.ServeHTTP).
func (h *Handler) admit(ctx context.Context, req admission.Request, obj *admissionPod) admission.Response {
	start := time.Now()
	in, resp := h.handle(ctx, req, obj)
	resp = resp.WithWarnings(in.Warnings...)
	h.metrics.observe(in, time.Since(start))
	if log := logr.FromContextOrDiscard(ctx).V(1); log.Enabled() {
		log.Info("admission", "namespace", req.Namespace, "name", req.Name,
			"result", in.Result, "reason", in.Reason, "operations", len(in.Patch), "warnings", len(in.Warnings))
	}
	return resp
}

func (h *Handler) handle(ctx context.Context, req admission.Request, obj *admissionPod) (Injection, admission.Response) {
	bad := func(format string, args ...any) (Injection, admission.Response) {
		err := fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
		return Injection{Result: ResultError, Reason: ReasonBadRequest}, admission.Errored(http.StatusBadRequest, err)
	}
	if req.Kind.Group != podKind.Group || req.Kind.Version != podKind.Version || req.Kind.Kind != podKind.Kind {
		return bad("this webhook admits v1 Pods only, got kind %q", req.Kind.String())
	}
	if req.SubResource != "" || req.Operation != admissionv1.Create {
		return Injection{Result: ResultSkipped, Reason: ReasonNotCreate}, admission.Allowed("pvrescue mutates pod creation only")
	}
	if obj == nil {
		if len(req.Object.Raw) == 0 {
			return bad("the request carries no pod object")
		}
		obj = &admissionPod{}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, obj); err != nil {
			return bad("decode the pod: %v", err)
		}
	}
	pod := &obj.Pod
	if obj.Metadata != nil {
		pod.ObjectMeta = obj.Metadata.ObjectMeta
	}
	if (pod.Kind != "" || pod.APIVersion != "") && (pod.Kind != podKind.Kind || pod.APIVersion != podKind.GroupVersion().String()) {
		return bad("the object is a %s %s, not a v1 Pod", pod.APIVersion, pod.Kind)
	}
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultLookupTimeout)
	defer cancel()
	in := h.defaulter.Decide(ctx, ns, pod)
	if len(in.Patch) == 0 {
		return in, admission.Allowed("")
	}
	// Without annotations the patch adds the map under metadata; a pod with no metadata at all
	// (the API server always sends it, other callers may not) needs metadata itself added.
	if obj.Metadata == nil {
		for i, op := range in.Patch {
			if op.Path == "/metadata/annotations" {
				in.Patch[i].Path, in.Patch[i].Value = "/metadata", map[string]any{"annotations": op.Value}
			}
		}
	}
	return in, admission.Patched("", in.Patch...)
}

// admissionPod is the part of a pod the handler decodes: managedFields (often most of a large
// pod's bytes, never looked at, never patched) and status are skipped, not decoded. The pod's
// kind, apiVersion and spec are decoded into Pod itself, which the handler then uses as is.
type admissionPod struct {
	// Pod receives the fields this struct does not shadow: kind, apiVersion and spec.
	corev1.Pod `json:",inline"`
	// Metadata is nil when the object has none, or null.
	Metadata *struct {
		metav1.ObjectMeta `json:",inline"`
		ManagedFields     skipJSON `json:"managedFields"`
	} `json:"metadata"`
	Status skipJSON `json:"status"`
}

// skipJSON accepts any JSON value and keeps nothing of it.
type skipJSON struct{}

func (*skipJSON) UnmarshalJSON([]byte) error { return nil }
