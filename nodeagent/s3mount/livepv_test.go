package s3mount

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
	secrets := w.view.Reads("Secret")
	w.sync()
	// The credentials were read beside the claim chain, and that read is the one the bridge used.
	if got := w.view.Reads("Secret") - secrets; got != 1 {
		t.Errorf("the bridged incident read the credentials secret %d times, want once (the read started with the pass)", got)
	}
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

// A secret read at the start of the pass serves the bridge only when the PV read live names
// that same secret: one read for a PV whose reference changed is never used for it.
func TestResolveUsesAPrefetchedSecretOnlyForThePVsOwn(t *testing.T) {
	w := newWorld(t, sharedClaim(1)...)
	w.start()
	pv := pvObj("pv-a", testDriver, false)
	wrong := secretObj("creds", map[string]string{"accessKeyID": "AKOTHER", "secretAccessKey": "SKOTHER", "endpoint": "http://s3.local:9000"})
	other := &prefetched{ref: corev1.SecretReference{Namespace: "default", Name: "old-creds"}, secret: wrong}
	_, creds, err := w.r.resolve(w.ctx, pv, other)
	if err != nil || creds.AccessKeyID != "AKUNIT" {
		t.Errorf("with another secret prefetched: creds %q, %v; want the PV's own secret read live (AKUNIT)", creds.AccessKeyID, err)
	}
	same := &prefetched{ref: corev1.SecretReference{Namespace: "default", Name: "creds"}, secret: wrong}
	if _, creds, err = w.r.resolve(w.ctx, pv, same); err != nil || creds.AccessKeyID != "AKOTHER" {
		t.Errorf("with the PV's own secret prefetched: creds %q, %v; want the prefetched copy (AKOTHER)", creds.AccessKeyID, err)
	}
	gone := &prefetched{ref: corev1.SecretReference{Namespace: "default", Name: "creds"}, err: errors.New("boom")}
	if _, _, err = w.r.resolve(w.ctx, pv, gone); err == nil {
		t.Error("a failed prefetch of the PV's own secret was not reported")
	}
}
