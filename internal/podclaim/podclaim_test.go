package podclaim_test

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/pvrescue/pvrescue/internal/podclaim"
)

func TestName(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-0", Namespace: "ns"}}
	for _, tc := range []struct {
		name   string
		vol    corev1.Volume
		want   string
		wantOK bool
	}{
		{"claim", corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-app-0"}}}, "data-app-0", true},
		{"generic ephemeral", corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{}}}, "app-0-scratch", true},
		{"emptyDir", corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{}}}, "", false},
	} {
		got, ok := podclaim.Name(pod, &tc.vol)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: got %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestEphemeralName(t *testing.T) {
	for _, tt := range []struct{ pod, vol, want string }{
		{"web-0", "data", "web-0-data"},
		{"", "data", "data"}, // generateName: no pod name yet at admission
	} {
		if got := podclaim.EphemeralName(tt.pod, tt.vol); got != tt.want {
			t.Errorf("EphemeralName(%q, %q) = %q, want %q", tt.pod, tt.vol, got, tt.want)
		}
	}
}

func TestCheck(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-0", Namespace: "ns", UID: "uid-pod"}}
	eph := &corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}
	claimVol := &corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "app-0-scratch"}}}
	owned := func(uid string, controller bool) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "app-0-scratch", Namespace: "ns"}}
		if uid != "" {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "app-0",
				UID: k8stypes.UID("uid-" + uid), Controller: ptr.To(controller)}}
		}
		return c
	}
	for _, tc := range []struct {
		name string
		vol  *corev1.Volume
		pvc  *corev1.PersistentVolumeClaim
		want error
	}{
		{"ephemeral, controlled by the pod", eph, owned("pod", true), nil},
		{"ephemeral, no owner (made by someone under that name)", eph, owned("", false), podclaim.ErrNotOwned},
		{"ephemeral, owned by an earlier pod of that name", eph, owned("old", true), podclaim.ErrNotOwned},
		{"ephemeral, owner but not controller", eph, owned("pod", false), podclaim.ErrNotOwned},
		{"claim volume: ownership is not asked", claimVol, owned("", false), nil},
	} {
		err := podclaim.Check(pod, tc.vol, tc.pvc)
		if (err == nil) != (tc.want == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}
