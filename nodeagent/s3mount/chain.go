package s3mount

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/pvrescue/pvrescue/internal/config"
)

// ErrClaimChain is wrapped when a pod's claim does not lead to a PV that names it back: the
// claim is not Bound, or the PV's claimRef names another claim (namespace, name or UID).
var ErrClaimChain = errors.New("claim and volume do not name each other")

// claimRefNames reports whether pv's claimRef names exactly pvc (namespace, name and UID), the
// claim is Bound and names pv: the two ends of a binding, as the PV controller makes it. A
// claim that only names a PV (a Pending claim naming another tenant's volume) counts for
// nothing.
func claimRefNames(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) bool {
	ref := pv.Spec.ClaimRef
	return pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.VolumeName == pv.Name &&
		ref != nil && ref.Namespace == pvc.Namespace && ref.Name == pvc.Name && ref.UID != "" && ref.UID == pvc.UID
}

// chain follows a pod's claim to its PV by identity: the claim (by name in the pod's namespace)
// must be Bound, and the PV it names must have a claimRef naming that claim's UID. Objects come
// from the view's cache; when the ends do not match (a claim or PV deleted and recreated under
// the same name leaves a cached copy with another UID) or the PV is not found, both are
// forgotten and read again, once. live forgets them first: what a replay or bridge uses is read
// from the API server, never an earlier (possibly deleted) object's copy.
func (r *Restorer) chain(ctx context.Context, namespace, claim string, live bool) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, error) {
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		if live || attempt > 0 {
			r.d.View.Forget("PersistentVolumeClaim", namespace, claim)
		}
		pvc, err := r.d.View.PersistentVolumeClaim(ctx, namespace, claim)
		if err != nil {
			return nil, nil, fmt.Errorf("get PVC %s/%s: %w", namespace, claim, err)
		}
		if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
			last = fmt.Errorf("%w: PVC %s/%s is %s, volume %q", ErrClaimChain, namespace, claim, pvc.Status.Phase, pvc.Spec.VolumeName)
			continue
		}
		if live || attempt > 0 {
			r.d.View.Forget("PersistentVolume", "", pvc.Spec.VolumeName)
		}
		pv, err := r.d.View.PersistentVolume(ctx, pvc.Spec.VolumeName)
		if apierrors.IsNotFound(err) {
			last = fmt.Errorf("get PV %s: %w", pvc.Spec.VolumeName, err)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("get PV %s: %w", pvc.Spec.VolumeName, err)
		}
		if claimRefNames(pv, pvc) {
			return pvc, pv, nil
		}
		last = fmt.Errorf("%w: PV %s (uid %s) claimRef %s, PVC %s/%s uid %s", ErrClaimChain, pv.Name, pv.UID, refString(pv.Spec.ClaimRef), namespace, claim, pvc.UID)
	}
	return nil, nil, last
}

func refString(ref *corev1.ObjectReference) string {
	if ref == nil {
		return "none"
	}
	return ref.Namespace + "/" + ref.Name + " uid " + string(ref.UID)
}

// S3Driver returns the S3 driver name of a PV: its own spec.csi.driver, when that is a
// configured S3 driver. Nothing else classifies a volume: a claim's annotations
// (volume.kubernetes.io/storage-provisioner) are written by whoever made the claim, and a
// tenant's annotation over another driver's PV would make the agent act on that PV.
func S3Driver(cfg *config.Config, pv *corev1.PersistentVolume) (string, bool) {
	if pv == nil || pv.Spec.CSI == nil || !cfg.IsS3Driver(pv.Spec.CSI.Driver) {
		return "", false
	}
	return pv.Spec.CSI.Driver, true
}
