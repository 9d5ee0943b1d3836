package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
)

// Deps is what every rescue of the agent gets; each rescue is built the same way:
// New(deps Deps, os <the rescue's OS seam>, opts <the rescue's Options>).
type Deps struct {
	// NodeName is this node (from the downward API).
	NodeName string
	Config   *config.Config
	// Client is for writes (Events, status, evictions) and the rare uncached read.
	Client kubernetes.Interface
	// View is the node-scoped read side shared by every rescue: pods on this node from one
	// informer, PVs/PVCs/StorageClasses read on demand. Never list or watch cluster-wide objects
	// (the Namespaces the consent rule reads are the one exception: see ViewOptions.RequireConsent).
	View ClusterView
	// Recorder emits Events as component "pvrescue-agent", host NodeName.
	Recorder record.EventRecorder
	// Registerer is the agent's own Prometheus registry.
	Registerer prometheus.Registerer
	// Clock is the one time source; tests pass k8s.io/utils/clock/testing's fake.
	Clock clock.WithTicker
	// Remounter, when set, puts restored mounts back into running containers.
	Remounter ContainerRemounter
	// FUSEExits, when set, receives after a FUSE daemon serving a mount on this node exited
	// (nodeagent/fusewatch), so the S3 rescue checks at once instead of at its next periodic
	// check. One consumer.
	FUSEExits <-chan struct{}
	// APIReturned, when set, receives after the API server answers again following an outage
	// (APIContact.Returned): the S3 rescue then retries at once what waited on the API. One
	// consumer.
	APIReturned <-chan struct{}
}

// Validate reports a missing required dependency.
func (d Deps) Validate() error {
	switch {
	case d.NodeName == "":
		return errors.New("nodeagent: Deps.NodeName is required")
	case d.Config == nil:
		return errors.New("nodeagent: Deps.Config is required")
	case d.Client == nil:
		return errors.New("nodeagent: Deps.Client is required")
	case d.View == nil:
		return errors.New("nodeagent: Deps.View is required")
	case d.Recorder == nil:
		return errors.New("nodeagent: Deps.Recorder is required")
	case d.Clock == nil:
		return errors.New("nodeagent: Deps.Clock is required")
	}
	return nil
}

// Runnable is one long-running part of the agent. Run returns nil when ctx is done.
type Runnable interface {
	Run(ctx context.Context) error
}

// RunnableFunc adapts a function.
type RunnableFunc func(ctx context.Context) error

// Run implements Runnable.
func (f RunnableFunc) Run(ctx context.Context) error { return f(ctx) }

// Named is a runnable with a name for logs and health.
type Named struct {
	Name string
	Runnable
}

// Options of the agent's servers and supervision.
type Options struct {
	// MetricsAddr and HealthAddr are listen addresses; "0" disables a server.
	MetricsAddr string
	HealthAddr  string
	// RestartBackoff is the first delay before restarting a failed runnable; it doubles up to
	// MaxRestartBackoff.
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	// Clock times the backoff (default the real clock).
	Clock clock.WithTicker
}

// Agent runs its runnables together until ctx is done.
//
// Supervision policy: a runnable that returns an error (or panics) is logged and restarted in
// process with exponential backoff; one broken rescue must not stop the other.
//
// Health policy: /healthz answers what a container restart would fix, and a failing rescue is
// not that. A restart of the agent kills every process it started — the s3fs bridges that keep
// other pods' S3 volumes readable among them — so letting one rescue's failures fail the
// liveness probe would turn a local-disk problem into an outage of every S3 volume on the node,
// and the restarted rescue would meet the same broken disk or API again. The supervisor already
// restarts a failed rescue in process, which is all a container restart could do for it. So
// /healthz fails only when the agent process itself cannot answer. Per-rescue health is reported in metrics instead — pvrescue_agent_runnable_up{runnable},
// pvrescue_agent_runnable_consecutive_failures{runnable}, pvrescue_agent_runnable_failures_total{runnable}
// — and in the logs (every failure, with its count and backoff), for alerts that page a human.
type Agent struct {
	opts      Options
	gatherer  prometheus.Gatherer
	runnables []Named
	metrics   *agentMetrics
	metricErr error

	mu       sync.Mutex
	failures map[string]int
	lastErr  map[string]error
}

// New returns an agent serving metrics from gatherer. When gatherer is also a
// prometheus.Registerer (a *prometheus.Registry), the agent registers its per-runnable health
// metrics on it.
func New(opts Options, gatherer prometheus.Gatherer, runnables ...Named) *Agent {
	if opts.RestartBackoff <= 0 {
		opts.RestartBackoff = time.Second
	}
	if opts.MaxRestartBackoff < opts.RestartBackoff {
		opts.MaxRestartBackoff = time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	reg, _ := gatherer.(prometheus.Registerer)
	m, err := newAgentMetrics(reg)
	return &Agent{opts: opts, gatherer: gatherer, runnables: runnables, metrics: m, metricErr: err,
		failures: map[string]int{}, lastErr: map[string]error{}}
}

// Add appends a runnable; call before Run.
func (a *Agent) Add(name string, r Runnable) {
	a.runnables = append(a.runnables, Named{Name: name, Runnable: r})
}

// Healthy is what /healthz reports. A failing runnable does not make the agent unhealthy (see
// RunnableHealth and the type's health policy): the probe fails only when the process cannot
// answer — its health server is gone or the supervisor's state is wedged (Healthy takes the
// supervisor's lock, so a deadlock there times the probe out) — which a restart does fix.
func (a *Agent) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return nil
}

// RunnableHealth reports, per runnable, its last error while it is failing (nil once it runs
// again). It is the per-rescue health that /healthz deliberately leaves out.
func (a *Agent) RunnableHealth() map[string]error {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]error, len(a.runnables))
	for _, r := range a.runnables {
		if a.failures[r.Name] > 0 {
			out[r.Name] = fmt.Errorf("failed %d times in a row: %w", a.failures[r.Name], a.lastErr[r.Name])
		} else {
			out[r.Name] = nil
		}
	}
	return out
}

// Run starts the servers and every runnable, and returns when ctx is done and all have stopped.
// It returns an error only when a server cannot listen or the metrics cannot be registered.
func (a *Agent) Run(ctx context.Context) error {
	if a.metricErr != nil {
		return a.metricErr
	}
	log := logr.FromContextOrDiscard(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	serverErr := make(chan error, 2)
	for _, s := range []struct {
		name, addr string
		h          http.Handler
	}{
		{"metrics", a.opts.MetricsAddr, promhttp.HandlerFor(a.gatherer, promhttp.HandlerOpts{})},
		{"health", a.opts.HealthAddr, a.healthHandler()},
	} {
		if s.addr == "" || s.addr == "0" {
			continue
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			return fmt.Errorf("%s server: listen %s: %w", s.name, s.addr, err)
		}
		log.Info("serving", "server", s.name, "addr", ln.Addr().String())
		srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serverErr <- fmt.Errorf("%s server: %w", s.name, err)
			}
		}()
		go func() {
			defer wg.Done()
			<-ctx.Done()
			// ctx is done: the shutdown gets its own deadline, keeping ctx's values.
			sctx, c := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer c()
			_ = srv.Shutdown(sctx)
		}()
	}
	var sup sync.WaitGroup
	for _, r := range a.runnables {
		a.metrics.up.WithLabelValues(r.Name).Set(1)
		a.metrics.consecutive.WithLabelValues(r.Name).Set(0)
		a.metrics.failures.WithLabelValues(r.Name)
		sup.Add(1)
		go func() {
			defer sup.Done()
			a.supervise(ctx, r)
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-serverErr:
		cancel()
	}
	sup.Wait()
	wg.Wait()
	return err
}

func (a *Agent) supervise(ctx context.Context, r Named) {
	log := logr.FromContextOrDiscard(ctx).WithName(r.Name)
	rctx := logr.NewContext(ctx, log)
	backoff := a.opts.RestartBackoff
	for {
		start := a.opts.Clock.Now()
		err := runSafely(rctx, r.Runnable)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("returned before shutdown")
		}
		a.mu.Lock()
		if a.opts.Clock.Since(start) > 10*a.opts.MaxRestartBackoff {
			a.failures[r.Name] = 0 // it ran fine for a long while: not a crash loop
			backoff = a.opts.RestartBackoff
		}
		a.failures[r.Name]++
		a.lastErr[r.Name] = err
		n := a.failures[r.Name]
		a.mu.Unlock()
		a.metrics.up.WithLabelValues(r.Name).Set(0)
		a.metrics.consecutive.WithLabelValues(r.Name).Set(float64(n))
		a.metrics.failures.WithLabelValues(r.Name).Inc()
		log.Error(err, "runnable failed; restarting it in process (the agent's liveness is not affected)",
			"failures", n, "backoff", backoff)
		t := a.opts.Clock.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		a.metrics.up.WithLabelValues(r.Name).Set(1)
		backoff = min(2*backoff, a.opts.MaxRestartBackoff)
	}
}

func runSafely(ctx context.Context, r Runnable) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.Run(ctx)
}

func (a *Agent) healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// SyncWaiter is what AfterSync waits on (KubeView).
type SyncWaiter interface {
	WaitForSync(ctx context.Context) error
}

// AfterSync runs r once the view has listed this node's pods and Node. A rescue started on an
// empty pod list would take every volume for unused, so it waits; the agent's servers do not,
// so an API server that is away at start never fails the liveness probe. Returns nil when ctx
// ends first.
func AfterSync(view SyncWaiter, r Runnable) Runnable {
	return RunnableFunc(func(ctx context.Context) error {
		if err := view.WaitForSync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		return r.Run(ctx)
	})
}
