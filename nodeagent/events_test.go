package nodeagent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestSpamKeySeparatesReasons(t *testing.T) {
	ev := func(reason, typ, uid string) *corev1.Event {
		return &corev1.Event{Reason: reason, Type: typ,
			Source:         corev1.EventSource{Component: Component, Host: "node-1"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p", UID: types.UID("u" + uid)}}
	}
	base := spamKey(ev("ContainersRemounted", corev1.EventTypeWarning, "1"))
	for _, tc := range []struct {
		name string
		e    *corev1.Event
		same bool
	}{
		{"same reason, type and object", ev("ContainersRemounted", corev1.EventTypeWarning, "1"), true},
		{"other reason", ev("MountRestoreInContainerFailed", corev1.EventTypeWarning, "1"), false},
		{"other type", ev("ContainersRemounted", corev1.EventTypeNormal, "1"), false},
		{"other object", ev("ContainersRemounted", corev1.EventTypeWarning, "2"), false},
	} {
		if got := spamKey(tc.e) == base; got != tc.same {
			t.Errorf("%s: same key = %v, want %v", tc.name, got, tc.same)
		}
	}
}

// After the spam filter's burst is spent on one reason, an Event of another reason about the
// same pod still reaches the API server.
func TestRecorderKeepsAFailureAfterManySuccesses(t *testing.T) {
	client := fake.NewClientset()
	rec, stop := NewRecorder(client, "node-1", RecorderOptions{})
	defer stop()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"}}
	for i := 0; i < 40; i++ {
		// Distinct messages so the aggregator does not fold them into one before the filter.
		rec.Eventf(pod, corev1.EventTypeWarning, "ContainersRemounted", "restored into %d container(s), 1 failed", i)
	}
	rec.Eventf(pod, corev1.EventTypeWarning, "MountRestoreInContainerFailed", `"app:/data" left dead`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reasons := map[string]int{}
		for _, e := range list.Items {
			reasons[e.Reason]++
		}
		if reasons["MountRestoreInContainerFailed"] == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failure Event never reached the API server; Events by reason: %v", reasons)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recordingSink is an EventSink keeping what reached it, in order.
type recordingSink struct {
	mu   sync.Mutex
	sent []string
}

func (s *recordingSink) add(op string, e *corev1.Event) (*corev1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, op+" "+e.Reason)
	return e, nil
}

func (s *recordingSink) Create(e *corev1.Event) (*corev1.Event, error) { return s.add("create", e) }
func (s *recordingSink) Update(e *corev1.Event) (*corev1.Event, error) { return s.add("update", e) }
func (s *recordingSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	return s.add("patch", e)
}

func (s *recordingSink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// An Event goes to the API server no sooner than PostDelay after it was recorded; the ones
// behind it, recorded later, follow once they are due; none is held once the sink is released.
func TestDelayedSinkHoldsEventsUntilDue(t *testing.T) {
	start := time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	inner := &recordingSink{}
	s := newDelayedSink(inner, 2*time.Second, clk)
	at := func(reason string, d time.Duration) *corev1.Event {
		return &corev1.Event{Reason: reason, LastTimestamp: metav1.NewTime(start.Add(d))}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Create(at("Bridged", 0))
		_, _ = s.Patch(at("Remounted", 500*time.Millisecond), nil)
		_, _ = s.Update(at("Later", 10*time.Second))
	}()
	waitWaiters := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatalf("the sink is not waiting; sent %v", inner.got())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitWaiters()
	if got := inner.got(); len(got) != 0 {
		t.Fatalf("sent %v before any Event was due", got)
	}
	clk.Step(1999 * time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if got := inner.got(); len(got) != 0 {
		t.Fatalf("sent %v 1.999 s after the first Event, want nothing before 2 s", got)
	}
	clk.Step(time.Millisecond)
	waitWaiters() // the first is sent; the second waits its own 0.5 s
	if got := inner.got(); !slices.Equal(got, []string{"create Bridged"}) {
		t.Fatalf("at 2 s sent %v, want the first Event only", got)
	}
	clk.Step(500 * time.Millisecond)
	waitWaiters() // the third, recorded at 10 s, waits until 12 s
	if got := inner.got(); !slices.Equal(got, []string{"create Bridged", "patch Remounted"}) {
		t.Fatalf("at 2.5 s sent %v, want the first two", got)
	}
	s.release()
	<-done
	if got := inner.got(); !slices.Equal(got, []string{"create Bridged", "patch Remounted", "update Later"}) {
		t.Fatalf("after the release sent %v, want all three in order", got)
	}
	// Released, nothing waits any more.
	_, _ = s.Create(at("AfterRelease", 0))
	if got := inner.got(); got[len(got)-1] != "create AfterRelease" {
		t.Fatalf("after the release an Event was held: %v", got)
	}
}

// With PostDelay 0 an Event is sent at once; with one, NewRecorder's stop function sends what
// it holds instead of dropping it.
func TestRecorderPostDelay(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"}}
	count := func(client *fake.Clientset) int {
		list, err := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	waitOne := func(client *fake.Clientset, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for count(client) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no Event reached the API server", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	now := fake.NewClientset()
	rec, stop := NewRecorder(now, "node-1", RecorderOptions{})
	rec.Event(pod, corev1.EventTypeNormal, "MountBridged", "bridged")
	waitOne(now, "no delay")
	stop()

	held := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Now())
	rec, stop = NewRecorder(held, "node-1", RecorderOptions{PostDelay: time.Hour, Clock: clk})
	rec.Event(pod, corev1.EventTypeNormal, "MountBridged", "bridged")
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the recorder does not hold the Event")
		}
		time.Sleep(time.Millisecond)
	}
	if n := count(held); n != 0 {
		t.Fatalf("%d Event(s) sent within the hour's delay", n)
	}
	stop()
	waitOne(held, "stopped with an Event held")
}

// One namespace's burst cannot crowd out another's Events: while the held Events wait (the
// clock does not move), a tenant's 3000 Events about its pods come first — more than
// client-go's broadcaster queues — and one Event about another namespace's pod still reaches
// the API server once they are released.
func TestRecorderOneNamespaceCannotCrowdOutAnother(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Now())
	rec, stop := NewRecorder(client, "node-1", RecorderOptions{PostDelay: time.Hour, Clock: clk})
	for i := range 3000 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("t%d", i))}}
		rec.Eventf(pod, corev1.EventTypeWarning, "MountRestoreFailed", "burst %d", i)
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "app", UID: "o1"}}
	rec.Eventf(other, corev1.EventTypeNormal, "MountBridged", "S3 volume pv-o mounted again")
	defer stop()
	clk.Step(2 * time.Hour) // every held Event is due
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := client.CoreV1().Events("other").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			n, _ := client.CoreV1().Events("tenant").List(context.Background(), metav1.ListOptions{})
			t.Fatalf("the other namespace's Event never reached the API server (%d of the tenant's did): one namespace's burst crowded it out", len(n.Items))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
