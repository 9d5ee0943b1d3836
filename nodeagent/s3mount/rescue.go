package s3mount

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Options tune the rescue; NewOptions gives the defaults.
type Options struct {
	// BackoffInitial and BackoffMax bound the wait between failed restores of one PV.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// MountTimeout bounds the wait for a started s3fs to answer at the bridge's own mount point
	// (s3fs retries an unreachable endpoint for about 20s before giving up).
	MountTimeout time.Duration
	// KillGrace is how long a stopped s3fs gets between SIGTERM and SIGKILL.
	KillGrace time.Duration
	// QuickExit: an s3fs of ours that exits sooner than this after its start counts as a
	// failed restore (backoff).
	QuickExit time.Duration
	// BridgeCgroup is the cgroup (relative to every hierarchy's root) under which each bridge's
	// s3fs gets a group of its own, outside the agent container's cgroups, so that it survives
	// the container (doc.go). Empty: bridges stay in the agent's cgroups and die with it.
	BridgeCgroup string
	// BridgeNetNS is the network namespace (a /proc/<pid>/ns/net path) each bridge's s3fs runs
	// in. The default, init's, is the node's (the agent runs with hostPID): in the agent pod's
	// own namespace s3fs would lose its network (only lo is left) when the agent pod is deleted,
	// and every read through the surviving bridge would hang. Empty: the agent's own namespace.
	BridgeNetNS string
}

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{
		BackoffInitial: 2 * time.Second,
		BackoffMax:     2 * time.Minute,
		MountTimeout:   60 * time.Second,
		KillGrace:      5 * time.Second,
		QuickExit:      10 * time.Second,
		BridgeCgroup:   "pvrescue/s3",
		BridgeNetNS:    "/proc/1/ns/net",
	}
}

// withDefaults fills zero fields from NewOptions.
func (o Options) withDefaults() Options {
	d := NewOptions()
	for _, f := range []struct{ v, def *time.Duration }{
		{&o.BackoffInitial, &d.BackoffInitial}, {&o.BackoffMax, &d.BackoffMax},
		{&o.MountTimeout, &d.MountTimeout}, {&o.KillGrace, &d.KillGrace},
		{&o.QuickExit, &d.QuickExit},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return o
}

// Validate reports nonsensical tuning.
func (o Options) Validate() error {
	var errs []error
	for name, v := range map[string]time.Duration{"BackoffInitial": o.BackoffInitial, "BackoffMax": o.BackoffMax,
		"MountTimeout": o.MountTimeout, "KillGrace": o.KillGrace, "QuickExit": o.QuickExit} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("s3mount: Options.%s must not be negative, got %s", name, v))
		}
	}
	if g := o.BridgeCgroup; g != "" && (path.IsAbs(g) || path.Clean(g) != g || g == "." || strings.HasPrefix(g, "..")) {
		errs = append(errs, fmt.Errorf("s3mount: Options.BridgeCgroup must be a clean relative path, got %q", g))
	}
	if o.BackoffMax > 0 && o.BackoffInitial > o.BackoffMax {
		errs = append(errs, fmt.Errorf("s3mount: Options.BackoffInitial (%s) exceeds BackoffMax (%s)", o.BackoffInitial, o.BackoffMax))
	}
	return errors.Join(errs...)
}

// Restorer finds dead FUSE mounts of this node's S3 pods and restores them.
type Restorer struct {
	d       nodeagent.Deps
	os      OS
	opts    Options
	cfg     *config.Config
	clk     clock.WithTicker
	layout  s3fs.Layout
	metrics *Metrics

	kick chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	retry    map[string]*retryState // by PV
	inflight map[string]bool        // by PV
	// deadDuring are the PVs with dead targets found while a pass of that PV was in flight: the
	// end of that pass wakes the next at once (endPass), which restores them.
	deadDuring map[string]bool
	deadSince  map[string]time.Time // by target path
	hungSince  map[string]time.Time // by target path: first statfs timeout of a run of them
	// driverDownBridges are, by PV, when bridges were made because the driver did not answer
	// (within s3.bridgeFlapWindow): the flap limit (restore.go).
	driverDownBridges map[string][]time.Time
	// socketSeen is when a node plugin's socket last appeared (zero: never); socketGen counts
	// the sockets that appeared, and passGen is, by PV in flight, socketGen when its pass began.
	socketSeen time.Time
	socketGen  uint64
	passGen    map[string]uint64
	// lastHungCondition is the S3MountHung condition last written ("" none yet); Sync only.
	lastHungCondition string
	healthy           map[string]healthKey // by target path: the pvrescue_s3_mount_healthy series

	// rules place mounts at kubelet paths and keep the record of those we put there.
	rules *stack.Rules
	// bridges are our own s3fs processes and their mounts.
	bridges *s3fs.Supervisor
	// csi talks to the node plugins (nil Dialer: replay off).
	csi *csiclient.Client
	// goneTargetsMounted counts the targets of gone pods that the last pass left holding
	// something of ours (a mount, or a recorded one) to act on after kubelet's teardown.
	goneTargetsMounted int
}

type healthKey struct{ pv, namespace, pod string }

type retryState struct {
	failures int
	next     time.Time
	// socketGen is the Restorer's socketGen when the failed pass began: a plugin socket that
	// appeared since (a new plugin process) ends the wait (claim).
	socketGen uint64
}

// New checks the dependencies and registers for pod changes on deps.View; Run does the work.
func New(deps nodeagent.Deps, os OS, opts Options) (*Restorer, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	if os.Mounter == nil || os.Procs == nil || os.Cgroups == nil || os.Statfs == nil || os.FS == nil {
		return nil, errors.New("s3mount: OS must have every implementation set")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	m, err := NewMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("s3mount: %w", err)
	}
	r := &Restorer{
		d: deps, os: os, opts: opts, cfg: deps.Config, clk: deps.Clock,
		layout: s3fs.Layout{StateDir: deps.Config.StateDir}, metrics: m,
		kick:              make(chan struct{}, 1),
		retry:             map[string]*retryState{},
		inflight:          map[string]bool{},
		passGen:           map[string]uint64{},
		deadDuring:        map[string]bool{},
		deadSince:         map[string]time.Time{},
		hungSince:         map[string]time.Time{},
		driverDownBridges: map[string][]time.Time{},
		healthy:           map[string]healthKey{},
	}
	r.bridges = s3fs.NewSupervisor(s3fs.OS{Mounter: os.Mounter, Statfs: os.Statfs, FS: os.FS, Procs: os.Procs, Cgroups: os.Cgroups}, deps.Config, deps.Clock,
		s3fs.Options{MountTimeout: opts.MountTimeout, KillGrace: opts.KillGrace, BridgeCgroup: opts.BridgeCgroup, BridgeNetNS: opts.BridgeNetNS,
			Active: m.BridgesActive, Exits: m.BridgeExits, Exited: r.bridgeExited})
	// The record of the mounts put at kubelet paths keeps the name earlier agents gave it.
	r.rules = &stack.Rules{Mounter: os.Mounter, Statfs: os.Statfs, Placed: stack.NewPlaced(os.FS, filepath.Join(r.layout.Root(), "handed.json")),
		StatfsTimeout: func() time.Duration { return r.cfg.S3.StatfsTimeout.Duration }, Checks: m.ResultChecks,
		Replacer: os.Replacer, Replacements: m.Replace}
	if deps.Remounter == nil {
		// A container with mountPropagation HostToContainer sees a mount stacked on the dead one
		// by propagation, but not one put beneath it: without the container remounter to
		// replace inside every container, kubelet's paths stack.
		r.rules.Replacer = nil
	}
	r.csi = &csiclient.Client{Dialer: os.CSI, Registry: os.Registry, View: deps.View, NodeName: deps.NodeName, Config: deps.Config,
		Timeout: opts.MountTimeout, Mounter: os.Mounter, Statfs: os.Statfs, FS: os.FS, Rules: r.rules}
	deps.View.OnPodChange(r.poke)
	return r, nil
}

// Metrics returns the rescue's metrics (for tests).
func (r *Restorer) Metrics() *Metrics { return r.metrics }

// bridgeExited handles the unexpected exit of a bridge's s3fs: a check at once, so the dead binds
// are restored without waiting for the next tick; a quick death counts as a failure.
func (r *Restorer) bridgeExited(pv string, lived time.Duration) {
	if lived < r.opts.QuickExit {
		r.backoff(pv)
	}
	r.poke()
}

func (r *Restorer) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run checks the mounts at start, on every pod change, FUSE daemon exit and plugin socket, and
// periodically (nextCheckIn) until ctx ends.
// The s3fs processes it started keep running after it returns: they serve pods, and the next
// agent re-adopts them.
func (r *Restorer) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("s3mount")
	ctx = logr.NewContext(ctx, log)
	if err := r.Prepare(ctx); err != nil {
		return err
	}
	log.Info("watching S3 volume mounts", "node", r.d.NodeName, "interval", r.cfg.S3.CheckInterval.Duration)
	if r.os.Plugins != nil && r.os.CSI != nil && len(r.cfg.S3.ReplayDrivers) > 0 {
		dirs := csiclient.PluginDirs(r.cfg.KubeletDir, r.cfg.S3.ReplayDrivers)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.os.Plugins.Watch(ctx, dirs, r.socketAppeared); err != nil {
				log.Error(err, "watching node plugin sockets; periodic checks only")
			}
		}()
	}
	for {
		if err := r.Sync(ctx); err != nil {
			log.Error(err, "checking S3 volume mounts")
		}
		wait := r.nextCheckIn()
		timer := r.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			r.wg.Wait()
			return nil
		case <-timer.C():
		case <-r.kick:
		case <-r.d.FUSEExits: // a FUSE daemon exited (fusewatch): check now, not at the next tick
		case <-r.d.APIReturned:
			r.retryNow(ctx)
		}
		timer.Stop()
	}
}

// nextCheckIn is the wait before the next pass. Deaths, pod changes and returning drivers wake
// the loop at once, so the periodic pass is only a safety net (s3.checkInterval, minutes) — except
// while something is under way that only time moves on (a dead target counting towards
// s3.bridgeAfter, a hung mount, a restore in flight or backing off, a bridge waiting to be handed
// back to the driver, a gone pod's target kubelet is still tearing down): then every s3.pendingCheckInterval.
//
// Just after a plugin socket appears the wait is shorter still (socketSettleCheck): the socket
// file exists from the plugin's bind(2), before it listens and answers, so the pass the event
// woke may find the driver down; the next one, 50 ms later rather than a second, finds it up.
func (r *Restorer) nextCheckIn() time.Duration {
	every := r.cfg.S3.CheckInterval.Duration
	p := r.cfg.S3.PendingCheckInterval.Duration
	if p <= 0 || p >= every || !r.pending() {
		return every
	}
	r.mu.Lock()
	settling := !r.socketSeen.IsZero() && r.clk.Since(r.socketSeen) < socketSettleFor
	r.mu.Unlock()
	if settling && socketSettleCheck < p {
		return socketSettleCheck
	}
	return p
}

// A plugin that created its socket answers within this window in practice (gRPC server start);
// past it the ordinary pending cadence applies.
const (
	socketSettleFor   = 2 * time.Second
	socketSettleCheck = 50 * time.Millisecond
)

// socketAppeared is the plugin-socket watcher's callback: a pass now, and a fast cadence for a
// moment while the plugin starts answering (nextCheckIn).
func (r *Restorer) socketAppeared() {
	r.mu.Lock()
	r.socketSeen = r.clk.Now()
	r.socketGen++
	r.mu.Unlock()
	r.poke()
}

// retryNow ends every restore back-off: called when the API server answers again, since restores
// that failed while it was away (a replay's Secret, CSIDriver or PV unreadable) can succeed now.
func (r *Restorer) retryNow(ctx context.Context) {
	r.mu.Lock()
	n := len(r.retry)
	clear(r.retry)
	r.mu.Unlock()
	if n > 0 {
		logr.FromContextOrDiscard(ctx).Info("the API server answers again: retrying restores now", "backingOff", n)
	}
}

// pending reports whether a time-driven step may be due: see nextCheckIn.
func (r *Restorer) pending() bool {
	bridges := len(r.bridges.PVs())
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.deadSince) > 0 || len(r.hungSince) > 0 || len(r.inflight) > 0 || len(r.retry) > 0 ||
		bridges > 0 || r.goneTargetsMounted > 0
}

// Prepare creates the state directories and the credentials tmpfs, cleans the fresh paths and
// re-adopts the bridges an earlier agent left. Run calls it; tests driving Sync call it once first.
func (r *Restorer) Prepare(ctx context.Context) error {
	if err := r.bridges.Prepare(ctx); err != nil {
		return err
	}
	if err := r.rules.Placed.Load(); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "reading the record of replayed mounts; starting empty")
	}
	r.csi.SweepFresh(ctx)
	if err := r.bridges.Adopt(ctx); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "re-adopting bridges")
	}
	return nil
}

// Wait blocks until every restore started by Sync has finished (tests; Run does it on exit).
func (r *Restorer) Wait() { r.wg.Wait() }

// Sync runs one check: find dead targets, start restores, clean up after gone pods.
func (r *Restorer) Sync(ctx context.Context) error {
	start := r.clk.Now()
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return err // not a pass: nothing was looked at
	}
	defer func() { r.metrics.SyncSeconds.Observe(r.clk.Since(start).Seconds()) }()
	targets, live := r.discover(ctx)
	needs := map[string][]target{}
	var answered []target
	for _, t := range targets {
		if t.terminating || !table.IsMountPoint(t.path) {
			continue // kubelet has not published it (or tore it down): not ours to create
		}
		switch r.checkTarget(ctx, t) {
		case stack.Dead:
			needs[t.pv] = append(needs[t.pv], t)
		case stack.Healthy:
			answered = append(answered, t)
		}
	}
	r.recheckSameConnection(ctx, table, answered, needs)
	r.startRestores(ctx, needs)
	r.reportHung(ctx)
	r.startRetires(ctx, r.bridgedTargets(table, targets))
	if live == nil {
		return nil // pod listing failed: do not mistake every pod for gone
	}
	r.pruneState(targets, table)
	r.cleanupTargets(ctx, table, live)
	r.retireUnusedBridges(ctx, table, live)
	return nil
}

// startRestores starts one restore per PV that is not in flight or backing off.
func (r *Restorer) startRestores(ctx context.Context, needs map[string][]target) {
	pvs := make([]string, 0, len(needs))
	for pv := range needs {
		pvs = append(pvs, pv)
	}
	sort.Strings(pvs)
	now := r.clk.Now()
	for _, pv := range pvs {
		if !r.claim(pv, now) {
			r.deadFoundDuringPass(pv)
			continue
		}
		r.wg.Add(1)
		go func(pv string, ts []target) {
			defer r.wg.Done()
			r.restore(ctx, pv, ts)
		}(pv, needs[pv])
	}
}

// deadFoundDuringPass notes that dead targets of pv were found while its pass is in flight (none
// noted while it backs off: the next pass after the backoff finds them).
func (r *Restorer) deadFoundDuringPass(pv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight[pv] {
		r.deadDuring[pv] = true
	}
}

// endPass ends pv's restore or retire (claim) and reports whether dead targets of pv were found
// while it ran (deadFoundDuringPass): the caller then wakes a pass at once, which finds them
// still dead. Without it they waited for the next timed pass, and a death during a hand-back
// could wait for the periodic check.
func (r *Restorer) endPass(pv string) (deadLeft bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inflight, pv)
	delete(r.passGen, pv)
	deadLeft = r.deadDuring[pv]
	delete(r.deadDuring, pv)
	return deadLeft
}

// claim marks pv in flight (one restore or retire at a time per PV) unless it already is or
// backs off after a failure; false when pv is busy. A plugin socket that appeared since the
// failed pass began ends its back-off: the failure may be the old plugin's (its daemon killed by
// its own restart: "s3fs exited before mounting"), and the new one is worth asking at once.
func (r *Restorer) claim(pv string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.retry[pv]
	if r.inflight[pv] || (rs != nil && now.Before(rs.next) && rs.socketGen == r.socketGen) {
		return false
	}
	r.inflight[pv] = true
	r.passGen[pv] = r.socketGen
	return true
}
