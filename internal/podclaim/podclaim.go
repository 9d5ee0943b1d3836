// Package podclaim names the PersistentVolumeClaim behind a pod volume the way kubelet resolves
// it, for a persistentVolumeClaim volume and for a generic ephemeral volume alike.
package podclaim

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrNotOwned: the claim named like a generic ephemeral volume's is not controlled by the pod.
// kubelet refuses to mount such a claim, so it is not the pod's volume.
var ErrNotOwned = errors.New("claim of an ephemeral volume is not controlled by the pod")

// Name returns the claim pod volume v uses: a persistentVolumeClaim volume's claimName, or the
// claim Kubernetes makes for a generic ephemeral volume (EphemeralName). ok is false for every
// other volume.
func Name(pod *corev1.Pod, v *corev1.Volume) (name string, ok bool) {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName, true
	case v.Ephemeral != nil:
		return EphemeralName(pod.Name, v.Name), true
	}
	return "", false
}

// EphemeralName is the claim name Kubernetes gives a pod's generic ephemeral volume:
// <pod name>-<volume name>. A pod created through generateName has no name yet at admission
// (the webhook sees it so), and the volume name stands in; a pod on a node always has its name.
func EphemeralName(podName, volume string) string {
	if podName == "" {
		return volume
	}
	return podName + "-" + volume
}

// Check returns nil when pod may use pvc for its volume v: the claim of a generic ephemeral
// volume must be controlled by the pod (its ownerReference with the pod's UID), as kubelet
// checks; a claim someone else made under that name is not the pod's.
func Check(pod *corev1.Pod, v *corev1.Volume, pvc *corev1.PersistentVolumeClaim) error {
	if v.Ephemeral == nil || metav1.IsControlledBy(pvc, pod) {
		return nil
	}
	return fmt.Errorf("%w: %s/%s, pod uid %s", ErrNotOwned, pvc.Namespace, pvc.Name, pod.UID)
}
