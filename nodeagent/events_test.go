package nodeagent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

// One namespace's burst cannot crowd out another's Events: while the API server does not
// answer (the first write blocks, the clock does not move), a tenant's 3000 Events about its
// pods come first — more than client-go's broadcaster queues — and one Event about another
// namespace's pod still reaches the API server once it answers.
func TestRecorderOneNamespaceCannotCrowdOutAnother(t *testing.T) {
	client := fake.NewClientset()
	answer := make(chan struct{})
	client.PrependReactor("*", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-answer
		return false, nil, nil // on to the fake's object tracker
	})
	clk := clocktesting.NewFakeClock(time.Now())
	rec, stop := NewRecorder(client, "node-1", RecorderOptions{Clock: clk})
	for i := range 3000 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("t%d", i))}}
		rec.Eventf(pod, corev1.EventTypeWarning, "MountRestoreFailed", "burst %d", i)
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "app", UID: "o1"}}
	rec.Eventf(other, corev1.EventTypeNormal, "MountBridged", "S3 volume pv-o mounted again")
	defer stop()
	close(answer) // the API server answers again
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
