package s3mount

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// restore brings back one PV's dead targets: through its own driver when the driver may be
// replayed and answers (primary), else with our own s3fs bridge, when the dead mount is one our
// s3fs can reproduce — at once when the driver does not answer (DriverDownBridgeAfter, 0: it
// is restarting or rolled out, and the bridge is handed back the moment it answers, retire.go),
// after BridgeAfter when it answers but the replay fails (bridgeWait).
func (r *Restorer) restore(ctx context.Context, pvName string, ts []target) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pvName)
	// Where one incident's time goes (the window a pod sees is the sum), in the log.
	start := r.clk.Now()
	var took []any
	step := func(name string) {
		took = append(took, name, r.clk.Since(start).Round(time.Microsecond).String())
	}
	defer func() {
		if r.endPass(pvName) {
			r.poke()
		}
		kv := append([]any{"targets", len(ts)}, took...)
		if len(took) > 4 { // a bridge was made: worth a line; a pass that waits repeats every second
			log.Info("restore pass over", kv...)
		} else {
			log.V(1).Info("restore pass over", kv...)
		}
	}()
	// Read live along the chain (claim → PV naming that claim's UID): a replay or a bridge never
	// uses a deleted PV's attributes, nor the cached copy of a PV recreated under the name.
	secret := r.prefetchSecret(ctx, ts)
	answers := r.probeDriver(ctx, ts)
	pv, err := r.livePV(ctx, pvName, ts)
	step("pvReadAt")
	driverDown := false
	if err != nil || pv.Spec.CSI == nil {
		err = fmt.Errorf("get PV %s: %w", pvName, errors.Join(err, s3fs.ErrNotS3))
		r.failed(ts, err)
		r.backoff(pvName)
		return
	}
	if r.os.CSI != nil && r.cfg.MayReplay(pv.Spec.CSI.Driver) {
		rerr := answers(pv.Spec.CSI.Driver)
		if !errors.Is(rerr, csiclient.ErrDriverDown) {
			rerr = r.replay(ctx, pv, ts)
		}
		step("replayOverAt")
		if rerr == nil {
			r.mu.Lock()
			delete(r.retry, pvName)
			r.mu.Unlock()
			return
		}
		r.metrics.Restores.WithLabelValues(MethodReplay, "failure").Inc()
		// A replayed mount that died as it was put (its daemon exited: the plugin restarted
		// again) is the driver's daemons dying, as when it does not answer: bridged at once
		// (the flap limit bounds a driver whose every daemon dies), not backed off as a refusal.
		died := errors.Is(rerr, stack.ErrDiedAfterPut)
		driverDown = errors.Is(rerr, csiclient.ErrDriverDown) || died
		switch {
		case died:
			log.Info("the replayed mount died as it was put (its daemon exited): bridging", "err", rerr.Error())
		case driverDown:
			log.V(1).Info("driver does not answer", "err", rerr.Error())
		default:
			log.Error(rerr, "replay through the driver failed", "reason", Reason(rerr))
			r.failed(ts, rerr)
		}
		if wait := r.bridgeWait(ctx, pvName, ts, driverDown); wait > 0 {
			log.V(1).Info("waiting for the driver before bridging", "wait", wait, "driverDown", driverDown)
			if !driverDown {
				r.backoff(pvName)
			}
			return
		}
	}
	// One table for every target's check: a pass over 100 targets read it 100 times before the
	// bridge could start (Cover reads it again, fresh, before it acts on each target).
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		r.metrics.Restores.WithLabelValues(MethodBridge, "failure").Add(float64(len(ts)))
		r.failed(ts, err)
		r.backoff(pvName)
		return
	}
	fuseType := r.cfg.S3.Profile(pv.Spec.CSI.Driver).FUSEType
	var bridgeable []target
	for _, t := range ts {
		if berr := r.bridgeable(table, t, fuseType); berr != nil {
			r.metrics.Restores.WithLabelValues(MethodBridge, "failure").Inc()
			r.failed([]target{t}, berr)
			err = errors.Join(err, berr)
			continue
		}
		bridgeable = append(bridgeable, t)
	}
	if len(bridgeable) == 0 {
		r.backoff(pvName)
		return
	}
	bridgeMount := r.layout.MountPoint(pvName)
	if serr := r.bridges.Ensure(ctx, pvName, func(ctx context.Context) (s3fs.Volume, s3fs.Credentials, error) { return r.resolve(ctx, pv, secret()) }); serr != nil {
		log.Error(serr, "restore failed", "reason", Reason(serr))
		r.metrics.Restores.WithLabelValues(MethodBridge, "failure").Inc()
		r.failed(bridgeable, serr)
		r.backoff(pvName)
		return
	}
	step("bridgeUpAt")
	dead := make([][]stack.Mount, len(bridgeable))
	// One bridge mount goes over every target: its daemon is asked once. Each bind reads the
	// mount table itself and writes the record of what we put where (handed.json).
	pass := &bindPass{answered: stack.NewAnswers()}
	for i, t := range bridgeable {
		var berr error
		if dead[i], berr = r.bindTarget(ctx, bridgeMount, t, pass); berr != nil {
			err = errors.Join(err, berr)
			r.metrics.Restores.WithLabelValues(MethodBridge, "failure").Inc()
			r.failed([]target{t}, berr)
		}
	}
	step("targetsBoundAt")
	ds := make([]deadAt, 0, len(bridgeable))
	for i, t := range bridgeable {
		if len(dead[i]) > 0 {
			ds = append(ds, deadAt{t, dead[i]})
		}
	}
	r.remountAll(ctx, ds)
	step("containersDoneAt")
	if driverDown {
		// Counted even when some target failed: the s3fs was started (or kept) for this death.
		r.bridgedForDriverDown(pvName)
	}
	if err != nil {
		r.backoff(pvName)
		return
	}
	r.mu.Lock()
	delete(r.retry, pvName)
	r.mu.Unlock()
}

// prefetched is a credentials secret read live at the start of a restore pass.
type prefetched struct {
	ref    corev1.SecretReference
	secret *corev1.Secret
	err    error
}

// prefetchSecret starts the live read of the secret the PV names for a bridge, as discovery
// read it (the view's copy), beside the pass's live read of the claim chain: both are round
// trips to the API server, tens of ms each on a busy control plane, and a bridge for a driver
// that does not answer waited for them in turn. The answer is used only if the PV read live
// names the same secret (resolve); it costs one GET per incident that is not bridged. The
// returned func waits for the read (nil: nothing was read).
func (r *Restorer) prefetchSecret(ctx context.Context, ts []target) func() *prefetched {
	none := func() *prefetched { return nil }
	if len(ts) == 0 || ts[0].cached == nil || ts[0].cached.Spec.CSI == nil {
		return none
	}
	pv := ts[0].cached
	vol, err := s3fs.ResolveVolume(pv, r.cfg.S3.Parameters, r.cfg.S3.Profile(pv.Spec.CSI.Driver))
	if err != nil || vol.SecretRef == nil {
		return none
	}
	ref := *vol.SecretRef
	done := make(chan *prefetched, 1)
	go func() {
		secret, err := r.d.View.Secret(ctx, ref.Namespace, ref.Name)
		done <- &prefetched{ref: ref, secret: secret, err: err}
	}()
	var once sync.Once
	var got *prefetched
	return func() *prefetched {
		once.Do(func() { got = <-done })
		return got
	}
}

// probeDriver starts asking whether the node plugin of the driver the PV names, as discovery
// read it (the view's copy), answers (csiclient.Client.Answers), beside the pass's live read of
// the claim chain: both wait on others, and a plugin that does not answer took 18–68 ms to say
// so after the PV's read (a registration socket asked, then the plugin's). The returned func
// gives the answer for the driver the live PV names: nil (so the replay is tried as before)
// when it names another one or nothing was asked.
func (r *Restorer) probeDriver(ctx context.Context, ts []target) func(driver string) error {
	if r.os.CSI == nil || len(ts) == 0 || ts[0].cached == nil || ts[0].cached.Spec.CSI == nil ||
		!r.cfg.MayReplay(ts[0].cached.Spec.CSI.Driver) {
		return func(string) error { return nil }
	}
	asked := ts[0].cached.Spec.CSI.Driver
	answer := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, r.opts.MountTimeout)
		defer cancel()
		answer <- r.csi.Answers(cctx, asked)
	}()
	return func(driver string) error {
		err := <-answer
		if driver != asked {
			return nil
		}
		return err
	}
}

// livePV reads, from the API server, the PV of pvName that the claims of ts lead to: every
// target's claim must be bound to it, and all to one PV object (one UID). What a replay or a
// bridge uses: never a deleted PV's attributes, nor a PV recreated under the name after the
// chain was checked.
//
// Each claim is read once: pods sharing a claim (a Deployment's replicas on one node) lead to
// the same objects, and one incident's live reads would otherwise grow with its pods (two
// requests per pod, in sequence, before anything is restored).
//
// The PV is read while the first claim is: the two reads one after the other were 50–100 ms of
// a loaded API server before a bridge could start. The claim still decides: the PV read early
// counts only when the claim, read live, names pvName and the PV's claimRef names the claim;
// else the chain is read again, in order.
func (r *Restorer) livePV(ctx context.Context, pvName string, ts []target) (*corev1.PersistentVolume, error) {
	var pv *corev1.PersistentVolume
	var uid types.UID
	early := r.readPVLive(ctx, pvName)
	read := map[types.NamespacedName]bool{}
	for _, t := range ts {
		claim := types.NamespacedName{Namespace: t.pod.Namespace, Name: t.claim}
		if read[claim] {
			continue
		}
		read[claim] = true
		p, err := r.liveChain(ctx, t.pod.Namespace, t.claim, pvName, early)
		if err != nil {
			return nil, err
		}
		if p.Name != pvName {
			return nil, fmt.Errorf("%w: PVC %s/%s now leads to PV %s, not %s", ErrClaimChain, t.pod.Namespace, t.claim, p.Name, pvName)
		}
		if pv != nil && p.UID != uid {
			return nil, fmt.Errorf("%w: PV %s changed (uid %s, then %s) while it was read", ErrClaimChain, pvName, uid, p.UID)
		}
		pv, uid = p, p.UID
	}
	if pv == nil {
		return nil, fmt.Errorf("%w: no target of PV %s", ErrClaimChain, pvName)
	}
	return pv, nil
}

// readPVLive starts reading PV name from the API server (its cached copy forgotten) and returns
// a function that waits for that one read's result.
func (r *Restorer) readPVLive(ctx context.Context, name string) func() (*corev1.PersistentVolume, error) {
	type result struct {
		pv  *corev1.PersistentVolume
		err error
	}
	done := make(chan result, 1) // the read ends on its own when nobody waits for it
	go func() {
		r.d.View.Forget("PersistentVolume", "", name)
		pv, err := r.d.View.PersistentVolume(ctx, name)
		done <- result{pv, err}
	}()
	return sync.OnceValues(func() (*corev1.PersistentVolume, error) {
		res := <-done
		return res.pv, res.err
	})
}

// liveChain is chain(live) for a claim expected to lead to pvName, whose live read pv started
// already (readPVLive): the claim is read live; when it is Bound to pvName and pv's claimRef
// names it, that is the chain; anything else reads the chain again, in order, as chain does.
func (r *Restorer) liveChain(ctx context.Context, namespace, claim, pvName string, pv func() (*corev1.PersistentVolume, error)) (*corev1.PersistentVolume, error) {
	r.d.View.Forget("PersistentVolumeClaim", namespace, claim)
	pvc, err := r.d.View.PersistentVolumeClaim(ctx, namespace, claim)
	if err == nil && pvc.Spec.VolumeName == pvName {
		if p, perr := pv(); perr == nil && claimRefNames(p, pvc) {
			return p, nil
		}
	}
	_, p, err := r.chain(ctx, namespace, claim, true)
	return p, err
}

// bridgeWait is how much longer the targets must stay dead before a bridge (0: now): when the
// driver does not answer (driverDown), DriverDownBridgeAfter (0 by default) unless the PV's
// bridges flap (flapping), else BridgeAfter. A target whose top mount is our own dead bridge
// is bridged again at once: its driver was already found down, and waiting again would only
// lengthen the outage.
func (r *Restorer) bridgeWait(ctx context.Context, pvName string, ts []target, driverDown bool) time.Duration {
	after := r.cfg.S3.BridgeAfter.Duration
	if driverDown {
		after = r.cfg.S3.DriverDownBridgeAfter.Duration
		if n := r.flapping(pvName); n > 0 && r.cfg.S3.BridgeAfter.Duration > after {
			logr.FromContextOrDiscard(ctx).Info("the driver does not answer again: this PV's bridges flap, so the bridge waits s3.bridgeAfter",
				"pv", pvName, "bridges", n, "window", r.cfg.S3.BridgeFlapWindow.Duration, "wait", r.cfg.S3.BridgeAfter.Duration)
			after = r.cfg.S3.BridgeAfter.Duration
		}
	}
	if table, err := r.os.Mounter.MountTable(); err == nil {
		for _, t := range ts {
			if top, ok := table.Top(t.path); ok {
				if _, ours := stack.PVFromFSName(top.Source); ours {
					return 0
				}
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var wait time.Duration
	for _, t := range ts {
		since, ok := r.deadSince[t.path]
		if !ok {
			continue
		}
		wait = max(wait, after-r.clk.Since(since))
	}
	return wait
}

// bridgedForDriverDown records a bridge of pv made because its driver did not answer, for the
// flap limit.
func (r *Restorer) bridgedForDriverDown(pv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.driverDownBridges[pv] = append(r.recentBridgesLocked(pv), r.clk.Now())
}

// flapping returns how many bridges of pv its driver's absence started within
// s3.bridgeFlapWindow when that reaches s3.bridgeFlapLimit (a plugin in a crash loop), else 0.
func (r *Restorer) flapping(pv string) int {
	limit := r.cfg.S3.BridgeFlapLimit
	if limit <= 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	recent := r.recentBridgesLocked(pv)
	if len(recent) == 0 {
		delete(r.driverDownBridges, pv)
	} else {
		r.driverDownBridges[pv] = recent
	}
	if len(recent) < limit {
		return 0
	}
	return len(recent)
}

// recentBridgesLocked is pv's record of driver-down bridges within the flap window.
func (r *Restorer) recentBridgesLocked(pv string) []time.Time {
	window := r.cfg.S3.BridgeFlapWindow.Duration
	return slices.DeleteFunc(r.driverDownBridges[pv], func(at time.Time) bool { return r.clk.Since(at) >= window })
}

// bridgeable: our s3fs can stand in only for a dead mount of the driver of a type its profile
// bridges: its s3fs type (fuseType) or that of a mounter bridged with s3fs (geesefs's
// fuse.geesefs, rclone's fuse.rclone). Whether the PV's current mounter is one of them is
// resolve's question (s3fs.ResolveVolume, on the PV read live).
func (r *Restorer) bridgeable(table stack.Table, t target, fuseType string) error {
	prof := r.cfg.S3.Profile(t.driver)
	types := append(prof.BridgedFUSETypes(), fuseType)
	mounts := table.Stack(t.path)
	for i := len(mounts) - 1; i >= 0; i-- {
		if _, ours := stack.PVFromFSName(mounts[i].Source); ours {
			continue
		}
		if !slices.Contains(types, mounts[i].FSType) {
			return fmt.Errorf("%w: the driver's dead mount is %q; the profile of %s bridges %s", s3fs.ErrCannotReproduce,
				mounts[i].FSType, t.driver, strings.Join(prof.BridgedFUSETypes(), ", "))
		}
		return nil
	}
	return nil
}

func (r *Restorer) failed(ts []target, err error) {
	if errors.Is(err, stack.ErrResultRefused) {
		r.refused(ts, err)
		return
	}
	reason := Reason(err)
	r.metrics.Failures.WithLabelValues(reason).Inc()
	for _, t := range ts {
		r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, contract.ReasonMountRestoreFailed,
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
	wait := r.opts.BackoffInitial
	for i := 1; i < rs.failures && wait < r.opts.BackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, r.opts.BackoffMax)
	rs.next = r.clk.Now().Add(wait)
	rs.socketGen = r.socketGen
	if gen, ok := r.passGen[pv]; ok { // a pass's failure: judged against the sockets since it began
		rs.socketGen = gen
	}
}
