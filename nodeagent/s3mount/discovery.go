package s3mount

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/pvrescue/pvrescue/internal/podclaim"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// target is one pod's mount of one S3 PV.
type target struct {
	pod *corev1.Pod
	// claim is the pod's claim (in its namespace) that leads to pv (chain).
	claim       string
	pv          string
	driver      string
	path        string
	readOnly    bool
	terminating bool
	// staging is kubelet's staging path of the volume (used when its driver stages).
	staging string
	// cached is the PV as discovery read it from the view (never used to mount: a restore reads
	// the chain live; only to start reading what it will need early, prefetchSecret).
	cached *corev1.PersistentVolume
}

// discover lists this node's S3 volume targets and the UIDs of its live pods, reading PVs and
// PVCs on demand through the node-scoped view (never a cluster-wide list).
func (r *Restorer) discover(ctx context.Context) ([]target, map[string]bool) {
	log := logr.FromContextOrDiscard(ctx)
	pods, err := r.d.View.Pods().List(labels.Everything())
	if err != nil {
		log.Error(err, "list pods")
		return nil, nil
	}
	live := map[string]bool{}
	var out []target
	// A pod naming one claim in two volumes has one target (its path names the PV): it is
	// listed once, so one incident never acts twice on one path.
	seen := map[string]bool{}
	for _, pod := range pods {
		if pod.Spec.NodeName != r.d.NodeName || podGone(pod) {
			continue
		}
		live[string(pod.UID)] = true
		for i := range pod.Spec.Volumes {
			vol := &pod.Spec.Volumes[i]
			claim, ok := podclaim.Name(pod, vol)
			if !ok {
				continue
			}
			pvc, pv, err := r.chain(ctx, pod.Namespace, claim, false)
			if err == nil {
				err = podclaim.Check(pod, vol, pvc)
			}
			if err != nil {
				if errors.Is(err, ErrClaimChain) || errors.Is(err, podclaim.ErrNotOwned) {
					log.V(1).Info("skipping claim", "pod", klogRef(pod), "claim", claim, "err", err.Error())
				}
				continue
			}
			if _, ok := S3Driver(r.cfg, pv); !ok {
				continue
			}
			path := csiclient.TargetPath(r.cfg.KubeletDir, string(pod.UID), pv.Name)
			if seen[path] {
				continue
			}
			data, err := r.os.FS.ReadFile(filepath.Join(filepath.Dir(path), csiclient.VolDataFile))
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					log.V(1).Info("cannot read vol_data.json", "path", path, "err", err.Error())
				}
				continue
			}
			vd, err := csiclient.ParseVolData(data)
			if err == nil {
				err = vd.Check(pv.Name, pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)
			}
			if err != nil {
				// A cached PV (and claim) may be an earlier object of the same name: read both
				// live once before giving up on the target.
				if _, fresh, ferr := r.chain(ctx, pod.Namespace, claim, true); ferr == nil && fresh.UID != pv.UID {
					if _, ok := S3Driver(r.cfg, fresh); ok && fresh.Name == pv.Name && vd.Check(fresh.Name, fresh.Spec.CSI.Driver, fresh.Spec.CSI.VolumeHandle) == nil {
						pv, err = fresh, nil
					}
				}
			}
			if err != nil {
				log.Info("skipping volume whose vol_data.json does not match", "pod", klogRef(pod), "pv", pv.Name, "err", err.Error())
				continue
			}
			// A generic ephemeral volume has no readOnly of its own (its claim template's access
			// modes do not make the mount read-only).
			ro := (vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.ReadOnly) || pv.Spec.CSI.ReadOnly || slices.Contains(pv.Spec.MountOptions, "ro")
			// A terminating pod keeps its mounts while its containers run, but gets no new restores.
			seen[path] = true
			out = append(out, target{pod: pod, claim: claim, pv: pv.Name, driver: pv.Spec.CSI.Driver, path: path, readOnly: ro, terminating: pod.DeletionTimestamp != nil, cached: pv,
				staging: csiclient.KubeletStagingPath(r.cfg.KubeletDir, pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)})
		}
	}
	return out, live
}

// podGone: the pod no longer runs anything that could use its volumes.
func podGone(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	if pod.DeletionTimestamp == nil {
		return false
	}
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if cs.State.Terminated == nil && (cs.State.Running != nil || cs.State.Waiting != nil) {
			return false
		}
	}
	return true
}

func klogRef(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// checkTarget classifies one published target, keeps its dead/hung timers and its health series.
// A statfs timeout is a hung mount, never a dead one (hung.go): only ENOTCONN-class errors are.
func (r *Restorer) checkTarget(ctx context.Context, t target) stack.Health {
	log := logr.FromContextOrDiscard(ctx)
	serr := r.os.Statfs.Statfs(ctx, t.path, r.cfg.S3.StatfsTimeout.Duration)
	now := r.clk.Now()
	h := stack.Classify(true, serr)
	r.mu.Lock()
	hungSince, wasHung := r.hungSince[t.path]
	if h == stack.Hung {
		if !wasHung {
			r.hungSince[t.path] = now
			hungSince = now
		}
	} else {
		delete(r.hungSince, t.path)
	}
	key := healthKey{pv: t.pv, namespace: t.pod.Namespace, pod: t.pod.Name}
	if old, ok := r.healthy[t.path]; ok && old != key {
		r.metrics.MountHealthy.DeleteLabelValues(old.pv, old.namespace, old.pod)
	}
	r.healthy[t.path] = key
	switch h {
	case stack.Healthy:
		delete(r.deadSince, t.path)
		r.metrics.MountHealthy.WithLabelValues(key.pv, key.namespace, key.pod).Set(1)
		if wasHung {
			log.Info("hung S3 mount answers again", "pod", klogRef(t.pod), "pv", t.pv, "path", t.path, "hungFor", now.Sub(hungSince))
		}
	case stack.Dead:
		r.metrics.MountHealthy.WithLabelValues(key.pv, key.namespace, key.pod).Set(0)
		if _, known := r.deadSince[t.path]; !known {
			r.deadSince[t.path] = now
			r.metrics.DeadFound.Inc()
			log.Info("found dead S3 mount", "pod", klogRef(t.pod), "pv", t.pv, "path", t.path, "err", serr.Error())
		}
	case stack.Hung:
		r.metrics.MountHealthy.WithLabelValues(key.pv, key.namespace, key.pod).Set(0)
	default:
		log.V(1).Info("cannot tell mount health yet", "path", t.path, "err", serr.Error())
	}
	r.mu.Unlock()
	if h == stack.Hung {
		r.onHung(ctx, t, hungSince, !wasHung)
	}
	return h
}

// recheckSameConnection checks again each target in answered that shows the same filesystem
// (device) as a dead target of its PV — binds of one staging mount share its FUSE connection and
// die with it — and adds it to needs when it is dead now. A check that ran while the daemon was
// exiting saw it answer; without this it waited for a second pass, after the whole first one.
func (r *Restorer) recheckSameConnection(ctx context.Context, table stack.Table, answered []target, needs map[string][]target) {
	deadDevs := map[string]map[string]bool{}
	for pv, ts := range needs {
		for _, t := range ts {
			if top, ok := table.Top(t.path); ok {
				if deadDevs[pv] == nil {
					deadDevs[pv] = map[string]bool{}
				}
				deadDevs[pv][top.Dev] = true
			}
		}
	}
	for _, t := range answered {
		top, ok := table.Top(t.path)
		if !ok || !deadDevs[t.pv][top.Dev] {
			continue
		}
		if r.checkTarget(ctx, t) == stack.Dead {
			needs[t.pv] = append(needs[t.pv], t)
		}
	}
}
