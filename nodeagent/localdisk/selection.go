package localdisk

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// Why a pod's claim does not count for the PV it names (ClaimBinds).
var (
	// ErrClaimNotBound: the claim's phase is not Bound. spec.volumeName alone is only the
	// claim's wish, which anyone creating a claim can write.
	ErrClaimNotBound = errors.New("claim is not Bound")
	// ErrClaimRefMismatch: the PV's claimRef does not name the claim (namespace, name and uid).
	ErrClaimRefMismatch = errors.New("the PV's claimRef does not name the claim")
)

// ClaimBinds reports (nil) whether pvc and pv are bound to each other both ways: the claim is
// Bound to pv by name, and pv's claimRef names the claim by namespace, name and uid. Only such
// a claim makes its pod a user of the PV: a tenant's Pending claim naming another tenant's PV in
// spec.volumeName is not one. pv may be nil when only the claim's side is checked.
func ClaimBinds(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) error {
	if pvc.Status.Phase != corev1.ClaimBound {
		return fmt.Errorf("%w (phase %q)", ErrClaimNotBound, pvc.Status.Phase)
	}
	if pv == nil {
		return nil
	}
	if pvc.Spec.VolumeName != pv.Name {
		return fmt.Errorf("%w: the claim names PV %q", ErrClaimRefMismatch, pvc.Spec.VolumeName)
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || pvc.UID == "" || ref.Namespace != pvc.Namespace || ref.Name != pvc.Name || ref.UID != pvc.UID {
		return ErrClaimRefMismatch
	}
	return nil
}

// SelectVolume returns the watched volume of pv when it is a Bound local block PV whose
// nodeAffinity selects node and whose StorageClass is listed (an empty list selects nothing).
func SelectVolume(pv *corev1.PersistentVolume, node *corev1.Node, classes []string) (Volume, bool) {
	if pv == nil || node == nil || pv.Status.Phase != corev1.VolumeBound || pv.Spec.Local == nil {
		return Volume{}, false
	}
	if pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode != corev1.PersistentVolumeBlock {
		return Volume{}, false
	}
	if !slices.Contains(classes, pv.Spec.StorageClassName) {
		return Volume{}, false
	}
	if pv.Spec.NodeAffinity == nil || !NodeSelectorMatches(pv.Spec.NodeAffinity.Required, node) {
		return Volume{}, false
	}
	return Volume{PV: pv.Name, Path: pv.Spec.Local.Path}, true
}

// NodeSelectorMatches implements the scheduler's semantics for a required node selector: the
// terms are ORed, the requirements of a term ANDed; a nil selector or an empty term matches
// nothing (local PVs always name their node).
func NodeSelectorMatches(sel *corev1.NodeSelector, node *corev1.Node) bool {
	return sel != nil && slices.ContainsFunc(sel.NodeSelectorTerms, func(t corev1.NodeSelectorTerm) bool { return termMatches(t, node) })
}

func termMatches(term corev1.NodeSelectorTerm, node *corev1.Node) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for _, r := range term.MatchExpressions {
		v, ok := node.Labels[r.Key]
		if !requirementMatches(r, v, ok) {
			return false
		}
	}
	for _, r := range term.MatchFields {
		// metadata.name is the only field the scheduler supports.
		if r.Key != "metadata.name" || (r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn) {
			return false
		}
		if !requirementMatches(r, node.Name, true) {
			return false
		}
	}
	return true
}

func requirementMatches(r corev1.NodeSelectorRequirement, v string, present bool) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return present && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !present || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return present
	case corev1.NodeSelectorOpDoesNotExist:
		return !present
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !present || len(r.Values) != 1 {
			return false
		}
		a, err1 := strconv.ParseInt(v, 10, 64)
		b, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return a > b
		}
		return a < b
	default:
		return false
	}
}
