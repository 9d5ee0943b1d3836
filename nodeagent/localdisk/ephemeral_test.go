package localdisk_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// ephemeralPod is pod app/app-0 whose volume "d" is a generic ephemeral volume: Kubernetes
// makes claim app-0-d for it, controlled by the pod. guardClaim is the claim its guard names
// ("" for no guard).
func ephemeralPod(guardClaim string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app-0", Namespace: "app", UID: "uid-app-0"},
		Spec: corev1.PodSpec{NodeName: "n1", Volumes: []corev1.Volume{{Name: "d",
			VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: time.Now()}},
	}
	if guardClaim != "" {
		p.Spec.InitContainers = []corev1.Container{guardInit(guardClaim)}
	}
	return p
}

// ephemeralClaim is claim app/app-0-d bound both ways to pv1 (whose claimRef is changed to name
// it); controlled says whether its controller ownerReference is pod app-0's.
func ephemeralClaim(controlled bool) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "app-0-d", Namespace: "app", UID: "uid-app-0-d"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	if controlled {
		pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "app-0",
			UID: k8stypes.UID("uid-app-0"), Controller: ptr.To(true)}}
	}
	pv := boundPV()
	pv.Spec.ClaimRef.Name, pv.Spec.ClaimRef.UID = pvc.Name, pvc.UID
	return pvc, pv
}

// A generic ephemeral local block volume is handled like a claim volume: its guarded pod gets
// the fake (the guard names the claim, or the volume when the pod had no name at admission),
// an unguarded one is warned about; a claim of that name the pod does not control is not the
// pod's (kubelet would not mount it) and is ignored.
func TestControllerEphemeralVolume(t *testing.T) {
	for _, tc := range []struct {
		name          string
		guardClaim    string
		controlled    bool
		wantFake      bool
		wantUnguarded bool
		wantUntouched bool
	}{
		{"guard names the claim", "app-0-d", true, true, false, false},
		{"guard names the volume (generateName)", "d", true, true, false, false},
		{"unguarded", "", true, false, true, false},
		{"claim not controlled by the pod", "app-0-d", false, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc, pv := ephemeralClaim(tc.controlled)
			e := newCtrlEnv(t, true, []runtime.Object{pv, pvc, ephemeralPod(tc.guardClaim)}...)
			e.pass()
			e.pass()
			if got := e.count(contract.ReasonFakeDeviceCreated) > 0; got != tc.wantFake {
				t.Errorf("fake made: %v, want %v; events %q", got, tc.wantFake, e.events)
			}
			if got := e.count(contract.ReasonUnguardedPodOnMissingDisk, "app/app-0") > 0; got != tc.wantUnguarded {
				t.Errorf("unguarded-pod event: %v, want %v; events %q", got, tc.wantUnguarded, e.events)
			}
			if tc.wantUntouched {
				e.os.Locked(func() {
					if len(e.os.Calls) != 0 {
						t.Errorf("the host was touched for a claim the pod does not control: %v", e.os.Calls)
					}
				})
				if len(e.events) != 0 {
					t.Errorf("events %q", e.events)
				}
			}
		})
	}
}
