package containermount_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

// gateNS holds every attach until release is closed, and says when one has begun.
type gateNS struct {
	inner   containermount.Namespaces
	began   chan struct{}
	release chan struct{}
}

func (g gateNS) AttachInNamespace(ctx context.Context, ns containermount.NamespaceRef, live string, a []containermount.Attach) ([]containermount.Outcome, error) {
	select {
	case g.began <- struct{}{}:
	default:
	}
	<-g.release
	return g.inner.AttachInNamespace(ctx, ns, live, a)
}

// Passes of different pods run at once (one incident of a volume shared by many pods remounts
// them in parallel); passes of one pod still take turns.
func TestRemountPassesOfOtherPodsDoNotWait(t *testing.T) {
	c := newFakeCluster(t)
	g := gateNS{inner: c.node.OS().NS, began: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarness(t, containermount.OS{Proc: c.node.OS().Proc, NS: g}, containermount.Options{})

	first := make(chan error, 1)
	go func() {
		_, err := h.r.RemountInContainers(ctxFor(t), c.req())
		first <- err
	}()
	select {
	case <-g.began:
	case <-time.After(5 * time.Second):
		t.Fatal("the first pass never reached a container")
	}

	// Another pod (no process of it on the node): its pass ends while the first is held.
	other := c.req()
	other.Pod = c.pod.DeepCopy()
	other.Pod.UID = types.UID("0a0b0c0d-0000-4000-8000-000000000001")
	other.Pod.Name = "other"
	done := make(chan error, 1)
	go func() {
		_, err := h.r.RemountInContainers(ctxFor(t), other)
		done <- err
	}()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(5 * time.Second):
		close(g.release)
		t.Fatal("another pod's pass waited for the first pod's")
	}

	// The same pod again: it waits for the first pass to end.
	again := make(chan error, 1)
	go func() {
		_, err := h.r.RemountInContainers(ctxFor(t), c.req())
		again <- err
	}()
	select {
	case <-again:
		close(g.release)
		t.Fatal("a second pass of the same pod ran while the first was under way")
	case <-time.After(100 * time.Millisecond):
	}
	close(g.release)
	must(t, <-first)
	must(t, <-again)
}
