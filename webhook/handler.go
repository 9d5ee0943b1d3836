// Package webhook is pvrescue's mutating admission webhook: it classifies a pod's volumes and
// injects the guard, the helper, the S3 mount probe and mount propagation (see Mutate).
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// Path is where the API server sends pod admissions.
const Path = "/mutate-v1-pod"

// SystemNamespaces are never mutated, whatever the selectors say.
var SystemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// ErrBadRequest marks admission requests this webhook cannot serve (not a v1 pod, no object).
var ErrBadRequest = errors.New("bad admission request")

// Result and reason label values of the admissions metric (a small fixed set).
const (
	ResultInjected = "injected"
	ResultSkipped  = "skipped"
	ResultError    = "error"

	ReasonInjected          = "injected"
	ReasonExcludedNamespace = "excluded-namespace"
	ReasonOptedOut          = "opted-out"
	ReasonNoCandidates      = "no-candidate-volumes"
	ReasonNothingToInject   = "nothing-to-inject"
	ReasonNotCreate         = "not-create"
	ReasonBadRequest        = "bad-request"
	ReasonInternal          = "internal"
)

// Outcome is what one admission came to.
type Outcome struct {
	Result   string   `json:"result"`
	Reason   string   `json:"reason"`
	Warnings []string `json:"warnings,omitempty"`
}

// Mutator decides and applies the mutation of one pod. It is the typed defaulter handed to
// controller-runtime, which computes the JSON patch from the raw request.
type Mutator struct {
	Config     *config.Config
	Classifier *Classifier
	// Namespace is the webhook's own namespace; never mutated.
	Namespace string
}

// Default implements admission.Defaulter[*corev1.Pod].
func (m *Mutator) Default(ctx context.Context, pod *corev1.Pod) error {
	ns := pod.Namespace
	if req, err := admission.RequestFromContext(ctx); err == nil && req.Namespace != "" {
		ns = req.Namespace
	}
	o := m.Mutate(ctx, ns, pod)
	if sink, ok := ctx.Value(outcomeKey{}).(*Outcome); ok {
		*sink = o
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("admission", "namespace", ns, "pod", podName(pod), "result", o.Result, "reason", o.Reason, "warnings", len(o.Warnings))
	return nil
}

// Mutate applies the policy checks, classification and Mutate to a pod in namespace ns.
func (m *Mutator) Mutate(ctx context.Context, ns string, pod *corev1.Pod) Outcome {
	if m.excluded(ns) {
		return Outcome{Result: ResultSkipped, Reason: ReasonExcludedNamespace}
	}
	if pod.Labels[contract.LabelInject] == contract.LabelInjectOptOutVal {
		return Outcome{Result: ResultSkipped, Reason: ReasonOptedOut}
	}
	if !HasCandidateVolumes(pod) {
		return Outcome{Result: ResultSkipped, Reason: ReasonNoCandidates}
	}
	res := Mutate(pod, m.Classifier.Classify(ctx, ns, pod), m.Config)
	if !res.Injected() {
		return Outcome{Result: ResultSkipped, Reason: ReasonNothingToInject, Warnings: res.Warnings}
	}
	return Outcome{Result: ResultInjected, Reason: ReasonInjected, Warnings: res.Warnings}
}

func (m *Mutator) excluded(ns string) bool {
	if ns == m.Namespace {
		return true
	}
	for _, s := range SystemNamespaces {
		if ns == s {
			return true
		}
	}
	return false
}

// HasCandidateVolumes is the Go twin of the configuration's CEL matchCondition.
func HasCandidateVolumes(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil {
			return true
		}
	}
	return false
}

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}

type outcomeKey struct{}

// Handler checks the request, runs the defaulter, adds warnings and records metrics.
type Handler struct {
	inner   admission.Handler
	metrics *Metrics
	// Timeout bounds the API reads of one admission, below the configuration's timeoutSeconds.
	timeout time.Duration
}

// DefaultLookupTimeout leaves headroom under the 5 s timeoutSeconds of the configuration.
const DefaultLookupTimeout = 3 * time.Second

// NewHandler builds the admission handler; metrics may be nil.
func NewHandler(m *Mutator, metrics *Metrics) *Handler {
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme) // registering a built-in group cannot fail
	return &Handler{
		inner:   admission.WithDefaulter[*corev1.Pod](scheme, m).Handler,
		metrics: metrics,
		timeout: DefaultLookupTimeout,
	}
}

// NewWebhook wraps the handler for an HTTP server (malformed bodies become 400 responses there).
func NewWebhook(m *Mutator, metrics *Metrics) *admission.Webhook {
	return &admission.Webhook{Handler: NewHandler(m, metrics)}
}

var podKind = corev1.SchemeGroupVersion.WithKind("Pod")

// Handle implements admission.Handler.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	o, resp := h.handle(ctx, req)
	resp = resp.WithWarnings(o.Warnings...)
	h.metrics.observe(o, time.Since(start))
	return resp
}

func (h *Handler) handle(ctx context.Context, req admission.Request) (Outcome, admission.Response) {
	bad := func(format string, args ...any) (Outcome, admission.Response) {
		err := fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
		return Outcome{Result: ResultError, Reason: ReasonBadRequest}, admission.Errored(http.StatusBadRequest, err)
	}
	if req.Kind.Group != podKind.Group || req.Kind.Version != podKind.Version || req.Kind.Kind != podKind.Kind {
		return bad("this webhook admits v1 Pods only, got kind %q", req.Kind.String())
	}
	if req.SubResource != "" || req.Operation != admissionv1.Create {
		return Outcome{Result: ResultSkipped, Reason: ReasonNotCreate}, admission.Allowed("pvrescue mutates pod creation only")
	}
	if len(req.Object.Raw) == 0 {
		return bad("the request carries no pod object")
	}

	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	// The framework diffs the whole original object against the mutated one. managedFields can be
	// most of a pod's bytes and we never touch them, so diffing without them gives the same patch
	// (no operation addresses them) for a fraction of the work.
	if stripped, ok := withoutManagedFields(req.Object.Raw); ok {
		req.Object.Raw = stripped
	}
	o := &Outcome{}
	resp := h.inner.Handle(context.WithValue(ctx, outcomeKey{}, o), req)
	if !resp.Allowed {
		if o.Result == "" {
			// The framework could not decode the pod.
			return Outcome{Result: ResultError, Reason: ReasonBadRequest}, resp
		}
		return Outcome{Result: ResultError, Reason: ReasonInternal, Warnings: o.Warnings}, resp
	}
	return *o, resp
}

// withoutManagedFields returns raw with metadata.managedFields removed, and false when raw has
// none or is not a JSON object (the caller then keeps raw and the framework reports bad input).
// Only the top level and metadata are decoded, as raw messages, so the rest is copied verbatim.
func withoutManagedFields(raw []byte) ([]byte, bool) {
	if !bytes.Contains(raw, []byte(`"managedFields"`)) {
		return nil, false
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, false
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(top["metadata"], &meta); err != nil {
		return nil, false
	}
	if _, ok := meta["managedFields"]; !ok {
		return nil, false
	}
	delete(meta, "managedFields")
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, false
	}
	top["metadata"] = m
	out, err := json.Marshal(top)
	if err != nil {
		return nil, false
	}
	return out, true
}
