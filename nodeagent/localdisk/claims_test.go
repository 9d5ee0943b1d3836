package localdisk_test

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
)

func TestClaimBinds(t *testing.T) {
	for _, tc := range []struct {
		name string
		pvc  func(*corev1.PersistentVolumeClaim)
		pv   func(*corev1.PersistentVolume)
		want error
	}{
		{"bound both ways", nil, nil, nil},
		{"pending", func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimPending }, nil, localdisk.ErrClaimNotBound},
		{"no phase", func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = "" }, nil, localdisk.ErrClaimNotBound},
		{"lost", func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimLost }, nil, localdisk.ErrClaimNotBound},
		{"claim names another PV", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv2" }, nil, localdisk.ErrClaimRefMismatch},
		{"no claimRef", nil, func(p *corev1.PersistentVolume) { p.Spec.ClaimRef = nil }, localdisk.ErrClaimRefMismatch},
		{"claimRef in another namespace", nil, func(p *corev1.PersistentVolume) { p.Spec.ClaimRef.Namespace = "other" }, localdisk.ErrClaimRefMismatch},
		{"claimRef names another claim", nil, func(p *corev1.PersistentVolume) { p.Spec.ClaimRef.Name = "other" }, localdisk.ErrClaimRefMismatch},
		// A claim deleted and made again under the same name: the PV was bound to the old one.
		{"claimRef of an earlier claim of that name", nil, func(p *corev1.PersistentVolume) { p.Spec.ClaimRef.UID = "uid-old" }, localdisk.ErrClaimRefMismatch},
		// A pre-bound PV the binder has not bound yet.
		{"claimRef without uid", nil, func(p *corev1.PersistentVolume) { p.Spec.ClaimRef.UID = "" }, localdisk.ErrClaimRefMismatch},
		{"no uid on either side", func(c *corev1.PersistentVolumeClaim) { c.UID = "" }, func(p *corev1.PersistentVolume) { p.Spec.ClaimRef.UID = "" }, localdisk.ErrClaimRefMismatch},
	} {
		pvc, pv := boundPVC(), boundPV()
		if tc.pvc != nil {
			tc.pvc(pvc)
		}
		if tc.pv != nil {
			tc.pv(pv)
		}
		err := localdisk.ClaimBinds(pvc, pv)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	// The claim's side alone (no PV read yet).
	pending := boundPVC()
	pending.Status.Phase = corev1.ClaimPending
	if err := localdisk.ClaimBinds(pending, nil); !errors.Is(err, localdisk.ErrClaimNotBound) {
		t.Errorf("pending claim alone: %v", err)
	}
	if err := localdisk.ClaimBinds(boundPVC(), nil); err != nil {
		t.Errorf("bound claim alone: %v", err)
	}
}

// thief is a tenant's pod on n1 in namespace "tenant" using its claim "steal", which names the
// victim's PV pv1; guarded carries a guard copied from a mutated pod (for its own claim).
func thief(guarded bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "thief", Namespace: "tenant", UID: "uid-thief"},
		Spec: corev1.PodSpec{NodeName: "n1", Volumes: []corev1.Volume{{Name: "d",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "steal"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: time.Now()}},
	}
	if guarded {
		p.Spec.InitContainers = []corev1.Container{guardInit("steal")}
	}
	return p
}

// stealClaim is the tenant's claim naming pv1; phase is what its status says (a tenant cannot
// write a claim's status; Bound stands for any way it might read so).
func stealClaim(phase corev1.PersistentVolumeClaimPhase) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: "tenant", UID: k8stypes.UID("uid-steal")},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}, Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
}

// A tenant's claim naming another tenant's local PV (pv1, bound to app/data) does not make the
// tenant's pod a user of it: an unguarded one does not stop the victim's fake, a guarded one
// does not get a fake made, and no Event tells the tenant about pv1 or its path.
func TestControllerForeignClaimIgnored(t *testing.T) {
	for _, tc := range []struct {
		name        string
		phase       corev1.PersistentVolumeClaimPhase
		thiefGuard  bool
		victimPod   bool
		wantFake    bool
		wantPVReads bool
	}{
		// Before the check: the unguarded thief blocked the victim's fake and was told pv1's path.
		{"pending claim, unguarded, beside the victim's pod", corev1.ClaimPending, false, true, true, true},
		{"bound-looking claim, unguarded, beside the victim's pod", corev1.ClaimBound, false, true, true, true},
		// Before the check: a fake was made for pv1, which no pod of its owner uses here.
		{"pending claim, copied guard, alone", corev1.ClaimPending, true, false, false, false},
		{"bound-looking claim, copied guard, alone", corev1.ClaimBound, true, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{boundPV(), boundPVC(), stealClaim(tc.phase), thief(tc.thiefGuard)}
			if tc.victimPod {
				objs = append(objs, podOn("guarded", guard, time.Now()))
			}
			e := newCtrlEnv(t, true, objs...)
			e.pass()
			e.pass()
			if tc.wantFake {
				e.wantEvent(contract.ReasonFakeDeviceCreated, testDisk)
			} else {
				e.os.Locked(func() {
					if len(e.os.Calls) != 0 {
						t.Errorf("the host was touched for the tenant's claim: %v", e.os.Calls)
					}
				})
				if len(e.events) != 0 {
					t.Errorf("events %q", e.events)
				}
			}
			if n := e.count(contract.ReasonUnguardedPodOnMissingDisk); n != 0 {
				t.Errorf("%d unguarded-pod events: %q", n, e.events)
			}
			if n := e.count("thief"); n != 0 {
				t.Errorf("%d events name the tenant's pod: %q", n, e.events)
			}
			if reads := e.view.Reads("PersistentVolume"); (reads > 0) != tc.wantPVReads {
				t.Errorf("%d PV reads, want reads: %v", reads, tc.wantPVReads)
			}
			if len(e.evicted) != 0 {
				t.Errorf("evicted %v", e.evicted)
			}
		})
	}
}
