package s3mount

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/pvrescue/pvrescue/internal/config"
)

// Event reasons on the pod.
const (
	EventMountRestored      = "MountRestored"
	EventMountRestoreFailed = "MountRestoreFailed"
)

// credsTmpfsSize bounds the tmpfs holding passwd files (a few hundred bytes each).
const credsTmpfsSize = 1 << 20

// Deps is what the restorer needs from the agent.
type Deps struct {
	Client     kubernetes.Interface
	NodeName   string
	Config     *config.Config
	Recorder   record.EventRecorder
	Registerer prometheus.Registerer
	OS         OS

	// Tuning; zero values take the defaults.
	// BackoffInitial and BackoffMax bound the wait between failed restores of one PV (2s, 2m).
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// MountTimeout bounds the wait for a started s3fs to answer at its staging directory (60s;
	// s3fs retries an unreachable endpoint for about 20s before giving up).
	MountTimeout time.Duration
	// KillGrace is how long a stopped s3fs gets between SIGTERM and SIGKILL (5s).
	KillGrace time.Duration
}

// Restorer finds dead s3fs mounts of this node's pods and restores them.
type Restorer struct {
	d       Deps
	cfg     *config.Config
	layout  Layout
	metrics *Metrics

	factories []informers.SharedInformerFactory
	pods      corelisters.PodLister
	pvs       corelisters.PersistentVolumeLister
	pvcs      corelisters.PersistentVolumeClaimLister
	scs       storagelisters.StorageClassLister

	kick chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	stagings  map[string]*staging    // by PV
	retry     map[string]*retryState // by PV
	inflight  map[string]bool        // by PV
	deadSince map[string]time.Time   // by target path
}

type staging struct {
	proc    Process // nil when adopted from an earlier agent
	started time.Time
	stopped bool // we stopped it on purpose; its exit is not a failure
}

type retryState struct {
	failures int
	next     time.Time
}

// target is one pod's mount of one S3 PV.
type target struct {
	pod         *corev1.Pod
	pv          string
	path        string
	readOnly    bool
	terminating bool
}

// New checks the dependencies and prepares the informers; Run starts them.
func New(d Deps) (*Restorer, error) {
	switch {
	case d.Client == nil:
		return nil, errors.New("s3mount: Deps.Client is required")
	case d.NodeName == "":
		return nil, errors.New("s3mount: Deps.NodeName is required")
	case d.Config == nil:
		return nil, errors.New("s3mount: Deps.Config is required")
	case d.Recorder == nil:
		return nil, errors.New("s3mount: Deps.Recorder is required")
	case d.OS.Mounter == nil || d.OS.Procs == nil || d.OS.Statfs == nil || d.OS.FS == nil:
		return nil, errors.New("s3mount: Deps.OS must have every implementation set")
	}
	if d.BackoffInitial <= 0 {
		d.BackoffInitial = 2 * time.Second
	}
	if d.BackoffMax <= 0 {
		d.BackoffMax = 2 * time.Minute
	}
	if d.MountTimeout <= 0 {
		d.MountTimeout = 60 * time.Second
	}
	if d.KillGrace <= 0 {
		d.KillGrace = 5 * time.Second
	}
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Restorer{
		d: d, cfg: d.Config, layout: Layout{StateDir: d.Config.StateDir}, metrics: m,
		kick:      make(chan struct{}, 1),
		stagings:  map[string]*staging{},
		retry:     map[string]*retryState{},
		inflight:  map[string]bool{},
		deadSince: map[string]time.Time{},
	}
	podFactory := informers.NewSharedInformerFactoryWithOptions(d.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", d.NodeName).String()
		}))
	factory := informers.NewSharedInformerFactory(d.Client, 0)
	podInformer := podFactory.Core().V1().Pods()
	r.pods = podInformer.Lister()
	r.pvs = factory.Core().V1().PersistentVolumes().Lister()
	r.pvcs = factory.Core().V1().PersistentVolumeClaims().Lister()
	r.scs = factory.Storage().V1().StorageClasses().Lister()
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.poke() },
		UpdateFunc: func(any, any) {},
		DeleteFunc: func(any) { r.poke() },
	}); err != nil {
		return nil, fmt.Errorf("s3mount: pod handler: %w", err)
	}
	r.factories = []informers.SharedInformerFactory{podFactory, factory}
	return r, nil
}

// Metrics returns the restorer's metrics (for tests and the agent's status page).
func (r *Restorer) Metrics() *Metrics { return r.metrics }

func (r *Restorer) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run checks the mounts at start and every CheckInterval until ctx ends. The s3fs processes it
// started keep running after it returns: they serve pods, and the next agent re-adopts them.
func (r *Restorer) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("s3mount")
	ctx = logr.NewContext(ctx, log)
	if err := r.prepare(ctx); err != nil {
		return err
	}
	for _, f := range r.factories {
		f.Start(ctx.Done())
	}
	defer func() {
		for _, f := range r.factories {
			f.Shutdown()
		}
	}()
	for _, f := range r.factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("s3mount: cache of %v did not sync: %w", typ, ctx.Err())
			}
		}
	}
	if err := r.adopt(ctx); err != nil {
		log.Error(err, "re-adopting staging mounts")
	}
	log.Info("watching S3 volume mounts", "node", r.d.NodeName, "interval", r.cfg.S3.CheckInterval.Duration)
	tick := time.NewTicker(r.cfg.S3.CheckInterval.Duration)
	defer tick.Stop()
	for {
		if err := r.Sync(ctx); err != nil {
			log.Error(err, "checking S3 volume mounts")
		}
		select {
		case <-ctx.Done():
			r.wg.Wait()
			return nil
		case <-tick.C:
		case <-r.kick:
		}
	}
}

// prepare creates the state directories and the tmpfs for credentials.
func (r *Restorer) prepare(ctx context.Context) error {
	for _, dir := range []string{r.layout.StagingRoot(), r.layout.CredsDir()} {
		if err := r.d.OS.FS.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("s3mount: create %s: %w", dir, err)
		}
	}
	table, err := r.d.OS.Mounter.MountTable()
	if err != nil {
		return fmt.Errorf("s3mount: %w", err)
	}
	if top, ok := table.Top(r.layout.CredsDir()); ok && top.FSType == "tmpfs" {
		return nil
	}
	if err := r.d.OS.Mounter.MountTmpfs(r.layout.CredsDir(), credsTmpfsSize); err != nil {
		return fmt.Errorf("s3mount: credentials tmpfs: %w", err)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("mounted tmpfs for credentials", "path", r.layout.CredsDir())
	return nil
}

// adopt takes over the healthy staging mounts an earlier agent left and drops the dead ones.
func (r *Restorer) adopt(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	table, err := r.d.OS.Mounter.MountTable()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, m := range table {
		pv, ok := r.layout.PVFromStaging(m.MountPoint)
		if !ok || seen[pv] {
			continue
		}
		seen[pv] = true
		if err := r.d.OS.Statfs.Statfs(ctx, m.MountPoint, r.cfg.S3.StatfsTimeout.Duration); err == nil {
			r.mu.Lock()
			r.stagings[pv] = &staging{started: time.Now()}
			r.mu.Unlock()
			log.Info("re-adopted healthy staging mount", "pv", pv, "path", m.MountPoint)
			continue
		}
		log.Info("dropping dead staging mount left by an earlier agent", "pv", pv, "path", m.MountPoint)
		r.unmountAll(m.MountPoint, table)
	}
	return nil
}

// Sync runs one check: find dead targets, start restores, clean up after gone pods.
func (r *Restorer) Sync(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	table, err := r.d.OS.Mounter.MountTable()
	if err != nil {
		return err
	}
	targets, live := r.discover(ctx)
	needs := map[string][]target{}
	now := time.Now()
	for _, t := range targets {
		if t.terminating || !table.IsMountPoint(t.path) {
			continue // kubelet has not published it (or tore it down): not ours to create
		}
		serr := r.d.OS.Statfs.Statfs(ctx, t.path, r.cfg.S3.StatfsTimeout.Duration)
		switch h := Classify(true, serr); h {
		case Healthy:
			r.mu.Lock()
			delete(r.deadSince, t.path)
			r.mu.Unlock()
		case Dead:
			r.mu.Lock()
			if _, known := r.deadSince[t.path]; !known {
				r.deadSince[t.path] = now
				r.metrics.DeadFound.Inc()
				log.Info("found dead S3 mount", "pod", klogRef(t.pod), "pv", t.pv, "path", t.path, "err", serr.Error())
			}
			r.mu.Unlock()
			needs[t.pv] = append(needs[t.pv], t)
		default:
			log.V(1).Info("cannot tell mount health", "path", t.path, "err", serr.Error())
		}
	}
	pvs := make([]string, 0, len(needs))
	for pv := range needs {
		pvs = append(pvs, pv)
	}
	sort.Strings(pvs)
	for _, pv := range pvs {
		r.mu.Lock()
		rs := r.retry[pv]
		busy := r.inflight[pv] || (rs != nil && now.Before(rs.next))
		if !busy {
			r.inflight[pv] = true
		}
		r.mu.Unlock()
		if busy {
			continue
		}
		r.wg.Add(1)
		go func(pv string, ts []target) {
			defer r.wg.Done()
			r.restore(ctx, pv, ts)
		}(pv, needs[pv])
	}
	if live == nil {
		return nil // pod listing failed: do not mistake every pod for gone
	}
	r.cleanupBinds(ctx, table, live)
	r.cleanupStagings(ctx, table, targets, live)
	return nil
}

// discover lists this node's S3 volume targets and the UIDs of its live pods.
func (r *Restorer) discover(ctx context.Context) ([]target, map[string]bool) {
	log := logr.FromContextOrDiscard(ctx)
	pods, err := r.pods.List(labels.Everything())
	if err != nil {
		log.Error(err, "list pods")
		return nil, nil
	}
	live := map[string]bool{}
	var out []target
	for _, pod := range pods {
		if pod.Spec.NodeName != r.d.NodeName {
			continue
		}
		if podGone(pod) {
			continue
		}
		live[string(pod.UID)] = true
		for _, vol := range pod.Spec.Volumes {
			src := vol.PersistentVolumeClaim
			if src == nil {
				continue
			}
			pvc, err := r.pvcs.PersistentVolumeClaims(pod.Namespace).Get(src.ClaimName)
			if err != nil || pvc.Spec.VolumeName == "" {
				continue
			}
			pv, err := r.pvs.Get(pvc.Spec.VolumeName)
			if err != nil {
				continue
			}
			if _, ok := S3Driver(r.cfg, pv, pvc); !ok {
				continue
			}
			path := TargetPath(r.cfg.KubeletDir, string(pod.UID), pv.Name)
			data, err := r.d.OS.FS.ReadFile(strings.TrimSuffix(path, "/mount") + "/" + VolDataFile)
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					log.V(1).Info("cannot read vol_data.json", "path", path, "err", err.Error())
				}
				continue
			}
			vd, err := ParseVolData(data)
			if err == nil {
				err = vd.Check(pv.Name, pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)
			}
			if err != nil {
				log.Info("skipping volume whose vol_data.json does not match", "pod", klogRef(pod), "pv", pv.Name, "err", err.Error())
				continue
			}
			ro := src.ReadOnly || pv.Spec.CSI.ReadOnly || slices.Contains(pv.Spec.MountOptions, "ro")
			// A terminating pod keeps its binds and its staging, but gets no new restores.
			out = append(out, target{pod: pod, pv: pv.Name, path: path, readOnly: ro, terminating: pod.DeletionTimestamp != nil})
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

// restore brings back one PV: a healthy staging mount, then a bind onto each dead target.
func (r *Restorer) restore(ctx context.Context, pv string, ts []target) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pv)
	defer func() {
		r.mu.Lock()
		delete(r.inflight, pv)
		r.mu.Unlock()
	}()
	stagingPath := r.layout.Staging(pv)
	err := r.ensureStaging(ctx, pv)
	if err == nil {
		for _, t := range ts {
			if berr := r.bindTarget(ctx, stagingPath, t); berr != nil {
				err = errors.Join(err, berr)
				r.failed(ctx, []target{t}, berr)
			}
		}
		if err != nil {
			r.backoff(pv)
			return
		}
		r.mu.Lock()
		delete(r.retry, pv)
		r.mu.Unlock()
		return
	}
	log.Error(err, "restore failed", "reason", Reason(err))
	r.failed(ctx, ts, err)
	r.backoff(pv)
}

func (r *Restorer) failed(ctx context.Context, ts []target, err error) {
	reason := Reason(err)
	r.metrics.Failures.WithLabelValues(reason).Inc()
	for _, t := range ts {
		r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, EventMountRestoreFailed,
			"%s: restoring S3 volume %s: %v", reason, t.pv, err)
	}
}

func (r *Restorer) backoff(pv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.retry[pv]
	if rs == nil {
		rs = &retryState{}
		r.retry[pv] = rs
	}
	rs.failures++
	wait := r.d.BackoffInitial
	for i := 1; i < rs.failures && wait < r.d.BackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, r.d.BackoffMax)
	rs.next = time.Now().Add(wait)
}

// bindTarget binds the staging mount onto one target if its top mount is still dead.
func (r *Restorer) bindTarget(ctx context.Context, stagingPath string, t target) error {
	log := logr.FromContextOrDiscard(ctx)
	table, err := r.d.OS.Mounter.MountTable()
	if err != nil {
		return err
	}
	if !table.IsMountPoint(t.path) {
		return nil // torn down meanwhile: nothing to restore, and never mount onto a plain dir
	}
	serr := r.d.OS.Statfs.Statfs(ctx, t.path, r.cfg.S3.StatfsTimeout.Duration)
	if Classify(true, serr) != Dead {
		return nil // healthy again (or unknown): never stack onto it
	}
	ro := t.readOnly
	if top, ok := table.Top(t.path); ok && top.ReadOnly() {
		ro = true
	}
	if err := r.d.OS.Mounter.Bind(stagingPath, t.path, ro); err != nil {
		return err
	}
	if err := r.d.OS.Statfs.Statfs(ctx, t.path, r.cfg.S3.StatfsTimeout.Duration); err != nil {
		return fmt.Errorf("%w: bind at %s does not answer: %w", ErrMount, t.path, err)
	}
	r.mu.Lock()
	since, ok := r.deadSince[t.path]
	delete(r.deadSince, t.path)
	r.mu.Unlock()
	elapsed := time.Duration(0)
	if ok {
		elapsed = time.Since(since)
		r.metrics.TimeToRestore.Observe(elapsed.Seconds())
	}
	r.metrics.Restored.Inc()
	log.Info("restored S3 mount", "pod", klogRef(t.pod), "pv", t.pv, "path", t.path, "readOnly", ro, "afterDetection", elapsed)
	r.d.Recorder.Eventf(t.pod, corev1.EventTypeNormal, EventMountRestored,
		"S3 volume %s mounted again (fresh s3fs bound over the dead mount%s)", t.pv, map[bool]string{true: ", read-only", false: ""}[ro])
	return nil
}

// ensureStaging makes sure the PV's staging directory holds a healthy s3fs mount.
func (r *Restorer) ensureStaging(ctx context.Context, pvName string) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pvName)
	path := r.layout.Staging(pvName)
	table, err := r.d.OS.Mounter.MountTable()
	if err != nil {
		return err
	}
	if table.IsMountPoint(path) {
		if r.d.OS.Statfs.Statfs(ctx, path, r.cfg.S3.StatfsTimeout.Duration) == nil {
			return nil
		}
		// Dead staging: binds made from it keep their own reference, so it can go.
		log.Info("staging mount is dead, mounting again", "path", path)
		r.stopStaging(pvName, false)
		r.unmountAll(path, table)
	}
	vol, creds, err := r.resolve(ctx, pvName)
	if err != nil {
		return err
	}
	passwd := r.layout.PasswdFile(pvName)
	if err := r.d.OS.FS.MkdirAll(path, 0o750); err != nil {
		return fmt.Errorf("%w: create %s: %w", ErrMount, path, err)
	}
	if err := r.d.OS.FS.WriteFile(passwd, PasswdContent(creds), 0o600); err != nil {
		return fmt.Errorf("%w: write passwd file: %w", ErrMount, err)
	}
	args := S3fsArgs(vol, creds, path, passwd)
	log.Info("starting s3fs", "bucket", vol.Bucket, "prefix", vol.Prefix, "staging", path)
	proc, err := r.d.OS.Procs.Start(r.cfg.S3.S3fsPath, args)
	if err != nil {
		r.d.OS.FS.Remove(passwd)
		return err
	}
	st := &staging{proc: proc, started: time.Now()}
	exited := make(chan struct{})
	go func() {
		werr := proc.Wait()
		close(exited)
		r.onExit(ctx, pvName, st, werr)
	}()
	if err := r.waitMounted(ctx, path, pvName, exited); err != nil {
		proc.Kill(r.d.KillGrace)
		<-exited
		if t, terr := r.d.OS.Mounter.MountTable(); terr == nil {
			r.unmountAll(path, t)
		}
		r.d.OS.FS.Remove(passwd)
		out := scrub(proc.Output(), creds)
		return fmt.Errorf("%w: %w; s3fs said: %s", ErrS3fs, err, lastLines(out, 3))
	}
	r.mu.Lock()
	r.stagings[pvName] = st
	r.mu.Unlock()
	log.Info("s3fs staging mount ready", "pid", proc.Pid(), "after", time.Since(st.started))
	return nil
}

// waitMounted waits until our s3fs answers at path, or exits, or MountTimeout passes.
func (r *Restorer) waitMounted(ctx context.Context, path, pvName string, exited <-chan struct{}) error {
	deadline := time.Now().Add(r.d.MountTimeout)
	for {
		table, err := r.d.OS.Mounter.MountTable()
		if err != nil {
			return err
		}
		if top, ok := table.Top(path); ok && top.Source == FSName(pvName) {
			// s3fs checks the bucket inside FUSE init; statfs waits for that answer.
			serr := r.d.OS.Statfs.Statfs(ctx, path, r.d.MountTimeout)
			select {
			case <-exited:
				return errors.New("s3fs exited")
			default:
			}
			if serr == nil {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("s3fs exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not mounted after %s", r.d.MountTimeout)
		}
	}
}

// onExit supervises an s3fs we started: an unexpected exit triggers a check at once, so the dead
// binds are restored without waiting for the next tick; a quick death counts as a failure.
func (r *Restorer) onExit(ctx context.Context, pv string, st *staging, err error) {
	r.mu.Lock()
	current := r.stagings[pv] == st
	stopped := st.stopped
	if current {
		delete(r.stagings, pv)
	}
	r.mu.Unlock()
	if stopped || !current {
		return
	}
	r.metrics.StagingRestarts.Inc()
	logr.FromContextOrDiscard(ctx).Info("s3fs exited", "pv", pv, "err", fmt.Sprint(err), "lived", time.Since(st.started))
	if time.Since(st.started) < 10*time.Second {
		r.backoff(pv)
	}
	r.poke()
}

// stopStaging stops our s3fs for pv (if we own one) and forgets it.
func (r *Restorer) stopStaging(pv string, wait bool) {
	r.mu.Lock()
	st := r.stagings[pv]
	delete(r.stagings, pv)
	if st != nil {
		st.stopped = true
	}
	r.mu.Unlock()
	if st == nil || st.proc == nil {
		return
	}
	if wait {
		st.proc.Kill(r.d.KillGrace)
	} else {
		go st.proc.Kill(r.d.KillGrace)
	}
}

// unmountAll lazily unmounts every mount stacked at path (only used on agent-owned paths).
func (r *Restorer) unmountAll(path string, table MountTable) {
	for range table.Stack(path) {
		if err := r.d.OS.Mounter.Unmount(path, true); err != nil {
			return
		}
	}
}

// resolve reads the PV, its StorageClass and secret into what s3fs needs.
func (r *Restorer) resolve(ctx context.Context, pvName string) (Volume, Credentials, error) {
	pv, err := r.pvs.Get(pvName)
	if err != nil {
		return Volume{}, Credentials{}, fmt.Errorf("get PV %s: %w", pvName, err)
	}
	var sc *storagev1.StorageClass
	if name := pv.Spec.StorageClassName; name != "" {
		if got, err := r.scs.Get(name); err == nil {
			sc = got
		}
	}
	vol, err := ResolveVolume(pv, sc, r.cfg.S3.Parameters)
	if err != nil {
		return Volume{}, Credentials{}, err
	}
	ref := vol.SecretRef
	secret, err := r.d.Client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Volume{}, Credentials{}, fmt.Errorf("%w: %s/%s", ErrSecretNotFound, ref.Namespace, ref.Name)
	}
	if err != nil {
		return Volume{}, Credentials{}, fmt.Errorf("get secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	creds, err := ParseCredentials(secret, r.cfg.S3.SecretKeys)
	if err != nil {
		return Volume{}, Credentials{}, err
	}
	return vol, creds, nil
}

// cleanupBinds removes our binds from targets of pods that are gone, top down, so kubelet's
// teardown finds only the driver's own mount.
func (r *Restorer) cleanupBinds(ctx context.Context, table MountTable, live map[string]bool) {
	log := logr.FromContextOrDiscard(ctx)
	done := map[string]bool{}
	for _, m := range table {
		if _, ours := PVFromFSName(m.Source); !ours || done[m.MountPoint] {
			continue
		}
		uid, _, ok := ParseTargetPath(r.cfg.KubeletDir, m.MountPoint)
		if !ok || live[uid] {
			continue
		}
		done[m.MountPoint] = true
		stack := table.Stack(m.MountPoint)
		removed := 0
		for i := len(stack) - 1; i >= 0; i-- {
			if _, ours := PVFromFSName(stack[i].Source); !ours {
				break // someone else's mount on top or below: stop
			}
			if err := r.d.OS.Mounter.Unmount(m.MountPoint, true); err != nil {
				log.Error(err, "removing our bind from a gone pod's target", "path", m.MountPoint)
				break
			}
			removed++
		}
		r.mu.Lock()
		delete(r.deadSince, m.MountPoint)
		r.mu.Unlock()
		log.Info("removed binds of a gone pod", "podUID", uid, "path", m.MountPoint, "binds", removed)
	}
}

// cleanupStagings stops staging mounts no target on this node uses any more.
func (r *Restorer) cleanupStagings(ctx context.Context, table MountTable, targets []target, live map[string]bool) {
	log := logr.FromContextOrDiscard(ctx)
	used := map[string]bool{}
	for _, t := range targets {
		used[t.pv] = true
	}
	// A bind of ours on a live pod's target also keeps its staging, even when discovery missed
	// the pod's volume this round (vol_data.json unreadable, a lister lagging): stopping s3fs
	// would kill that pod's mount.
	for _, m := range table {
		pv, ours := PVFromFSName(m.Source)
		if !ours {
			continue
		}
		if uid, _, ok := ParseTargetPath(r.cfg.KubeletDir, m.MountPoint); ok && live[uid] {
			used[pv] = true
		}
	}
	candidates := map[string]bool{}
	for _, m := range table {
		if pv, ok := r.layout.PVFromStaging(m.MountPoint); ok {
			candidates[pv] = true
		}
	}
	r.mu.Lock()
	for pv := range r.stagings {
		candidates[pv] = true
	}
	r.mu.Unlock()
	for pv := range candidates {
		r.mu.Lock()
		busy := used[pv] || r.inflight[pv]
		r.mu.Unlock()
		if busy {
			continue
		}
		path := r.layout.Staging(pv)
		r.stopStaging(pv, true)
		if fresh, err := r.d.OS.Mounter.MountTable(); err == nil {
			r.unmountAll(path, fresh)
		}
		if err := r.d.OS.FS.Remove(r.layout.PasswdFile(pv)); err != nil {
			log.Error(err, "removing passwd file", "pv", pv)
		}
		r.mu.Lock()
		delete(r.retry, pv)
		r.mu.Unlock()
		log.Info("stopped unused staging mount", "pv", pv, "path", path)
	}
}

// scrub removes credential values from text that may reach logs or Events.
func scrub(s string, c Credentials) string {
	for _, v := range []string{c.SecretAccessKey, c.AccessKeyID} {
		if len(v) >= 3 {
			s = strings.ReplaceAll(s, v, "<redacted>")
		}
	}
	return s
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
