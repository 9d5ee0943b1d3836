package fusewatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/metrics"
)

// OSOptions locate the real OS's files.
type OSOptions struct {
	// Proc is the proc filesystem to walk for holders (default /proc; the host's processes are
	// there only with hostPID).
	Proc string
	// Mountinfo is the mount table to watch (default /proc/self/mountinfo: the agent's own mount
	// namespace, where the mounts it restores are).
	Mountinfo string
	// MaxFDsPerProcess bounds the descriptors looked at in each process per walk (default
	// DefaultMaxFDsPerProcess): a walk costs at most that many readlinks per process, and an
	// fdinfo read per /dev/fuse descriptor. A daemon whose /dev/fuse descriptor lies beyond it
	// is not found (FUSE daemons get theirs at mount time, among their first descriptors).
	MaxFDsPerProcess int
}

// DefaultMaxFDsPerProcess is OSOptions.MaxFDsPerProcess's default.
const DefaultMaxFDsPerProcess = 16384

func (o *OSOptions) defaults() {
	if o.MaxFDsPerProcess <= 0 {
		o.MaxFDsPerProcess = DefaultMaxFDsPerProcess
	}
	if o.Proc == "" {
		o.Proc = "/proc"
	}
	if o.Mountinfo == "" {
		o.Mountinfo = "/proc/self/mountinfo"
	}
}

// Options of a Watcher.
type Options struct {
	// RescanInterval is the safety net: a walk of the holders even when nothing signalled
	// (default 5m).
	RescanInterval time.Duration
	// OrphanRetry is the first delay before walking again after a connection was seen without
	// a holder (its descriptor in flight from fusermount to the daemon); it doubles up to
	// MaxOrphanRetry, then waits for the next signal (a dead mount has no holder for good).
	// Defaults 50ms and 3.2s.
	OrphanRetry, MaxOrphanRetry time.Duration
	// Clock (default the real clock).
	Clock clock.WithTicker
	// OnExit, when set, is called on the Run goroutine for each watched daemon that exited.
	OnExit func(Exit)
	// Registerer, when set, gets the watcher's metrics.
	Registerer prometheus.Registerer
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	if o.RescanInterval < 0 || o.OrphanRetry < 0 || o.MaxOrphanRetry < 0 {
		return errors.New("fusewatch: intervals must not be negative")
	}
	return nil
}

func (o *Options) defaults() {
	if o.RescanInterval == 0 {
		o.RescanInterval = 5 * time.Minute
	}
	if o.OrphanRetry == 0 {
		o.OrphanRetry = 50 * time.Millisecond
	}
	if o.MaxOrphanRetry < o.OrphanRetry {
		o.MaxOrphanRetry = 64 * o.OrphanRetry
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// Exit is one watched daemon that exited.
type Exit struct {
	PID int
	// MountPoints are those of the connections it served (all FUSE mounts when the kernel did not
	// name its connections).
	MountPoints []string
	// At is when the watcher saw it.
	At time.Time
}

// Watcher wakes its consumer when a FUSE daemon serving a mount here exits.
type Watcher struct {
	os   OS
	opts Options
	wake chan struct{}

	// Run-goroutine state.
	conns   map[Connection][]Mount
	watched map[int][]Connection // pid → connections (nil: unknown)
	orphans map[Connection]bool  // mounted connections without a holder at the last walk
	// settled are orphans whose loss the consumer was told of for good: their watched holder
	// exited, or the retries for a holder ran out. Any other orphan wakes the consumer at each
	// walk that finds it (unsettled).
	settled    map[Connection]bool
	exitedPIDs map[int]bool  // seen exiting: never watched again (a walk may race the exit)
	retry      time.Duration // next orphan retry delay; 0 when none is due
	// retryRestarted is set by a walk that saw a new orphan (the retries start over).
	retryRestarted bool
	// kernelNames is set once a walk found a descriptor whose fdinfo names its connection: the
	// kernel does, so a /dev/fuse descriptor that names none serves nothing mounted (not mounted
	// yet, or a tenant's plain file at /dev/fuse in its own mount namespace) and makes no holder.
	// Before that, such a holder is watched whatever it serves (an older kernel).
	kernelNames bool

	exits   prometheus.Counter
	daemons prometheus.Gauge
	walks   prometheus.Counter
	unheld  prometheus.Counter
}

// New returns a Watcher over os.
func New(os OS, opts Options) (*Watcher, error) {
	if os == nil {
		return nil, errors.New("fusewatch: an OS is required")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.defaults()
	w := &Watcher{os: os, opts: opts, wake: make(chan struct{}, 1), watched: map[int][]Connection{}, orphans: map[Connection]bool{}, settled: map[Connection]bool{}, exitedPIDs: map[int]bool{}}
	r := metrics.NewRegistration(opts.Registerer)
	w.exits = metrics.Add(r, prometheus.NewCounter(prometheus.CounterOpts{Name: "pvrescue_agent_fuse_daemon_exits_total",
		Help: "FUSE daemons serving a mount on this node seen exiting (each wakes the S3 rescue at once)."}))
	w.daemons = metrics.Add(r, prometheus.NewGauge(prometheus.GaugeOpts{Name: "pvrescue_agent_fuse_daemons_watched",
		Help: "FUSE daemons whose exit the agent watches (a pidfd each)."}))
	w.walks = metrics.Add(r, prometheus.NewCounter(prometheus.CounterOpts{Name: "pvrescue_agent_fuse_holder_walks_total",
		Help: "Walks of the processes for /dev/fuse holders (on mount table changes, exits, and the slow safety net)."}))
	w.unheld = metrics.Add(r, prometheus.NewCounter(prometheus.CounterOpts{Name: "pvrescue_agent_fuse_unheld_wakes_total",
		Help: "Wakes of the S3 rescue for a mounted FUSE connection that no watched daemon holds (its daemon may have died before it was watched)."}))
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("fusewatch metrics: %w", err)
	}
	return w, nil
}

// Wake receives after any watched daemon exited; wakes that come while one is pending are
// coalesced into it. One consumer.
func (w *Watcher) Wake() <-chan struct{} { return w.wake }

// Run watches until ctx ends (then nil). It fails only when the event source cannot be opened
// or fails; the caller's periodic check covers the time until it runs again.
func (w *Watcher) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("fusewatch")
	ev, err := w.os.Events()
	if err != nil {
		return err
	}
	type result struct {
		e   Event
		err error
	}
	results := make(chan result)
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan struct{})
	// The waiting goroutine ends before the set is closed: its descriptors must not be reused
	// under it.
	defer func() {
		cancel()
		<-waited
		_ = ev.Close()
	}()
	go func() {
		defer close(waited)
		for {
			e, err := ev.Wait(wctx)
			select {
			case results <- result{e, err}:
			case <-wctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	w.walk(log, ev, true)
	tick := w.opts.Clock.NewTicker(w.opts.RescanInterval)
	defer tick.Stop()
	var retry clock.Timer
	for {
		var retryC <-chan time.Time
		if w.retry > 0 && retry == nil {
			retry = w.opts.Clock.NewTimer(w.retry)
		}
		if retry != nil {
			retryC = retry.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case r := <-results:
			if r.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return r.err
			}
			// Every mount table change is read at once. After an exit the descriptor may live
			// on in another process: a walk of all.
			exited := len(r.e.Exited) > 0 && w.exited(log, r.e.Exited)
			if exited || r.e.MountsChanged {
				w.walk(log, ev, exited)
			}
		case <-tick.C():
			w.walk(log, ev, true)
		case <-retryC:
			retry = nil
			w.retryRestarted = false
			w.walk(log, ev, true)
			if w.retry > 0 && !w.retryRestarted {
				if w.retry *= 2; w.retry > w.opts.MaxOrphanRetry {
					// A dead mount has no holder for good: the consumer was woken at every
					// retry that found it so; wait for the next signal.
					w.retry = 0
					for c := range w.orphans {
						w.settled[c] = true
					}
				}
			}
		}
	}
}

// exited reports the exits of the watched pids among pids (wakes the consumer) and says whether
// there was one.
func (w *Watcher) exited(log logr.Logger, pids []int) bool {
	now := w.opts.Clock.Now()
	reported := false
	for _, pid := range pids {
		conns, ok := w.watched[pid]
		if !ok {
			continue
		}
		reported = true
		delete(w.watched, pid)
		w.exitedPIDs[pid] = true
		for _, c := range conns {
			w.orphans[c] = true // dead now, not a descriptor in flight: no quick retries for it
			w.settled[c] = true // this exit tells the consumer
		}
		x := Exit{PID: pid, At: now, MountPoints: w.mountPoints(conns)}
		w.exits.Inc()
		log.V(1).Info("FUSE daemon exited", "pid", pid, "mountPoints", x.MountPoints)
		if w.opts.OnExit != nil {
			w.opts.OnExit(x)
		}
	}
	w.daemons.Set(float64(len(w.watched)))
	if reported {
		w.signal()
	}
	return reported
}

func (w *Watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Watcher) mountPoints(conns []Connection) []string {
	var out []string
	add := func(ms []Mount) {
		for _, m := range ms {
			out = append(out, m.Point)
		}
	}
	if conns == nil {
		for _, ms := range w.conns {
			add(ms)
		}
	}
	for _, c := range conns {
		add(w.conns[c])
	}
	sort.Strings(out)
	return out
}

// walk re-reads the mount table and, when forced or when the set of FUSE connections changed,
// the holders, and brings the pidfds in line: a holder of a mounted connection is watched, any
// other is not.
func (w *Watcher) walk(log logr.Logger, ev Events, force bool) {
	conns, err := w.os.Connections()
	if err != nil {
		log.Error(err, "reading the mount table; the periodic check stays the safety net")
		return
	}
	if renewed := w.remountedOrphans(conns); len(renewed) > 0 {
		// The kernel reuses a freed connection's number (the lowest free one) for the next FUSE
		// mount: a dead connection detached and a new one mounted between two reads look like
		// one connection that only moved. A connection without a holder that gained a mount may
		// be such a new one, with a daemon to watch.
		for _, c := range renewed {
			delete(w.settled, c)
		}
		force = true
	}
	if !force && sameConnections(conns, w.conns) {
		w.conns = conns // mount points may have moved (binds), the connections did not
		return
	}
	if !force && onlyUnmounted(conns, w.conns) {
		// No new connection, so no new holder to find: the walk of every process (tens of ms
		// on a node with 100 pods, at the end of every bridge pass as the dead mounts go) is
		// not needed to let go of the holders of what was unmounted.
		w.conns = conns
		w.forgetUnmounted(log, ev)
		return
	}
	w.conns = conns
	w.walks.Inc()
	holders, err := w.os.Holders()
	if err != nil {
		log.Error(err, "walking the processes for FUSE daemons; the periodic check stays the safety net")
		return
	}
	log.V(2).Info("walked", "connections", len(conns), "holders", holders)
	want := map[int][]Connection{}
	held := map[Connection]bool{}
	for _, h := range holders {
		w.kernelNames = w.kernelNames || len(h.Connections) > 0
	}
	for _, h := range holders {
		if h.Unnamed && !w.kernelNames {
			if len(conns) > 0 {
				want[h.PID] = nil
			}
			for c := range conns {
				held[c] = true
			}
			continue
		}
		for _, c := range h.Connections {
			if _, ok := conns[c]; ok {
				want[h.PID] = append(want[h.PID], c)
				held[c] = true
			}
		}
	}
	var gone []int
	for pid := range w.exitedPIDs {
		if _, ok := want[pid]; !ok {
			delete(w.exitedPIDs, pid) // gone from the walk: its number may be reused
		}
	}
	for pid, cs := range want {
		if w.exitedPIDs[pid] {
			continue
		}
		if _, ok := w.watched[pid]; ok {
			w.watched[pid] = cs
			continue
		}
		switch err := ev.Add(pid); {
		case errors.Is(err, ErrExited):
			w.watched[pid] = cs
			gone = append(gone, pid)
		case err != nil:
			log.Error(err, "watching a FUSE daemon; the periodic check stays the safety net", "pid", pid)
		default:
			log.V(2).Info("watching", "pid", pid, "connections", cs)
			w.watched[pid] = cs
		}
	}
	var released []int
	for pid := range w.watched {
		if _, ok := want[pid]; !ok {
			if ev.Remove(pid) {
				continue // it exited: its exit is reported by the event source
			}
			// An exit in progress closes the process's files before its pidfd reports the
			// exit, so a walk racing it finds a live process without the descriptor; one that
			// closed the descriptor stopped serving the connection either way. Reported as an
			// exit: at worst one extra check.
			log.V(2).Info("no longer a holder of a mounted connection; reported as an exit", "pid", pid)
			released = append(released, pid)
		}
	}
	w.release(log, released)
	w.daemons.Set(float64(len(w.watched)))
	orphans := map[Connection]bool{}
	grew := false
	for c := range conns {
		if !held[c] {
			orphans[c] = true
			grew = grew || !w.orphans[c]
		}
	}
	w.orphans = orphans
	switch {
	case len(orphans) == 0:
		w.retry = 0
	case grew:
		w.retry, w.retryRestarted = w.opts.OrphanRetry, true
	}
	if len(gone) > 0 {
		w.exited(log, gone)
	}
	w.wakeForUnheld(log)
}

// wakeForUnheld wakes the consumer when a mounted connection has no holder and its loss was not
// told yet (settled): its daemon may have exited before any walk saw it hold the descriptor
// (killed just after its mount, or between two retries), and no pidfd will ever report that.
// When the descriptor is only in flight to the daemon, the wake costs the consumer one check.
func (w *Watcher) wakeForUnheld(log logr.Logger) {
	for c := range w.settled {
		if !w.orphans[c] {
			delete(w.settled, c) // held again, or unmounted
		}
	}
	var unheld []Connection
	for c := range w.orphans {
		if !w.settled[c] {
			unheld = append(unheld, c)
		}
	}
	if len(unheld) == 0 {
		return
	}
	w.unheld.Inc()
	log.V(1).Info("mounted FUSE connections without a watched daemon; checking the mounts", "connections", unheld, "mountPoints", w.mountPoints(unheld))
	w.signal()
}

// remountedOrphans returns the connections without a holder at the last walk that now show a
// mount (by mountinfo ID) they did not have then.
func (w *Watcher) remountedOrphans(now map[Connection][]Mount) []Connection {
	var out []Connection
	for c := range w.orphans {
		for _, m := range now[c] {
			if !slices.ContainsFunc(w.conns[c], func(o Mount) bool { return o.ID == m.ID }) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// forgetUnmounted stops watching the holders whose every connection is no longer mounted (a
// holder the kernel did not name stays while any FUSE connection is mounted), reported as exits
// as a walk reports them, and drops the orphans that were unmounted.
func (w *Watcher) forgetUnmounted(log logr.Logger, ev Events) {
	var released []int
	for pid, cs := range w.watched {
		if cs == nil && len(w.conns) > 0 {
			continue
		}
		var mounted []Connection
		for _, c := range cs {
			if _, ok := w.conns[c]; ok {
				mounted = append(mounted, c)
			}
		}
		if len(mounted) > 0 {
			w.watched[pid] = mounted
			continue
		}
		if ev.Remove(pid) {
			continue // it exited: its exit is reported by the event source
		}
		released = append(released, pid)
	}
	w.release(log, released)
	for c := range w.orphans {
		if _, ok := w.conns[c]; !ok {
			delete(w.orphans, c)
			delete(w.settled, c)
		}
	}
	if len(w.orphans) == 0 {
		w.retry = 0
	}
	w.daemons.Set(float64(len(w.watched)))
}

// release reports holders that let go of every mounted connection while they run as exits: at
// worst one extra check.
func (w *Watcher) release(log logr.Logger, pids []int) {
	if len(pids) == 0 {
		return
	}
	w.exited(log, pids)
	for _, pid := range pids {
		delete(w.exitedPIDs, pid) // its pidfd is closed: nothing more will be reported for it
	}
}

// onlyUnmounted reports whether now is then less some connections.
func onlyUnmounted(now, then map[Connection][]Mount) bool {
	for c := range now {
		if _, ok := then[c]; !ok {
			return false
		}
	}
	return true
}

func sameConnections(a, b map[Connection][]Mount) bool {
	if len(a) != len(b) {
		return false
	}
	for c := range a {
		if _, ok := b[c]; !ok {
			return false
		}
	}
	return true
}
