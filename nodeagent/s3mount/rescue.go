package s3mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent"
)

// Event reasons on the pod. Tools tell the restore methods apart by reason, never by message.
const (
	// EventMountReplayed: the driver's own mount is back at the target (kubelet's calls replayed).
	EventMountReplayed = "MountReplayed"
	// EventMountBridged: our own s3fs is bound over the dead target while the driver is down.
	EventMountBridged = "MountBridged"
	// EventBridgeRetired: the driver answers again; the target moved from our bridge to the
	// driver's own mount.
	EventBridgeRetired      = "BridgeRetired"
	EventMountRestoreFailed = "MountRestoreFailed"
	EventContainersRemount  = "ContainersRemounted"

	// EventMountRestored was the one reason of every restore before the methods got their own.
	//
	// Deprecated: no longer emitted; read EventMountReplayed, EventMountBridged and
	// EventBridgeRetired.
	EventMountRestored = "MountRestored"
)

// credsTmpfsSize bounds the tmpfs holding passwd files (a few hundred bytes each).
const credsTmpfsSize = 1 << 20

// Options tune the rescue; NewOptions gives the defaults.
type Options struct {
	// BackoffInitial and BackoffMax bound the wait between failed restores of one PV.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// MountTimeout bounds the wait for a started s3fs to answer at its staging directory
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

// bridgeNetNS is the network namespace bridges start in ("" for ours).
func (r *Restorer) bridgeNetNS() string { return r.opts.BridgeNetNS }

// bridgeNetNSFallbacks are tried in turn when BridgeNetNS cannot be joined: our parent's (with
// hostPID the container's shim, which runs in the node's namespace; seen on the demo node:
// init's namespace gives EACCES even to root, the shim's does not), then ours ("").
func (r *Restorer) bridgeNetNSFallbacks() []string {
	if r.opts.BridgeNetNS == "" {
		return nil
	}
	var out []string
	if ppid := os.Getppid(); ppid > 1 {
		out = append(out, fmt.Sprintf("/proc/%d/ns/net", ppid))
	}
	return append(out, "")
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
	layout  Layout
	metrics *Metrics

	kick chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	stagings  map[string]*staging    // by PV
	retry     map[string]*retryState // by PV
	inflight  map[string]bool        // by PV
	deadSince map[string]time.Time   // by target path
	hungSince map[string]time.Time   // by target path: first statfs timeout of a run of them
	// lastHungCondition is the S3MountHung condition last written ("" none yet); Sync only.
	lastHungCondition string
	healthy           map[string]healthKey // by target path: the pvrescue_s3_mount_healthy series
	handed            map[string]string    // by target path: device of the mount a replay handed back
	// goneTargetsMounted counts the targets of gone pods that the last pass left mounted
	// (kubelet's teardown under way, or a mount not ours).
	goneTargetsMounted int
}

type healthKey struct{ pv, namespace, pod string }

type staging struct {
	proc    Process // nil when adopted from an earlier agent that kept no record of it
	cgroup  string  // the cgroup it was placed in ("" when not)
	started time.Time
	stopped bool // we stopped it on purpose; its exit is not a failure
	// retiring: detached, exits by itself (retiring.go); its record is the .retiring one.
	retiring bool
}

type retryState struct {
	failures int
	next     time.Time
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
		layout: Layout{StateDir: deps.Config.StateDir}, metrics: m,
		kick:      make(chan struct{}, 1),
		stagings:  map[string]*staging{},
		retry:     map[string]*retryState{},
		inflight:  map[string]bool{},
		deadSince: map[string]time.Time{},
		hungSince: map[string]time.Time{},
		healthy:   map[string]healthKey{},
		handed:    map[string]string{},
	}
	deps.View.OnPodChange(r.poke)
	return r, nil
}

// Metrics returns the rescue's metrics (for tests and the agent's status page).
func (r *Restorer) Metrics() *Metrics { return r.metrics }

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
		dirs := PluginDirs(r.cfg.KubeletDir, r.cfg.S3.ReplayDrivers)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.os.Plugins.Watch(ctx, dirs, r.poke); err != nil {
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
// back, a gone pod's target kubelet is still tearing down): then every s3.pendingCheckInterval.
func (r *Restorer) nextCheckIn() time.Duration {
	every := r.cfg.S3.CheckInterval.Duration
	if p := r.cfg.S3.PendingCheckInterval.Duration; p > 0 && p < every && r.pending() {
		return p
	}
	return every
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
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.deadSince) > 0 || len(r.hungSince) > 0 || len(r.inflight) > 0 || len(r.retry) > 0 ||
		len(r.stagings) > 0 || r.goneTargetsMounted > 0
}

// Prepare creates the state directories and the credentials tmpfs, and re-adopts the staging
// mounts an earlier agent left. Run calls it; tests driving Sync call it once first.
func (r *Restorer) Prepare(ctx context.Context) error {
	for _, dir := range []string{r.layout.StagingRoot(), r.layout.CredsDir(), r.layout.TmpRoot(), r.layout.BridgesDir(), r.layout.LogDir()} {
		if err := r.os.FS.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("s3mount: create %s: %w", dir, err)
		}
	}
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return fmt.Errorf("s3mount: %w", err)
	}
	if top, ok := table.Top(r.layout.CredsDir()); !ok || top.FSType != "tmpfs" {
		if err := r.os.Mounter.MountTmpfs(r.layout.CredsDir(), credsTmpfsSize); err != nil {
			return fmt.Errorf("s3mount: credentials tmpfs: %w", err)
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("mounted tmpfs for credentials", "path", r.layout.CredsDir())
	}
	if r.opts.BridgeCgroup != "" && syscall.Getpid() == 1 {
		logr.FromContextOrDiscard(ctx).Info("the agent is PID 1 of its own PID namespace: its s3fs bridges die with its container (run it with hostPID)")
	}
	if err := r.loadHanded(); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "reading the record of replayed mounts; starting empty")
	}
	r.sweepFresh(ctx)
	if err := r.adopt(ctx); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "re-adopting staging mounts")
	}
	return nil
}

// adopt takes over the healthy bridges an earlier agent left (their staging mount answers; the
// s3fs recorded in <state>/s3/bridges/<pv>.json still runs, watched from now on through a
// pidfd) and drops the dead ones: a recorded s3fs still running behind a dead staging mount is
// stopped, the mount removed, record and cgroup deleted. Records without a staging mount are
// dropped the same way.
func (r *Restorer) adopt(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, m := range table {
		pv, ok := r.layout.StagingPV(m)
		if !ok || seen[pv] {
			continue
		}
		seen[pv] = true
		rec, proc := r.adoptProcess(ctx, pv, m.MountPoint)
		if err := r.os.Statfs.Statfs(ctx, m.MountPoint, r.cfg.S3.StatfsTimeout.Duration); err == nil {
			st := &staging{proc: proc, started: r.clk.Now()}
			if proc != nil {
				st.cgroup = rec.Cgroup
				go func() {
					werr := proc.Wait()
					r.onExit(ctx, pv, st, werr)
				}()
			}
			r.mu.Lock()
			r.stagings[pv] = st
			r.mu.Unlock()
			log.Info("re-adopted healthy bridge", "pv", pv, "path", m.MountPoint, "pid", rec.Proc.Pid, "supervised", proc != nil, "cgroup", st.cgroup)
			continue
		}
		log.Info("dropping dead staging mount left by an earlier agent", "pv", pv, "path", m.MountPoint)
		r.dropBridge(ctx, pv, rec, proc)
		if t, err := r.os.Mounter.MountTable(); err == nil {
			r.unmountAll(m.MountPoint, t)
		}
	}
	names, err := r.os.FS.ReadDir(r.layout.BridgesDir())
	if err != nil {
		return err
	}
	for _, name := range names {
		pv, ok := PVFromBridgeRecord(name)
		if !ok {
			continue
		}
		if rec, found, err := r.readBridgeRecord(pv); err == nil && found && rec.PV != "" && PVComponent(rec.PV) == pv {
			pv = rec.PV // the file is named by the hashed form of a long name
		}
		if seen[pv] {
			continue
		}
		rec, proc := r.adoptProcess(ctx, pv, r.layout.Staging(pv))
		log.Info("dropping the record of a bridge whose staging mount is gone", "pv", pv, "pid", rec.Proc.Pid, "running", proc != nil)
		r.dropBridge(ctx, pv, rec, proc)
	}
	r.updateBridgeGauge()
	r.adoptRetiring(ctx)
	return nil
}

// adoptProcess returns pv's record and, when its s3fs still runs at staging, a handle on it.
func (r *Restorer) adoptProcess(ctx context.Context, pv, staging string) (BridgeRecord, Process) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pv)
	rec, ok, err := r.readBridgeRecord(pv)
	if err != nil {
		log.Error(err, "reading the bridge record")
		return BridgeRecord{}, nil
	}
	if !ok {
		return BridgeRecord{}, nil
	}
	proc, err := r.os.Procs.Adopt(rec.Proc, staging)
	if err != nil {
		log.V(1).Info("recorded s3fs does not run any more", "err", err.Error())
		return rec, nil
	}
	return rec, proc
}

// dropBridge stops a recorded s3fs that still runs (provably ours: pid, start time and our
// staging path on its command line) and removes its record and cgroup.
func (r *Restorer) dropBridge(ctx context.Context, pv string, rec BridgeRecord, proc Process) {
	if proc != nil {
		proc.Kill(r.opts.KillGrace)
	}
	var id *ProcID
	if rec.Proc.Pid > 0 {
		id = &rec.Proc
	}
	r.forgetRecord(ctx, pv, id, rec.Cgroup)
}

// Wait blocks until every restore started by Sync has finished (tests; Run does it on exit).
func (r *Restorer) Wait() { r.wg.Wait() }

// Sync runs one check: find dead targets, start restores, clean up after gone pods.
func (r *Restorer) Sync(ctx context.Context) error {
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return err
	}
	targets, live := r.discover(ctx)
	needs := map[string][]target{}
	for _, t := range targets {
		if t.terminating || !table.IsMountPoint(t.path) {
			continue // kubelet has not published it (or tore it down): not ours to create
		}
		if r.checkTarget(ctx, t) == Dead {
			needs[t.pv] = append(needs[t.pv], t)
		}
	}
	r.startRestores(ctx, needs)
	r.reportHung(ctx)
	r.startRetires(ctx, r.bridgedTargets(table, targets))
	if live == nil {
		return nil // pod listing failed: do not mistake every pod for gone
	}
	r.pruneState(targets, table)
	r.cleanupTargets(ctx, table, live)
	r.cleanupStagings(ctx, table, live)
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
}
