package s3mount

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A generic ephemeral S3 volume (the webhook probes it) is restored like a claim volume: its
// claim is <pod>-<volume>; a claim of that name the pod does not control is not the pod's
// (kubelet would not mount it) and its target is left alone.
func TestRestorerEphemeralVolume(t *testing.T) {
	for _, tc := range []struct {
		name       string
		controlled bool
	}{
		{"claim controlled by the pod", true},
		{"claim not controlled by the pod", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := podObj("app", "uid-1", "", false)
			pod.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}
			pvc := pvcObj("app-data", "pv-a")
			if tc.controlled {
				pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "app", UID: pod.UID, Controller: ptr.To(true)}}
			}
			pv := pvObj("pv-a", testDriver, false)
			pv.Spec.ClaimRef.Name, pv.Spec.ClaimRef.UID = pvc.Name, pvc.UID
			w := newWorld(t, secretObj("creds", goodSecret), storageClass(), pv, pvc, pod)
			target := w.publish("uid-1", "pv-a")
			w.node.KillMount(target)
			w.start()
			if tc.controlled {
				w.waitFor("bind on the ephemeral volume's dead target", func() bool { return len(w.node.Table().Stack(target)) == 2 })
				return
			}
			w.settle()
			if n := len(w.node.Table().Stack(target)); n != 1 || len(w.node.Started()) != 0 {
				t.Errorf("touched the target of a claim the pod does not control: %d mounts, %d started", n, len(w.node.Started()))
			}
		})
	}
}
