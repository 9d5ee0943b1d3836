//go:build integration

package localdisk_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent"
)

// drainEvents returns what the fake recorder holds.
func (w *apiWorld) drainEvents() []string {
	var out []string
	for len(w.recorder.Events) > 0 {
		out = append(out, <-w.recorder.Events)
	}
	return out
}

// apiPod creates pod (made by podOn/thief) in the apiserver as a controller would see it.
func (w *apiWorld) apiPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pod.UID, pod.Status = "", corev1.PodStatus{}
	pod.Spec.Containers = []corev1.Container{{Name: "c", Image: "busybox"}}
	if _, err := w.client.CoreV1().Pods(pod.Namespace).Create(w.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

// A tenant's Pending claim naming another tenant's local PV, on a real apiserver (which keeps
// the claim Pending: nothing binds it, and the tenant cannot write its status): the agent
// ignores it. The victim's guarded pod still gets its fake; the tenant's unguarded pod neither
// stops it nor is told the PV's name or path; a copied guard on such a claim makes no fake.
func TestForeignClaimIgnoredOnAPIServer(t *testing.T) {
	w := newAPIWorld(t, nil)
	ctx, client := w.ctx, w.client
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	steal := stealClaim("")
	steal.UID, steal.Status = "", corev1.PersistentVolumeClaimStatus{}
	steal.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	steal.Spec.Resources = corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	created, err := client.CoreV1().PersistentVolumeClaims("tenant").Create(ctx, steal, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Status.Phase == corev1.ClaimBound {
		t.Fatalf("the apiserver made the tenant's claim Bound: %+v", created.Status)
	}
	clock := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	w.apiPod(t, thief(true)) // a copied guard, alone on the PV first
	w.start(t, clock, nodeagent.ViewOptions{})
	w.waitView(t, "the view to see the tenant's pod", func(pods []*corev1.Pod) bool { return len(pods) == 1 })
	w.c.SyncOnce(ctx)
	w.fos.Locked(func() {
		if len(w.fos.Calls) != 0 {
			t.Fatalf("a fake was made for the tenant's claim on another tenant's PV: %v", w.fos.Calls)
		}
	})
	if evs := w.drainEvents(); len(evs) != 0 {
		t.Fatalf("events for the tenant's claim alone: %q", evs)
	}

	// The tenant's pod is now unguarded, beside the victim's guarded pod.
	if err := client.CoreV1().Pods("tenant").Delete(ctx, "thief", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	w.apiPod(t, thief(false))
	w.apiPod(t, podOn("db-0", guard, time.Time{}))
	w.waitView(t, "the view to see both pods", func(pods []*corev1.Pod) bool {
		if len(pods) != 2 {
			return false
		}
		for _, p := range pods {
			if p.Name == "thief" && len(p.Spec.InitContainers) != 0 {
				return false // the deleted guarded one
			}
		}
		return true
	})
	clock.Step(time.Second)
	w.c.SyncOnce(ctx)
	if w.fos.Links[testDisk] == "" {
		t.Fatalf("the victim's fake was not made beside the tenant's unguarded pod; calls %v", w.fos.Calls)
	}
	evs := w.drainEvents()
	found := false
	for _, ev := range evs {
		if strings.Contains(ev, contract.ReasonUnguardedPodOnMissingDisk) || strings.Contains(ev, "thief") || strings.Contains(ev, "tenant/") {
			t.Errorf("an event names the tenant's pod: %q", ev)
		}
		found = found || strings.Contains(ev, contract.ReasonFakeDeviceCreated)
	}
	if !found {
		t.Errorf("no %s event: %q", contract.ReasonFakeDeviceCreated, evs)
	}
}

// A claim that is being bound counts on the first pass after the binding holds both ways,
// although the view read the claim and the PV before it: the agent reads them live again
// rather than from the view's 10-minute memory.
func TestClaimCountsOnceBound(t *testing.T) {
	w := newAPIWorld(t, nil)
	ctx, client := w.ctx, w.client
	// Unbind: the claim Pending, the PV pre-bound to it by name only (as an admin writes one).
	pvc, err := client.CoreV1().PersistentVolumeClaims("app").Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimPending
	if pvc, err = client.CoreV1().PersistentVolumeClaims("app").UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, "pv1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.ClaimRef.UID = ""
	if _, err = client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	w.apiPod(t, podOn("db-0", guard, time.Time{}))
	w.start(t, clock, nodeagent.ViewOptions{}) // shipped TTLs: 10 minutes for objects read
	w.waitView(t, "the view to see the pod", func(pods []*corev1.Pod) bool { return len(pods) == 1 })
	w.c.SyncOnce(ctx)
	if w.fos.Links[testDisk] != "" {
		t.Fatal("faked for a claim that is not bound")
	}
	// The view also holds the PV as it is now (read for another rescue, say).
	if cached, err := w.view.PersistentVolume(ctx, "pv1"); err != nil || cached.Spec.ClaimRef.UID != "" {
		t.Fatalf("the view's PV: %v %v", cached, err)
	}

	// The binder's steps: the PV's claimRef gets the claim's uid, then the claim becomes Bound.
	pv, err = client.CoreV1().PersistentVolumes().Get(ctx, "pv1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.ClaimRef.UID = pvc.UID
	if _, err = client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if _, err = client.CoreV1().PersistentVolumeClaims("app").UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Step(time.Second) // far inside the view's TTL
	w.c.SyncOnce(ctx)
	if w.fos.Links[testDisk] == "" {
		t.Fatalf("no fake on the pass after the claim was bound; calls %v", w.fos.Calls)
	}
}
