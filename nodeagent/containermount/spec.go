package containermount

import (
	"errors"
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
)

// ErrUnverified: what the pod spec (read from the API) says of a container's mount and what the
// container's mount table shows disagree, or the container cannot be matched to the spec; the
// container is skipped and its liveness probe remains the fallback.
var ErrUnverified = errors.New("container mount does not match the pod spec")

// SpecMount is what the pod spec says of one container mount point of a volume.
type SpecMount struct {
	Volume string
	// SubPath is the cleaned subPath ("" = the volume root).
	SubPath string
	// Expr: the mount uses subPathExpr, whose expansion the spec alone does not give.
	Expr bool
	// ReadOnly: the volumeMount or the pod volume (claim or inline CSI) is read-only.
	ReadOnly bool
	// Receives: mountPropagation HostToContainer or Bidirectional — the container's mount is a
	// slave of the host's.
	Receives bool
}

// SpecMounts returns, by cleaned mount path, the volumeMounts of the named containers of pod
// (app, init and ephemeral containers); ok is false when names is empty or a name is not in the
// spec.
func SpecMounts(pod *corev1.Pod, names []string) (map[string][]SpecMount, bool) {
	byName := map[string][]corev1.VolumeMount{}
	for _, c := range pod.Spec.InitContainers {
		byName[c.Name] = c.VolumeMounts
	}
	for _, c := range pod.Spec.Containers {
		byName[c.Name] = c.VolumeMounts
	}
	for _, c := range pod.Spec.EphemeralContainers {
		byName[c.Name] = c.VolumeMounts
	}
	volRO := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		volRO[v.Name] = (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly) ||
			(v.CSI != nil && v.CSI.ReadOnly != nil && *v.CSI.ReadOnly)
	}
	out := map[string][]SpecMount{}
	for _, n := range names {
		vms, ok := byName[n]
		if !ok {
			return nil, false
		}
		for _, vm := range vms {
			sub := ""
			if vm.SubPath != "" {
				sub = path.Clean("/" + vm.SubPath)[1:]
			}
			mp := path.Clean(vm.MountPath)
			receives := vm.MountPropagation != nil && (*vm.MountPropagation == corev1.MountPropagationHostToContainer ||
				*vm.MountPropagation == corev1.MountPropagationBidirectional)
			out[mp] = append(out[mp], SpecMount{Volume: vm.Name, SubPath: sub, Expr: vm.SubPathExpr != "",
				ReadOnly: vm.ReadOnly || volRO[vm.Name], Receives: receives})
		}
	}
	return out, len(names) > 0
}

// CheckPlan holds a container namespace's plan against its pod spec: the offset of each target
// must be the spec's subPath and a mount the spec makes read-only must show read-only, and the
// clone gets the spec's read-only flag and propagation (slave for HostToContainer) too. When any target disagrees, or the namespace was not
// matched to containers of the spec (identified false), every attach of the namespace is moved to
// Skipped (ErrUnverified): a container is never given a mount chosen from text that disagrees
// with what the agent verified. Making a propagated mount read-only in place (Reprotect) only
// ever removes access and is kept; a live mount the spec makes read-only but that is writable is
// added as one.
func CheckPlan(plan Plan, table MountTable, liveDev string, spec map[string][]SpecMount, identified bool) Plan {
	out := Plan{Live: plan.Live, Skipped: map[string]error{}}
	for mp, err := range plan.Skipped {
		out.Skipped[mp] = err
	}
	var attaches []Target
	var why = map[string]error{}
	for _, t := range plan.Targets {
		if t.Reprotect {
			out.Targets = append(out.Targets, t)
			continue
		}
		sms := spec[t.MountPoint]
		switch {
		case !identified:
			why[t.MountPoint] = fmt.Errorf("%w: no container of the pod spec matches this namespace", ErrUnverified)
		case len(sms) == 0:
			why[t.MountPoint] = fmt.Errorf("%w: no volumeMount at %q in the pod spec", ErrUnverified, t.MountPoint)
		}
		for _, sm := range sms {
			switch {
			case sm.Expr:
				why[t.MountPoint] = fmt.Errorf("%w: %q uses subPathExpr, its directory cannot be checked", ErrUnverified, t.MountPoint)
			case sm.SubPath != t.Offset:
				why[t.MountPoint] = fmt.Errorf("%w: %q shows %q of the volume, the pod spec's subPath is %q",
					ErrUnverified, t.MountPoint, t.Offset, sm.SubPath)
			case sm.ReadOnly && !t.ReadOnly:
				why[t.MountPoint] = fmt.Errorf("%w: %q shows a writable mount, the pod spec makes it read-only",
					ErrUnverified, t.MountPoint)
			}
			t.ReadOnly = t.ReadOnly || sm.ReadOnly
			// A HostToContainer mount whose host mount was replaced shows private (its master
			// group emptied): the spec says what it must be again.
			t.Slave = t.Slave || sm.Receives
		}
		attaches = append(attaches, t)
	}
	if len(why) > 0 {
		for _, t := range attaches {
			if err, ok := why[t.MountPoint]; ok {
				out.Skipped[t.MountPoint] = err
			} else {
				out.Skipped[t.MountPoint] = fmt.Errorf("%w: another mount of the container disagrees", ErrUnverified)
			}
		}
		attaches = nil
	}
	if identified {
		live := out.Live[:0:0]
		for _, mp := range out.Live {
			reached, ok := table.Reach(mp)
			if ok && reached.MountPoint == mp && reached.Dev == liveDev && !reached.ReadOnly() && anyReadOnly(spec[mp]) {
				out.Targets = append(out.Targets, Target{MountPoint: mp, DeadMountID: reached.ID, ReadOnly: true, Reprotect: true})
				continue
			}
			live = append(live, mp)
		}
		out.Live = live
	}
	out.Targets = append(attaches, out.Targets...)
	return out
}

func anyReadOnly(sms []SpecMount) bool {
	for _, sm := range sms {
		if sm.ReadOnly {
			return true
		}
	}
	return false
}
