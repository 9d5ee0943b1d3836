package localdisk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent"
)

// Event reasons.
const (
	ReasonFakeDeviceCreated = "FakeDeviceCreated"
	ReasonFakeDeviceRetired = "FakeDeviceRetired"
	ReasonDiskReturned      = "DiskReturned"
	ReasonDiskMissing       = "LocalDiskMissing"
	ReasonMissingTooLong    = "LocalDiskMissingTooLong"
	ReasonFakeDeviceFailed  = "FakeDeviceFailed"
	ReasonInvalidLocalPath  = "InvalidLocalPath"
	ReasonRestartPod        = "RealDiskReturned"
	ReasonEvicted           = "EvictedForRealDisk"

	// ConditionLocalDiskMissing is the Node condition the agent owns.
	ConditionLocalDiskMissing corev1.NodeConditionType = "LocalDiskMissing"
)

// ControllerOptions tune the controller beyond the shared config.
type ControllerOptions struct {
	// PathPrefix: PV paths must lie under it (default /dev; tests use a temp dir).
	PathPrefix string
	// DevDir holds the loop nodes (default /dev).
	DevDir string
	// LoopSearchLimit is how many loop numbers from FirstLoopMinor may be tried (default 256).
	LoopSearchLimit int
	// HeartbeatPeriod refreshes the Node condition even when unchanged (default 5m).
	HeartbeatPeriod time.Duration
}

// Controller watches this node's local block PVs and keeps fakes in place of missing disks.
type Controller struct {
	deps    nodeagent.Deps
	opts    ControllerOptions
	rec     *Reconciler
	metrics *Metrics
	now     func() time.Time

	pvs   corelisters.PersistentVolumeLister
	nodes corelisters.NodeLister
	pods  corelisters.PodLister

	trigger     chan struct{}
	mu          sync.Mutex
	triggeredAt time.Time

	// Memory for de-duplicating reports; losing it on restart only repeats an Event.
	missingSince  map[string]time.Time
	warnedLong    map[string]bool
	lastProblem   map[string]string
	returned      map[string]bool
	podsNotified  map[types.UID]bool
	lastCondition string
	lastBeat      time.Time
}

// NewController builds the controller on deps with the host's OS effects.
func NewController(deps nodeagent.Deps, host Host, opts ControllerOptions) (*Controller, error) {
	if deps.NodeName == "" || deps.Config == nil || deps.Client == nil || deps.Recorder == nil {
		return nil, errors.New("localdisk: node name, config, client and recorder are required")
	}
	if opts.HeartbeatPeriod <= 0 {
		opts.HeartbeatPeriod = 5 * time.Minute
	}
	lb := deps.Config.LocalBlock
	r, err := NewReconciler(host, ReconcilerOptions{
		StateDir: filepath.Clean(deps.Config.StateDir), DevDir: opts.DevDir, PathPrefix: opts.PathPrefix,
		FakeSize: lb.FakeDeviceSizeBytes, FirstLoopMinor: lb.FirstLoopMinor, LoopSearchLimit: opts.LoopSearchLimit,
	}, nil)
	if err != nil {
		return nil, err
	}
	m, err := NewMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("localdisk metrics: %w", err)
	}
	return &Controller{
		deps: deps, opts: opts, rec: r, metrics: m, now: time.Now,
		trigger:      make(chan struct{}, 1),
		missingSince: map[string]time.Time{}, warnedLong: map[string]bool{}, lastProblem: map[string]string{},
		returned: map[string]bool{}, podsNotified: map[types.UID]bool{},
	}, nil
}

// Trigger asks for a pass soon; it never blocks.
func (c *Controller) Trigger() {
	c.mu.Lock()
	if c.triggeredAt.IsZero() {
		c.triggeredAt = c.now()
	}
	c.mu.Unlock()
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Run watches until ctx is done: informer events, fsnotify events on the paths' directories and
// a periodic resync all trigger one idempotent pass.
func (c *Controller) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	client, node := c.deps.Client, c.deps.NodeName
	pvF := informers.NewSharedInformerFactory(client, 0)
	nodeF := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	podF := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.Trigger() },
		UpdateFunc: func(any, any) { c.Trigger() },
		DeleteFunc: func(any) { c.Trigger() },
	}
	pvInf, nodeInf := pvF.Core().V1().PersistentVolumes(), nodeF.Core().V1().Nodes()
	if _, err := pvInf.Informer().AddEventHandler(h); err != nil {
		return err
	}
	if _, err := nodeInf.Informer().AddEventHandler(h); err != nil {
		return err
	}
	c.pvs, c.nodes, c.pods = pvInf.Lister(), nodeInf.Lister(), podF.Core().V1().Pods().Lister()
	podF.Core().V1().Pods().Informer()
	for _, f := range []informers.SharedInformerFactory{pvF, nodeF, podF} {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	for _, f := range []informers.SharedInformerFactory{pvF, nodeF, podF} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("cache of %v did not sync", typ)
			}
		}
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("fsnotify: %w", err)
	}
	defer watcher.Close()
	watched := map[string]bool{}
	resync := time.NewTicker(c.deps.Config.LocalBlock.ResyncPeriod.Duration)
	defer resync.Stop()
	log.Info("local-disk rescuer started", "node", node, "stateDir", c.deps.Config.StateDir)
	c.Trigger()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C:
			c.Trigger()
		case ev, ok := <-watcher.Events:
			if ok {
				log.V(2).Info("filesystem event", "event", ev.String())
				c.Trigger()
			}
		case err, ok := <-watcher.Errors:
			if ok {
				log.Error(err, "fsnotify")
			}
		case <-c.trigger:
			dirs := c.SyncOnce(ctx)
			updateWatches(log, watcher, watched, dirs)
		}
	}
}

func updateWatches(log logr.Logger, w *fsnotify.Watcher, watched map[string]bool, dirs []string) {
	want := map[string]bool{}
	for _, d := range dirs {
		want[d] = true
		if !watched[d] {
			if err := w.Add(d); err != nil {
				// The directory may not exist yet; the periodic resync still covers it.
				log.V(1).Info("cannot watch directory; relying on resync", "dir", d, "err", err.Error())
				continue
			}
			watched[d] = true
		}
	}
	for d := range watched {
		if !want[d] {
			_ = w.Remove(d)
			delete(watched, d)
		}
	}
}

// SyncOnce runs one pass and reports; it returns the directories to watch.
func (c *Controller) SyncOnce(ctx context.Context) []string {
	log := logr.FromContextOrDiscard(ctx)
	c.mu.Lock()
	detected := c.triggeredAt
	c.triggeredAt = time.Time{}
	c.mu.Unlock()
	if detected.IsZero() {
		detected = c.now()
	}
	start := c.now()
	cfg := c.deps.Config.LocalBlock
	nodeObj, err := c.nodes.Get(c.deps.NodeName)
	if err != nil {
		log.Error(err, "own Node not found; reporting only")
		c.metrics.Errors.WithLabelValues("api").Inc()
		return nil
	}
	create := nodeObj.Labels[cfg.NodeLabel] == contract.LabelFakeDevicesEnabled
	pvList, err := c.pvs.List(labels.Everything())
	if err != nil {
		log.Error(err, "list PVs")
		return nil
	}
	pvByName := map[string]*corev1.PersistentVolume{}
	var vols []Volume
	dirSet := map[string]bool{}
	for _, pv := range pvList {
		if v, ok := SelectVolume(pv, nodeObj, cfg.StorageClasses); ok {
			vols = append(vols, v)
			pvByName[pv.Name] = pv
			if filepath.IsAbs(v.Path) {
				dirSet[filepath.Dir(filepath.Clean(v.Path))] = true
			}
		}
	}
	res := c.rec.Sync(ctx, vols, create)
	c.metrics.SyncSeconds.Observe(c.now().Sub(start).Seconds())
	for _, err := range res.Errors {
		log.Error(err, "local-disk pass")
		c.metrics.Errors.WithLabelValues("sync").Inc()
	}

	now := c.now()
	var missing []string
	active, missingN := 0, 0
	for _, st := range res.Volumes {
		pv := pvByName[st.PV]
		log := log.WithValues("pv", st.PV, "path", st.Path)
		switch st.State {
		case StateFaked, StateMissing:
			missingN++
			missing = append(missing, st.PV)
			if _, ok := c.missingSince[st.PV]; !ok {
				c.missingSince[st.PV] = detected
			}
		default:
			delete(c.missingSince, st.PV)
			delete(c.warnedLong, st.PV)
		}
		switch st.State {
		case StateFaked:
			active++
			delete(c.lastProblem, st.PV)
			dev := LoopDevPath(c.rec.opts.DevDir, st.Loop)
			if st.Created {
				lat := now.Sub(c.missingSince[st.PV])
				c.metrics.FakeLatency.Observe(lat.Seconds())
				log.Info("fake device created", "device", dev, "latency", lat)
				c.deps.Recorder.Eventf(pv, corev1.EventTypeNormal, ReasonFakeDeviceCreated,
					"local disk %s is missing on node %s; a %d-byte fake device %s stands in so pods can start",
					st.Path, c.deps.NodeName, cfg.FakeDeviceSizeBytes, dev)
			}
			c.annotate(ctx, pv, dev)
		case StateMissing:
			if st.Err != nil {
				c.problem(ctx, pv, ReasonFakeDeviceFailed, fmt.Sprintf("local disk %s is missing and no fake device could be made: %v", st.Path, st.Err), "create")
			} else {
				c.problem(ctx, pv, ReasonDiskMissing, fmt.Sprintf("local disk %s is missing; fake devices are disabled on node %s (label %s=%s enables them)",
					st.Path, c.deps.NodeName, cfg.NodeLabel, contract.LabelFakeDevicesEnabled), "")
			}
		case StateInvalid:
			c.problem(ctx, pv, ReasonInvalidLocalPath, fmt.Sprintf("local path not handled, nothing touched: %v", st.Err), "invalid")
		case StatePresent:
			delete(c.lastProblem, st.PV)
		}
		if since, ok := c.missingSince[st.PV]; ok && !c.warnedLong[st.PV] && now.Sub(since) >= cfg.MissingWarningAfter.Duration {
			c.warnedLong[st.PV] = true
			c.deps.Recorder.Eventf(pv, corev1.EventTypeWarning, ReasonMissingTooLong,
				"local disk %s has been missing for %s; if it was replaced it will not come back: recreate the PV and the pods' claims",
				st.Path, now.Sub(since).Round(time.Second))
		}
	}
	for _, rt := range res.Retired {
		c.reportRetire(ctx, rt, pvByName[rt.PV])
	}
	c.metrics.ActiveFakes.Set(float64(active))
	c.metrics.MissingPaths.Set(float64(missingN))
	c.setCondition(ctx, nodeObj, missing)

	dirs := make([]string, 0, len(dirSet))
	for d := range dirSet {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

// problem reports a Warning once per distinct message.
func (c *Controller) problem(ctx context.Context, pv *corev1.PersistentVolume, reason, msg, errKind string) {
	if errKind != "" {
		c.metrics.Errors.WithLabelValues(errKind).Inc()
	}
	if c.lastProblem[pv.Name] == msg {
		return
	}
	c.lastProblem[pv.Name] = msg
	logr.FromContextOrDiscard(ctx).Info(msg, "pv", pv.Name, "reason", reason)
	c.deps.Recorder.Event(pv, corev1.EventTypeWarning, reason, msg)
}

func (c *Controller) reportRetire(ctx context.Context, rt RetireStatus, pv *corev1.PersistentVolume) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", rt.PV, "path", rt.Path, "loop", rt.Loop)
	if rt.Err != nil {
		log.Error(rt.Err, "retiring fake device; will retry")
		c.metrics.Errors.WithLabelValues("retire").Inc()
	}
	if rt.DiskReturned && pv != nil {
		if !c.returned[rt.PV] {
			c.returned[rt.PV] = true
			log.Info("real disk returned")
			c.deps.Recorder.Eventf(pv, corev1.EventTypeNormal, ReasonDiskReturned,
				"local disk %s is back on node %s; the fake device is retired once no pod uses it", rt.Path, c.deps.NodeName)
		}
		c.notifyPods(ctx, pv, rt.Created)
	}
	if rt.Done {
		c.metrics.Retired.Inc()
		delete(c.returned, rt.PV)
		log.Info("fake device retired")
		if pv != nil {
			c.deps.Recorder.Eventf(pv, corev1.EventTypeNormal, ReasonFakeDeviceRetired,
				"fake device for %s detached and removed on node %s", rt.Path, c.deps.NodeName)
			c.annotate(ctx, pv, "")
		}
	}
}

// notifyPods tells the pods of this node that use pv and started while the fake was in place to
// restart, and evicts those that opted in. "Started after the fake was made" is how a pod is
// known to run on the fake: a pod started earlier opened the real disk.
func (c *Controller) notifyPods(ctx context.Context, pv *corev1.PersistentVolume, fakeSince time.Time) {
	if pv.Spec.ClaimRef == nil || c.pods == nil {
		return
	}
	log := logr.FromContextOrDiscard(ctx)
	pods, err := c.pods.Pods(pv.Spec.ClaimRef.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, pod := range pods {
		if c.podsNotified[pod.UID] || pod.DeletionTimestamp != nil || !usesClaim(pod, pv.Spec.ClaimRef.Name) {
			continue
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if !fakeSince.IsZero() && pod.Status.StartTime != nil && pod.Status.StartTime.Time.Before(fakeSince.Add(-time.Second)) {
			continue
		}
		if pod.Annotations[contract.AnnotationRestartOnDiskReturn] != "true" {
			c.podsNotified[pod.UID] = true
			c.deps.Recorder.Eventf(pod, corev1.EventTypeNormal, ReasonRestartPod,
				"real disk returned for PV %s; restart the pod to use it (annotate %s=\"true\" to let pvrescue evict it)",
				pv.Name, contract.AnnotationRestartOnDiskReturn)
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
		err := c.deps.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, ev)
		switch {
		case err == nil || apierrors.IsNotFound(err):
			c.podsNotified[pod.UID] = true
			log.Info("evicted pod so it restarts on the real disk", "pod", pod.Namespace+"/"+pod.Name)
			c.deps.Recorder.Eventf(pod, corev1.EventTypeNormal, ReasonEvicted,
				"real disk returned for PV %s; evicted so the pod restarts on it", pv.Name)
		case apierrors.IsTooManyRequests(err):
			// A PodDisruptionBudget forbids it now: try again next pass.
			log.Info("eviction blocked by a disruption budget; retrying", "pod", pod.Namespace+"/"+pod.Name)
		default:
			log.Error(err, "evict pod", "pod", pod.Namespace+"/"+pod.Name)
			c.metrics.Errors.WithLabelValues("api").Inc()
		}
	}
}

func usesClaim(pod *corev1.Pod, claim string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return true
		}
	}
	return false
}

// annotate sets (dev != "") or removes the fake-device annotation on the PV when it differs.
func (c *Controller) annotate(ctx context.Context, pv *corev1.PersistentVolume, dev string) {
	if pv == nil || pv.Annotations[contract.AnnotationFakeDevice] == dev {
		return
	}
	var val any
	if dev != "" {
		val = dev
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{contract.AnnotationFakeDevice: val}}})
	if _, err := c.deps.Client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logr.FromContextOrDiscard(ctx).Error(err, "annotate PV", "pv", pv.Name)
		c.metrics.Errors.WithLabelValues("api").Inc()
	}
}

// setCondition writes LocalDiskMissing like node-problem-detector: a strategic-merge patch of
// status.conditions (merged by type) through the status subresource, on change or heartbeat.
func (c *Controller) setCondition(ctx context.Context, node *corev1.Node, missing []string) {
	sort.Strings(missing)
	cond := corev1.NodeCondition{Type: ConditionLocalDiskMissing, Status: corev1.ConditionFalse,
		Reason: "LocalDisksPresent", Message: "every watched local block volume has its disk"}
	if len(missing) > 0 {
		cond.Status, cond.Reason = corev1.ConditionTrue, "LocalDiskMissing"
		cond.Message = "local disks missing for PVs: " + strings.Join(missing, ", ")
	}
	key := string(cond.Status) + "|" + cond.Reason + "|" + cond.Message
	now := c.now()
	var existing *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == ConditionLocalDiskMissing {
			existing = &node.Status.Conditions[i]
		}
	}
	same := existing != nil && existing.Status == cond.Status && existing.Reason == cond.Reason && existing.Message == cond.Message
	if same && key == c.lastCondition && now.Sub(c.lastBeat) < c.opts.HeartbeatPeriod {
		return
	}
	cond.LastHeartbeatTime = metav1.NewTime(now)
	cond.LastTransitionTime = metav1.NewTime(now)
	if existing != nil && existing.Status == cond.Status {
		cond.LastTransitionTime = existing.LastTransitionTime
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if _, err := c.deps.Client.CoreV1().Nodes().PatchStatus(ctx, node.Name, patch); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "patch node condition")
		c.metrics.Errors.WithLabelValues("api").Inc()
		return
	}
	c.lastCondition, c.lastBeat = key, now
}
