package s3mount

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
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
