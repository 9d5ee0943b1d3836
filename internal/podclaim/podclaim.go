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
// claim Kubernetes makes for a generic ephemeral volume, <pod name>-<volume name>. ok is false
// for every other volume.
func Name(pod *corev1.Pod, v *corev1.Volume) (name string, ok bool) {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName, true
	case v.Ephemeral != nil:
		return pod.Name + "-" + v.Name, true
	}
	return "", false
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
