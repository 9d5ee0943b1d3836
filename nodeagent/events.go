package nodeagent

import (
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Component is the event source component of the agent.
const Component = contract.AgentComponent

// RecorderOptions tune the agent's Event recorder.
type RecorderOptions struct {
	// Clock refills the per-namespace budgets (tests step a fake one).
	Clock clock.WithTicker
	// PerNamespaceBurst and PerNamespaceRate bound the Events about one namespace's objects
	// (cluster-scoped objects count as one namespace): at most the burst at once, then the rate
	// per second; the rest are dropped before they reach the shared queue. client-go's
	// broadcaster queues 1000 Events and drops what comes while it is full, whoever it is
	// about: while the API server is slow or away, one tenant's burst (its many pods dying
	// together, or a pod made to fail over and over) would fill it and the next namespace's
	// Events be lost.
	// Defaults 250 (a 100-pod pass records two per pod) and 5.
	PerNamespaceBurst int
	PerNamespaceRate  float64
}

// NewRecorder returns an event recorder writing through client as component pvrescue-agent on
// host nodeName, and a function that stops it (it does not wait for the sending).
//
// client-go's spam filter lets 25 Events through per source, object and type, then one per
// 5 minutes. The agent reports every incident on a pod, so after a couple of dozen plugin
// restarts the pod's success reports would silence the one saying a container was left dead;
// the budget is kept per reason instead (spamKey), each still bounded the same way.
func NewRecorder(client kubernetes.Interface, nodeName string, o RecorderOptions) (record.EventRecorder, func()) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.PerNamespaceBurst <= 0 {
		o.PerNamespaceBurst = 250
	}
	if o.PerNamespaceRate <= 0 {
		o.PerNamespaceRate = 5
	}
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{SpamKeyFunc: spamKey}))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: nodeName})
	fair := &fairRecorder{EventRecorder: rec, clock: o.Clock, burst: float64(o.PerNamespaceBurst), rate: o.PerNamespaceRate,
		buckets: map[string]*bucket{}}
	return fair, b.Shutdown
}

// spamKey is client-go's spam-filter key (source, involved object, type) plus the reason.
func spamKey(e *corev1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name,
		string(o.UID), o.APIVersion, e.Type, e.Reason}, "\x00")
}

// fairRecorder gives each namespace its own budget of Events (a token bucket), so one
// namespace's burst cannot fill the broadcaster's shared queue and crowd out another's.
type fairRecorder struct {
	record.EventRecorder
	clock clock.PassiveClock
	burst float64
	rate  float64

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// allow takes one token of obj's namespace.
func (r *fairRecorder) allow(obj runtime.Object) bool {
	ns := ""
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		ns = ref.Namespace
	} else if m, err := meta.Accessor(obj); err == nil {
		ns = m.GetNamespace()
	}
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.buckets[ns]
	if !ok {
		b = &bucket{tokens: r.burst, at: now}
		r.buckets[ns] = b
	}
	b.tokens = min(r.burst, b.tokens+now.Sub(b.at).Seconds()*r.rate)
	b.at = now
	if len(r.buckets) > 4096 { // forget full buckets: they are as new ones
		for k, x := range r.buckets {
			if k != ns && min(r.burst, x.tokens+now.Sub(x.at).Seconds()*r.rate) >= r.burst {
				delete(r.buckets, k)
			}
		}
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (r *fairRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	if r.allow(obj) {
		r.EventRecorder.Event(obj, eventtype, reason, message)
	}
}

func (r *fairRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	if r.allow(obj) {
		r.EventRecorder.Eventf(obj, eventtype, reason, messageFmt, args...)
	}
}

func (r *fairRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	if r.allow(obj) {
		r.EventRecorder.AnnotatedEventf(obj, annotations, eventtype, reason, messageFmt, args...)
	}
}
