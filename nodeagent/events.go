package nodeagent

import (
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Component is the event source component of the agent.
const Component = contract.AgentComponent

// DefaultEventPostDelay is the agent's default RecorderOptions.PostDelay: past the window of a
// 100-pod pass on a 2-core node (about 1.5 s from the death), soon enough for a person.
const DefaultEventPostDelay = 2 * time.Second

// RecorderOptions tune the agent's Event recorder.
type RecorderOptions struct {
	// PostDelay holds each Event this long after it was recorded before it is sent (0 sends at
	// once). A rescue reports every pod it served, two Events each, while the pods are still
	// waiting for their first good read: a pass over 100 pods put some 200 writes on the API
	// server and etcd (in small clusters on the same cores) inside the window. Held, they go
	// after it, in their order; the pass itself reads no more than before.
	PostDelay time.Duration
	// Clock times the delay (tests step a fake one).
	Clock clock.WithTicker
}

// NewRecorder returns an event recorder writing through client as component pvrescue-agent on
// host nodeName, and a function that stops it, releasing what it holds to be sent at once (as
// before the delay, the stop does not wait for the sending).
//
// client-go's spam filter lets 25 Events through per source, object and type, then one per
// 5 minutes. The agent reports every incident on a pod, so after a couple of dozen plugin
// restarts the pod's success reports would silence the one saying a container was left dead;
// the budget is kept per reason instead (spamKey), each still bounded the same way.
func NewRecorder(client kubernetes.Interface, nodeName string, o RecorderOptions) (record.EventRecorder, func()) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	sink := newDelayedSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")}, o.PostDelay, o.Clock)
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{SpamKeyFunc: spamKey}))
	b.StartRecordingToSink(sink)
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: nodeName}), func() {
		sink.release()
		b.Shutdown()
	}
}

// delayedSink sends each Event no sooner than delay after it was recorded (its LastTimestamp,
// set by the recorder). The broadcaster calls it from one goroutine, in order, so one wait
// holds the Events behind it too: a burst is sent once its first Event is due.
type delayedSink struct {
	record.EventSink
	delay time.Duration
	clock clock.WithTicker
	// released ends every wait, at shutdown: what is held is sent at once.
	released     chan struct{}
	releasedOnce sync.Once
}

func newDelayedSink(s record.EventSink, delay time.Duration, clk clock.WithTicker) *delayedSink {
	return &delayedSink{EventSink: s, delay: delay, clock: clk, released: make(chan struct{})}
}

func (s *delayedSink) release() { s.releasedOnce.Do(func() { close(s.released) }) }

func (s *delayedSink) wait(e *corev1.Event) {
	left := e.LastTimestamp.Add(s.delay).Sub(s.clock.Now())
	if s.delay <= 0 || left <= 0 {
		return
	}
	t := s.clock.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C():
	case <-s.released:
	}
}

func (s *delayedSink) Create(e *corev1.Event) (*corev1.Event, error) {
	s.wait(e)
	return s.EventSink.Create(e)
}

func (s *delayedSink) Update(e *corev1.Event) (*corev1.Event, error) {
	s.wait(e)
	return s.EventSink.Update(e)
}

func (s *delayedSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	s.wait(e)
	return s.EventSink.Patch(e, data)
}

// spamKey is client-go's spam-filter key (source, involved object, type) plus the reason.
func spamKey(e *corev1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name,
		string(o.UID), o.APIVersion, e.Type, e.Reason}, "\x00")
}
