package s3mount

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
)

// staleView serves an earlier copy of the PVs and PVCs in old until they are forgotten, as
// KubeView's cache does within its TTL after an object was deleted and recreated under its name.
type staleView struct {
	nodeagent.ClusterView
	mu     sync.Mutex
	old    map[string]runtime.Object // by kind/namespace/name
	forgot []string
}

func newStaleView(live nodeagent.ClusterView, old ...runtime.Object) *staleView {
	v := &staleView{ClusterView: live, old: map[string]runtime.Object{}}
	for _, o := range old {
		switch x := o.(type) {
		case *corev1.PersistentVolume:
			v.old["PersistentVolume//"+x.Name] = x
		case *corev1.PersistentVolumeClaim:
			v.old["PersistentVolumeClaim/"+x.Namespace+"/"+x.Name] = x
		}
	}
	return v
}

func (v *staleView) cached(key string) runtime.Object {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.old[key]
}

func (v *staleView) PersistentVolume(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	if o := v.cached("PersistentVolume//" + name); o != nil {
		return o.(*corev1.PersistentVolume), nil
	}
	return v.ClusterView.PersistentVolume(ctx, name)
}

func (v *staleView) PersistentVolumeClaim(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	if o := v.cached("PersistentVolumeClaim/" + ns + "/" + name); o != nil {
		return o.(*corev1.PersistentVolumeClaim), nil
	}
	return v.ClusterView.PersistentVolumeClaim(ctx, ns, name)
}

func (v *staleView) Forget(kind, ns, name string) {
	v.mu.Lock()
	key := kind + "/" + ns + "/" + name
	delete(v.old, key)
	v.forgot = append(v.forgot, key)
	v.mu.Unlock()
	v.ClusterView.Forget(kind, ns, name)
}

func (v *staleView) forgotten(key string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Contains(v.forgot, key)
}

// A claim counts only when it is Bound and the PV's claimRef names it (namespace, name, UID); a
// cached copy whose UID does not fit the chain is read again.
func TestChainByIdentity(t *testing.T) {
	recreatedPV := func() *corev1.PersistentVolume { // the cached copy of the PV before its recreation
		pv := pvObj("pv-a", testDriver, false)
		pv.UID = "pv-uid-old"
		pv.Spec.ClaimRef.UID = "pvc-uid-gone"
		return pv
	}
	for _, tc := range []struct {
		name    string
		pvc     func(*corev1.PersistentVolumeClaim)
		pv      func(*corev1.PersistentVolume)
		stale   []runtime.Object
		wantErr error
		wantUID types.UID
	}{
		{name: "bound both ways", wantUID: "pv-uid-pv-a"},
		{name: "claim Pending, naming the PV", pvc: func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimPending }, wantErr: ErrClaimChain},
		{name: "claim Lost", pvc: func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimLost }, wantErr: ErrClaimChain},
		{name: "claimRef in another namespace", pv: func(p *corev1.PersistentVolume) { p.Spec.ClaimRef.Namespace = "victim" }, wantErr: ErrClaimChain},
		{name: "claimRef names another claim", pv: func(p *corev1.PersistentVolume) { p.Spec.ClaimRef.Name = "other" }, wantErr: ErrClaimChain},
		{name: "claimRef names another claim UID", pv: func(p *corev1.PersistentVolume) { p.Spec.ClaimRef.UID = "pvc-uid-other" }, wantErr: ErrClaimChain},
		{name: "claimRef without UID", pv: func(p *corev1.PersistentVolume) { p.Spec.ClaimRef.UID = "" }, wantErr: ErrClaimChain},
		{name: "no claimRef", pv: func(p *corev1.PersistentVolume) { p.Spec.ClaimRef = nil }, wantErr: ErrClaimChain},
		{name: "cached PV of a deleted one: re-read", stale: []runtime.Object{recreatedPV()}, wantUID: "pv-uid-pv-a"},
		{name: "cached claim of a deleted one: re-read", stale: []runtime.Object{func() runtime.Object {
			c := pvcObj("data", "pv-a")
			c.UID = "pvc-uid-gone"
			return c
		}()}, wantUID: "pv-uid-pv-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pv, pvc := pvObj("pv-a", testDriver, false), pvcObj("data", "pv-a")
			if tc.pv != nil {
				tc.pv(pv)
			}
			if tc.pvc != nil {
				tc.pvc(pvc)
			}
			w := newWorld(t, secretObj("creds", goodSecret), pv, pvc, podObj("app", "uid-1", "data", false))
			cache := newStaleView(w.view, tc.stale...)
			w.cache = cache
			w.start()
			_, got, err := w.r.chain(w.ctx, "default", "data", false)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("chain: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("chain: %v", err)
			}
			if got.UID != tc.wantUID {
				t.Errorf("PV uid %s, want %s", got.UID, tc.wantUID)
			}
			if len(tc.stale) > 0 && !cache.forgotten("PersistentVolume//pv-a") {
				t.Error("the stale copy was served without a re-read")
			}
		})
	}
}

// A PV deleted and recreated under the same name with other attributes while the agent's cache
// still holds the old one (the chain through the same claim fits both): the replay uses the new
// PV's attributes, read live, never the deleted one's.
func TestReplayUsesTheRecreatedPV(t *testing.T) {
	w, target := replayWorld(t, false)
	old := pvObj("pv-a", testDriver, false)
	old.UID = "pv-uid-deleted"
	old.Spec.CSI.VolumeAttributes = map[string]string{"mounter": "geesefs", "generation": "deleted"}
	newPV := pvObj("pv-a", testDriver, false)
	newPV.Spec.CSI.VolumeAttributes = map[string]string{"mounter": "s3fs", "generation": "new"}
	w.view.Set(newPV)
	w.cache = newStaleView(w.view, old)
	w.node.KillMount(target)
	w.start()
	if len(w.csi.Publish) != 1 {
		t.Fatalf("NodePublishVolume calls %d, want 1", len(w.csi.Publish))
	}
	if got := w.csi.Publish[0].VolumeContext; got["generation"] != "new" || got["mounter"] != "s3fs" {
		t.Errorf("replayed with volume context %v, want the recreated PV's (generation new, mounter s3fs)", got)
	}
}

// issue 32 item 5: a tenant's Pending claim naming another tenant's S3 PV, and a claim annotated
// with an S3 provisioner over a PV of another driver, count for nothing: the agent restores
// neither's dead target, and the victim's own target is restored as usual.
func TestForeignClaimsIgnored(t *testing.T) {
	thief := pvcObj("stolen", "pv-a")
	thief.Namespace, thief.UID, thief.Status.Phase = "tenant", "pvc-uid-stolen", corev1.ClaimPending
	thiefPod := podObj("thief", "uid-thief", "stolen", false)
	thiefPod.Namespace = "tenant"
	other := pvObj("pv-other", "other.csi.example.com", false)
	other.Spec.ClaimRef.Name, other.Spec.ClaimRef.UID = "annotated", pvcUID("annotated")
	annotated := pvcObj("annotated", "pv-other")
	annotated.Annotations = map[string]string{"volume.kubernetes.io/storage-provisioner": testDriver}
	w := newWorld(t, append(standard(false), thief, thiefPod, other, annotated, podObj("ann", "uid-ann", "annotated", false))...)
	w.csi = &s3mounttest.FakeCSI{Node: w.node}
	victim := w.publish("uid-1", "pv-a")
	stolen := w.publish("uid-thief", "pv-a")
	ann := w.publish("uid-ann", "pv-other")
	for _, p := range []string{victim, stolen, ann} {
		w.node.KillMount(p)
	}
	w.start()
	w.settle()
	var published []string
	for _, req := range w.csi.Publish {
		published = append(published, req.TargetPath)
	}
	if len(w.csi.Publish) != 1 {
		t.Errorf("NodePublishVolume calls for %v, want exactly one (the victim's)", published)
	}
	for _, p := range []string{stolen, ann} {
		if n := len(w.node.Table().Stack(p)); n != 1 {
			t.Errorf("%s: %d mounts, want the dead one alone (not ours to restore)", p, n)
		}
	}
	if len(w.node.Started()) != 0 {
		t.Errorf("started %d s3fs of ours", len(w.node.Started()))
	}
	if n := len(w.node.Table().Stack(victim)); n < 1 {
		t.Errorf("victim target: %d mounts", n)
	}
}

// A restore reads its PV from the API server while it reads the claim, not after: the two
// reads in sequence were 50–100 ms of a loaded API server before a bridge could start. Here the
// live claim read waits until the PV's read has begun; reading them in order makes it wait out
// the timeout.
func TestLivePVReadsThePVWhileItReadsTheClaim(t *testing.T) {
	w := newWorld(t, standard(false)...)
	pvBegun := make(chan struct{})
	var once sync.Once
	var gated atomic.Bool
	var claimWaited atomic.Int32
	w.view.BeforeRead = func(kind string) {
		if !gated.Load() {
			return
		}
		switch kind {
		case "PersistentVolume":
			once.Do(func() { close(pvBegun) })
		case "PersistentVolumeClaim":
			select {
			case <-pvBegun:
			case <-time.After(5 * time.Second):
				claimWaited.Add(1)
			}
		}
	}
	w.start()
	pod, err := w.view.Pods().Pods("default").Get("app")
	if err != nil {
		t.Fatal(err)
	}
	gated.Store(true)
	pv, err := w.r.livePV(w.ctx, "pv-a", []target{{pod: pod, claim: "data", pv: "pv-a"}})
	if err != nil {
		t.Fatalf("livePV: %v", err)
	}
	if pv.UID != "pv-uid-pv-a" {
		t.Errorf("PV uid %s, want pv-uid-pv-a", pv.UID)
	}
	if claimWaited.Load() > 0 {
		t.Error("the claim's live read waited 5s and the PV's read had not begun: they are read one after the other")
	}
}

// The PV read early counts only when the claim, read live, leads to it: a claim bound to
// another PV is an error, whatever the early read of pvName returned.
func TestLivePVClaimDecides(t *testing.T) {
	w := newWorld(t, standard(false)...)
	w.start()
	pod, err := w.view.Pods().Pods("default").Get("app")
	if err != nil {
		t.Fatal(err)
	}
	other := pvObj("pv-b", testDriver, false)
	w.view.Set(other)
	w.view.Set(pvcObj("data", "pv-b"))
	if _, err := w.r.livePV(w.ctx, "pv-a", []target{{pod: pod, claim: "data", pv: "pv-a"}}); !errors.Is(err, ErrClaimChain) {
		t.Fatalf("livePV of pv-a with the claim bound to pv-b: %v, want %v", err, ErrClaimChain)
	}
}
