package s3mount

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// sharedClaim is n pods on this node using the claim "data" (bound to pv-a), as a Deployment's
// replicas are.
func sharedClaim(n int) []runtime.Object {
	objs := []runtime.Object{secretObj("creds", goodSecret), storageClass(), pvObj("pv-a", testDriver, false), pvcObj("data", "pv-a")}
	for i := range n {
		objs = append(objs, podObj(fmt.Sprintf("app-%d", i), fmt.Sprintf("uid-%d", i), "data", false))
	}
	return objs
}

// One incident of a claim shared by many pods reads that claim and its PV live once, not once
// per pod: the reads came one after the other before anything was restored, so every pod's
// window grew with the number of pods.
func TestRestorerReadsASharedClaimOnce(t *testing.T) {
	const pods = 20
	w := newWorld(t, sharedClaim(pods)...)
	targets := make([]string, pods)
	for i := range pods {
		targets[i] = w.publish(fmt.Sprintf("uid-%d", i), "pv-a")
	}
	w.start()
	// A pass over healthy targets: the reads discovery makes (from the view's cache).
	claims, pvs := w.view.Reads("PersistentVolumeClaim"), w.view.Reads("PersistentVolume")
	w.sync()
	passClaims, passPVs := w.view.Reads("PersistentVolumeClaim")-claims, w.view.Reads("PersistentVolume")-pvs

	for _, tg := range targets {
		w.node.KillMount(tg)
	}
	claims, pvs = w.view.Reads("PersistentVolumeClaim"), w.view.Reads("PersistentVolume")
	w.sync()
	if got := w.view.Reads("PersistentVolumeClaim") - claims - passClaims; got != 1 {
		t.Errorf("the restore read the shared claim %d times, want once", got)
	}
	if got := w.view.Reads("PersistentVolume") - pvs - passPVs; got != 1 {
		t.Errorf("the restore read the shared PV %d times, want once", got)
	}
	w.waitFor("every target bridged", func() bool {
		for _, tg := range targets {
			if len(w.node.Table().Stack(tg)) != 2 {
				return false
			}
		}
		return true
	})
}

// rendezvousRemounter holds each pod's remount until another pod's remount has begun (or a
// timeout): with the pods of one incident worked on one after the other, the first one waits
// alone for the whole timeout.
type rendezvousRemounter struct {
	timeout time.Duration
	mu      sync.Mutex
	began   int
	more    chan struct{} // closed once a second remount has begun
	alone   []string      // pods whose remount waited the whole timeout
	done    int
}

func newRendezvousRemounter(timeout time.Duration) *rendezvousRemounter {
	return &rendezvousRemounter{timeout: timeout, more: make(chan struct{})}
}

func (f *rendezvousRemounter) RemountInContainers(_ context.Context, req nodeagent.RemountRequest) (nodeagent.RemountResult, error) {
	f.mu.Lock()
	f.began++
	if f.began == 2 {
		close(f.more)
	}
	f.mu.Unlock()
	select {
	case <-f.more:
	case <-time.After(f.timeout):
		f.mu.Lock()
		f.alone = append(f.alone, req.Pod.Name)
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.done++
	f.mu.Unlock()
	return nodeagent.RemountResult{Fixed: []string{"app"}}, nil
}

// Each pod's containers are remounted on a worker of their own, right after the pod's own
// target: a slow remount (a container with many mounts, a busy namespace) does not hold back
// the other pods of the volume.
func TestRestorerRemountsPodsOfOneVolumeInParallel(t *testing.T) {
	for _, tc := range []struct {
		workers   int
		wantAlone bool
	}{{workers: 0}, {workers: 1, wantAlone: true}} {
		t.Run(fmt.Sprintf("workers=%d", tc.workers), func(t *testing.T) {
			const pods = 3
			w := newWorld(t, sharedClaim(pods)...)
			w.workers = tc.workers
			rm := newRendezvousRemounter(300 * time.Millisecond)
			w.remount = &fakeRemounter{}
			targets := make([]string, pods)
			for i := range pods {
				targets[i] = w.publish(fmt.Sprintf("uid-%d", i), "pv-a")
			}
			w.start()
			w.r.d.Remounter = rm
			for _, tg := range targets {
				w.node.KillMount(tg)
			}
			w.waitFor("every target bridged", func() bool {
				for _, tg := range targets {
					if s := w.node.Table().Stack(tg); len(s) != 2 || s[1].Source != stack.FSName("pv-a") {
						return false
					}
				}
				return true
			})
			w.r.Wait()
			rm.mu.Lock()
			defer rm.mu.Unlock()
			if rm.done != pods {
				t.Fatalf("%d remounts, want %d", rm.done, pods)
			}
			if alone := len(rm.alone) > 0; alone != tc.wantAlone {
				t.Errorf("remounts that waited alone for another pod's: %v (workers %d; want some: %v)", rm.alone, tc.workers, tc.wantAlone)
			}
		})
	}
}
