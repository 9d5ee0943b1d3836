//go:build integration

package localdisk_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
)

// A deleted PV's fake is retired on the next pass (one resync period), although the view keeps
// bound PVs for its 10-minute TTL: a PV no pod here uses is read live on every pass.
func TestDeletedPVFakeRetiredWithinOneResync(t *testing.T) {
	w := newAPIWorld(t, nil)
	ctx, client := w.ctx, w.client
	clock := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	pod := podOn("db-0", guard, time.Time{})
	pod.UID, pod.Status = "", corev1.PodStatus{}
	pod.Spec.Containers = []corev1.Container{{Name: "db", Image: "db"}}
	_, err := client.CoreV1().Pods("app").Create(ctx, pod, metav1.CreateOptions{})
	must("pod", err)

	cfg := w.start(t, clock, nodeagent.ViewOptions{}) // shipped TTLs
	c, fos := w.c, w.fos
	w.waitView(t, "the view to see the pod", func(pods []*corev1.Pod) bool { return len(pods) == 1 })
	resync := cfg.LocalBlock.ResyncPeriod.Duration
	pass := func() {
		clock.Step(resync)
		c.SyncOnce(ctx)
	}
	pass()
	if fos.Links[testDisk] == "" {
		t.Fatalf("no fake at %s for the missing disk", testDisk)
	}

	// The pod goes, then its claim and PV (as a StatefulSet scale-down with a Delete policy does).
	must("delete pod", client.CoreV1().Pods("app").Delete(ctx, "db-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	w.waitView(t, "the view to see the pod gone", func(pods []*corev1.Pod) bool { return len(pods) == 0 })
	pass()
	if fos.Links[testDisk] == "" {
		t.Fatal("the fake went when only the pod did (the PV still exists)")
	}
	must("delete pvc", client.CoreV1().PersistentVolumeClaims("app").Delete(ctx, "data", metav1.DeleteOptions{}))
	must("delete pv", client.CoreV1().PersistentVolumes().Delete(ctx, "pv1", metav1.DeleteOptions{}))
	testenv.WaitFor(t, 10*time.Second, "the PV gone from the apiserver (finalizers)", func() error {
		p, err := client.CoreV1().PersistentVolumes().Get(ctx, "pv1", metav1.GetOptions{})
		if err == nil && len(p.Finalizers) > 0 {
			p.Finalizers = nil // no pv-protection controller in envtest
			_, err = client.CoreV1().PersistentVolumes().Update(ctx, p, metav1.UpdateOptions{})
		}
		if err == nil {
			return context.DeadlineExceeded
		}
		return nil
	})
	pass() // one resync period after the deletion, with the view's 10-minute TTL not expired
	fos.Locked(func() {
		if l := fos.Links[testDisk]; l != "" {
			t.Fatalf("the deleted PV's fake is still linked at %s → %s one resync (%s) later", testDisk, l, resync)
		}
		for _, lp := range fos.Loops {
			if lp != nil && lp.BackingFile != "" {
				t.Fatalf("the deleted PV's fake loop device is still attached: %+v", lp)
			}
		}
	})
}
