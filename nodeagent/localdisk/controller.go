package localdisk

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent"
)

// Controller keeps fakes in place of the missing disks of the local block PVs used by pods on
// this node. Its parts: collect (volumes.go) → Reconciler.Sync → report (report.go), node
// status (nodestatus.go) and eviction (evict.go).
type Controller struct {
	deps    nodeagent.Deps
	opts    Options
	rec     *Reconciler
	metrics *Metrics

	trigger     chan struct{}
	mu          sync.Mutex
	triggeredAt time.Time

	// Memory for de-duplicating reports; losing it on restart only repeats an Event. Pruned each
	// pass when the PV or pod goes away.
	missingSince  map[string]time.Time
	warnedLong    map[string]bool
	lastProblem   map[string]string
	returned      map[string]bool
	podsNotified  map[types.UID]bool
	podsWarned    map[types.UID]bool
	podsBlocked   map[types.UID]bool
	lastCondition string
	lastBeat      time.Time
}

// New builds the local-disk rescue on deps with the node's OS effects.
func New(deps nodeagent.Deps, os OS, opts Options) (*Controller, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	if len(opts.PathRoots) == 0 {
		opts.PathRoots = deps.Config.LocalBlock.PathRoots
	}
	if len(opts.LinkRoots) == 0 {
		opts.LinkRoots = deps.Config.LocalBlock.LinkRoots
	}
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	lb := deps.Config.LocalBlock
	r, err := NewReconciler(os, ReconcilerOptions{
		StateDir: filepath.Clean(deps.Config.StateDir), DevDir: opts.DevDir, PathRoots: opts.PathRoots, LinkRoots: opts.LinkRoots,
		FakeSize: lb.FakeDeviceSizeBytes, FirstLoopMinor: lb.FirstLoopMinor, LoopSearchLimit: opts.LoopSearchLimit,
	}, deps.Clock.Now)
	if err != nil {
		return nil, err
	}
	m, err := NewMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("localdisk metrics: %w", err)
	}
	c := &Controller{
		deps: deps, opts: opts, rec: r, metrics: m,
		trigger:      make(chan struct{}, 1),
		missingSince: map[string]time.Time{}, warnedLong: map[string]bool{}, lastProblem: map[string]string{},
		returned: map[string]bool{}, podsNotified: map[types.UID]bool{}, podsWarned: map[types.UID]bool{},
		podsBlocked: map[types.UID]bool{},
	}
	deps.View.OnPodChange(c.Trigger)
	return c, nil
}

// Trigger asks for a pass soon; it never blocks.
func (c *Controller) Trigger() {
	c.mu.Lock()
	if c.triggeredAt.IsZero() {
		c.triggeredAt = c.deps.Clock.Now()
	}
	c.mu.Unlock()
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Run passes until ctx is done on pod changes (the view), fsnotify events on the watched paths'
// directories and a periodic resync (which also notices the Node label).
func (c *Controller) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("fsnotify: %w", err)
	}
	defer func() { _ = watcher.Close() }() // the loop is over; a close error changes nothing it did
	watched := map[string]bool{}
	resync := c.deps.Clock.NewTicker(c.deps.Config.LocalBlock.ResyncPeriod.Duration)
	defer resync.Stop()
	log.Info("local-disk rescuer started", "node", c.deps.NodeName, "stateDir", c.deps.Config.StateDir)
	c.Trigger()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C():
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
			if updateWatches(log, watcher, watched, c.SyncOnce(ctx)) > 0 {
				// A path that changed between the pass's read and the new watch made no event:
				// one more pass sees it now rather than at the next resync.
				c.Trigger()
			}
		}
	}
}

// updateWatches watches dirs and only them; it returns how many directories it began to watch.
func updateWatches(log logr.Logger, w *fsnotify.Watcher, watched map[string]bool, dirs []string) (added int) {
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
			added++
		}
	}
	for d := range watched {
		if !want[d] {
			_ = w.Remove(d)
			delete(watched, d)
		}
	}
	return added
}

// SyncOnce runs one pass and reports; it returns the directories to watch.
func (c *Controller) SyncOnce(ctx context.Context) []string {
	log := logr.FromContextOrDiscard(ctx)
	c.mu.Lock()
	detected := c.triggeredAt
	c.triggeredAt = time.Time{}
	c.mu.Unlock()
	if detected.IsZero() {
		detected = c.deps.Clock.Now()
	}
	start := c.deps.Clock.Now()
	node, err := c.deps.View.Node()
	if err != nil {
		log.Error(err, "own Node not readable; skipping the pass")
		c.metrics.Errors.WithLabelValues("api").Inc()
		return nil
	}
	create := node.Labels[c.deps.Config.LocalBlock.NodeLabel] == contract.LabelFakeDevicesEnabled
	w, err := c.collect(ctx, node)
	if err != nil {
		log.Error(err, "reading this node's volumes (what was read is still handled)")
		c.metrics.Errors.WithLabelValues("api").Inc()
	}
	res := c.rec.Sync(ctx, w.vols, create)
	c.metrics.SyncSeconds.Observe(c.deps.Clock.Since(start).Seconds())
	for _, err := range res.Errors {
		log.Error(err, "local-disk pass")
		c.metrics.Errors.WithLabelValues("sync").Inc()
	}
	missing := c.report(ctx, w, res, detected)
	c.setCondition(ctx, node, missing)
	c.prune(w)

	dirSet := map[string]bool{}
	for _, st := range res.Volumes {
		for _, p := range []string{st.Path, st.Link} {
			if filepath.IsAbs(p) {
				dirSet[filepath.Dir(filepath.Clean(p))] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(dirSet))
}

// prune forgets PVs no longer handled and pods no longer on the node.
func (c *Controller) prune(w wanted) {
	gone := func(pv string) bool { _, ok := w.pvs[pv]; return !ok }
	maps.DeleteFunc(c.warnedLong, func(pv string, _ bool) bool { return gone(pv) })
	maps.DeleteFunc(c.returned, func(pv string, _ bool) bool { return gone(pv) })
	maps.DeleteFunc(c.lastProblem, func(pv, _ string) bool { return gone(pv) })
	maps.DeleteFunc(c.missingSince, func(pv string, _ time.Time) bool {
		if gone(pv) {
			c.metrics.DiskMissing.DeleteLabelValues(pv)
			c.metrics.DiskMissingSince.DeleteLabelValues(pv)
		}
		return gone(pv)
	})
	for _, m := range []map[types.UID]bool{c.podsNotified, c.podsWarned, c.podsBlocked} {
		maps.DeleteFunc(m, func(uid types.UID, _ bool) bool { return !w.podUIDs[string(uid)] })
	}
}
