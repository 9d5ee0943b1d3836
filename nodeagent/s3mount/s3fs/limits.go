package s3fs

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/metrics"
)

// Scopes of a limit: one bridge's group, or the bridges' parent (all of them).
const (
	ScopeBridge = "bridge"
	ScopeAll    = "all"
)

// LimitWatcher reports the bridges nearing their limits (s3.bridgeLimits): every Interval it
// reads the CPU time and memory of the bridges' parent group and of each bridge's group, exports
// the highest share of a limit in use per scope and resource, and when a share reaches
// s3.bridgeLimits.warnPercent it counts it and writes an Event BridgeNearLimit on the Node
// (once per crossing: again only after the share fell below it).
type LimitWatcher struct {
	cgroups  Cgroups
	parent   string
	cfg      *config.Config
	recorder record.EventRecorder
	node     *corev1.ObjectReference
	clk      clock.WithTicker
	interval time.Duration

	ratio *prometheus.GaugeVec
	near  *prometheus.CounterVec

	last map[string]sample // by group
	over map[string]bool   // group/resource at or above the warning share
}

type sample struct {
	at  time.Time
	cpu int64
}

// NewLimitWatcher returns the watcher of the bridges under parent (s3mount's BridgeCgroup) on
// node nodeName, registering its metrics on reg.
func NewLimitWatcher(cg Cgroups, parent string, cfg *config.Config, recorder record.EventRecorder, nodeName string,
	clk clock.WithTicker, interval time.Duration, reg prometheus.Registerer) (*LimitWatcher, error) {
	w := &LimitWatcher{cgroups: cg, parent: parent, cfg: cfg, recorder: recorder, clk: clk, interval: interval,
		node: &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
		last: map[string]sample{}, over: map[string]bool{}}
	m := metrics.NewRegistration(reg)
	w.ratio = metrics.Add(m, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pvrescue_s3_bridge_limit_used_ratio",
		Help: "Highest share of its CPU or memory limit (s3.bridgeLimits) a bridge's group (scope bridge) or all bridges together (scope all) used at the last check.",
	}, []string{"scope", "resource"}))
	w.near = metrics.Add(m, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pvrescue_s3_bridge_near_limit_total",
		Help: "Times a bridge's group (scope bridge) or all bridges together (scope all) reached s3.bridgeLimits.warnPercent of a CPU or memory limit.",
	}, []string{"scope", "resource"}))
	if err := m.Err(); err != nil {
		return nil, err
	}
	for _, s := range []string{ScopeBridge, ScopeAll} {
		for _, r := range []string{"cpu", "memory"} {
			w.ratio.WithLabelValues(s, r)
			w.near.WithLabelValues(s, r)
		}
	}
	return w, nil
}

// Run checks every interval until ctx is done.
func (w *LimitWatcher) Run(ctx context.Context) error {
	if w.parent == "" {
		<-ctx.Done()
		return nil
	}
	t := w.clk.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			w.Check(ctx)
		}
	}
}

// Check reads the groups once and reports.
func (w *LimitWatcher) Check(ctx context.Context) {
	all, each := BridgeLimits(w.cfg)
	groups := map[string]Limits{w.parent: all}
	children, err := w.cgroups.Children(w.parent)
	if err != nil && len(children) == 0 {
		logr.FromContextOrDiscard(ctx).V(1).Info("cannot list the bridges' cgroups", "parent", w.parent, "err", err.Error())
		return
	}
	for _, c := range children {
		if _, _, ours := parseBridgeCgroup(c); ours {
			groups[w.parent+"/"+c] = each
		}
	}
	highest := map[string]map[string]float64{ScopeBridge: {"cpu": 0, "memory": 0}, ScopeAll: {"cpu": 0, "memory": 0}}
	now, last := w.clk.Now(), map[string]sample{}
	for group, l := range groups {
		scope := ScopeBridge
		if group == w.parent {
			scope = ScopeAll
		}
		u, err := w.cgroups.Usage(group)
		if err != nil {
			continue
		}
		ratios := map[string]float64{}
		if l.MemoryBytes > 0 {
			ratios["memory"] = float64(u.MemoryBytes) / float64(l.MemoryBytes)
		}
		if prev, ok := w.last[group]; ok && l.CPUMillis > 0 && now.After(prev.at) && u.CPUNanos >= prev.cpu {
			wall := now.Sub(prev.at).Seconds()
			ratios["cpu"] = float64(u.CPUNanos-prev.cpu) / 1e9 / wall / (float64(l.CPUMillis) / 1000)
		}
		last[group] = sample{at: now, cpu: u.CPUNanos}
		for res, r := range ratios {
			highest[scope][res] = max(highest[scope][res], r)
			w.warn(ctx, scope, group, res, r, l)
		}
	}
	for g := range w.last {
		if _, ok := last[g]; !ok {
			delete(w.over, g+"/cpu")
			delete(w.over, g+"/memory")
		}
	}
	w.last = last
	for scope, byRes := range highest {
		for res, r := range byRes {
			w.ratio.WithLabelValues(scope, res).Set(r)
		}
	}
}

// warn counts and reports a group's share of one limit on its rise to the warning share.
func (w *LimitWatcher) warn(ctx context.Context, scope, group, res string, ratio float64, l Limits) {
	key := group + "/" + res
	at := ratio*100 >= float64(w.cfg.S3.BridgeLimits.WarnPercent)
	was := w.over[key]
	w.over[key] = at
	if !at || was {
		return
	}
	w.near.WithLabelValues(scope, res).Inc()
	limit := fmt.Sprintf("%dm CPU", l.CPUMillis)
	if res == "memory" {
		limit = fmt.Sprintf("%d MiB of memory", l.MemoryBytes>>20)
	}
	which, key2 := "the bridge in cgroup "+group, "perBridge"
	if scope == ScopeAll {
		which, key2 = "all of pvrescue's s3fs bridges together (cgroup "+group+")", "all"
	}
	logr.FromContextOrDiscard(ctx).Info("bridge near its limit", "cgroup", group, "resource", res, "used", fmt.Sprintf("%.0f%%", ratio*100))
	if w.recorder != nil {
		w.recorder.Eventf(w.node, corev1.EventTypeWarning, contract.ReasonBridgeNearLimit,
			"%s used %.0f%% of its limit of %s (s3.bridgeLimits.%s.%s): at the limit its reads and writes are throttled (CPU) or its s3fs is killed (memory)",
			which, ratio*100, limit, key2, res)
	}
}
