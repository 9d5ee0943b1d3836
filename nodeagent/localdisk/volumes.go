package localdisk

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/pvrescue/pvrescue/internal/podclaim"
)

// wanted is what one pass handles: the local block PVs used by pods on this node, plus those
// named by the rescue's own records on disk. The agent never lists or watches all PVs.
type wanted struct {
	vols []Volume
	pvs  map[string]*corev1.PersistentVolume
	// pods are the live pods on this node using each PV; unguarded those without the guard.
	pods      map[string][]*corev1.Pod
	unguarded map[string][]*corev1.Pod
	// podUIDs are every pod seen on the node (for pruning memory).
	podUIDs map[string]bool
}

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// collect reads the pods of this node from the view, their claims and PVs on demand, and the
// PVs of the records. Read errors are returned joined; what could be read is still returned,
// and a recorded PV that could not be read is kept (from its record) so it is never retired on
// an API hiccup.
func (c *Controller) collect(ctx context.Context, node *corev1.Node) (wanted, error) {
	w := wanted{pvs: map[string]*corev1.PersistentVolume{}, pods: map[string][]*corev1.Pod{},
		unguarded: map[string][]*corev1.Pod{}, podUIDs: map[string]bool{}}
	var errs []error
	classes := c.deps.Config.LocalBlock.StorageClasses
	pods, err := c.deps.View.Pods().List(labels.Everything())
	if err != nil {
		return w, fmt.Errorf("list pods of this node: %w", err)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name })
	for _, pod := range pods {
		w.podUIDs[string(pod.UID)] = true
		if terminal(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		for i := range pod.Spec.Volumes {
			v := &pod.Spec.Volumes[i]
			claim, ok := podclaim.Name(pod, v)
			if !ok {
				continue
			}
			pvc, err := c.deps.View.PersistentVolumeClaim(ctx, pod.Namespace, claim)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if pvc.Spec.VolumeName == "" {
				continue
			}
			if err := podclaim.Check(pod, v, pvc); err != nil {
				logr.FromContextOrDiscard(ctx).V(1).Info("claim ignored for the pod", "pod", pod.Namespace+"/"+pod.Name, "why", err.Error())
				continue
			}
			pv, err := c.boundPV(ctx, pvc)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if pv == nil {
				continue // the claim does not hold the PV it names: not a user of it
			}
			if _, ok := SelectVolume(pv, node, classes); !ok {
				continue
			}
			w.pvs[pv.Name] = pv
			w.pods[pv.Name] = append(w.pods[pv.Name], pod)
			if !Guarded(pod, v.Name) {
				w.unguarded[pv.Name] = append(w.unguarded[pv.Name], pod)
			}
		}
	}
	for name, pv := range w.pvs {
		vol, _ := SelectVolume(pv, node, classes)
		vol.MayFake = len(w.pods[name]) > 0 && len(w.unguarded[name]) == 0
		w.vols = append(w.vols, vol)
	}
	recs, err := c.rec.Records()
	if err != nil {
		errs = append(errs, err)
	}
	for pvName, path := range recs {
		if _, ok := w.pvs[pvName]; ok {
			continue
		}
		// No pod here uses it: only a deletion can change what to do, so read it live (the
		// view serves its last copy while the API server is away).
		c.deps.View.Forget("PersistentVolume", "", pvName)
		pv, err := c.deps.View.PersistentVolume(ctx, pvName)
		switch {
		case apierrors.IsNotFound(err):
			continue // gone: its fake is retired
		case err != nil:
			errs = append(errs, err)
			if path != "" {
				w.vols = append(w.vols, Volume{PV: pvName, Path: path})
			}
			continue
		}
		if vol, ok := SelectVolume(pv, node, classes); ok {
			w.pvs[pv.Name] = pv
			w.vols = append(w.vols, vol) // kept, never newly faked: no pod here needs it
		}
	}
	sort.Slice(w.vols, func(i, j int) bool { return w.vols[i].PV < w.vols[j].PV })
	return w, errors.Join(errs...)
}

// boundPV returns the PV pvc is bound to, or nil when the binding does not hold both ways
// (ClaimBinds): such a claim is ignored for that PV — logged at V(1), never in an Event, which
// would tell the claim's owner another tenant's PV and path. A claim that is not Bound yet is
// read live on the next pass, and a PV copy that predates the binding at once, rather than from
// the view's memory: a claim that is being bound counts as soon as the binding holds.
func (c *Controller) boundPV(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	log := logr.FromContextOrDiscard(ctx).V(1).WithValues("claim", pvc.Namespace+"/"+pvc.Name, "volumeName", pvc.Spec.VolumeName)
	if err := ClaimBinds(pvc, nil); err != nil {
		c.deps.View.Forget("PersistentVolumeClaim", pvc.Namespace, pvc.Name)
		log.Info("claim ignored for the PV it names", "why", err.Error())
		return nil, nil
	}
	pv, err := c.deps.View.PersistentVolume(ctx, pvc.Spec.VolumeName)
	if err != nil {
		return nil, err
	}
	if ClaimBinds(pvc, pv) == nil {
		return pv, nil
	}
	// A Bound claim's PV names it (the binder writes the PV first): a copy that does not may
	// be from before the binding. Read it live once.
	c.deps.View.Forget("PersistentVolume", "", pv.Name)
	if pv, err = c.deps.View.PersistentVolume(ctx, pvc.Spec.VolumeName); err != nil {
		return nil, err
	}
	if err := ClaimBinds(pvc, pv); err != nil {
		log.Info("claim ignored for the PV it names", "why", err.Error())
		return nil, nil
	}
	return pv, nil
}
