// Package nodeagent is the per-node agent: a set of runnables (the local-disk rescuer, the s3fs
// restorer) sharing one Kubernetes client, event recorder and metrics registry, with /healthz
// and /metrics servers.
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
	// informer, PVs/PVCs/StorageClasses read on demand. Never list or watch cluster-wide objects.
	View ClusterView
	// Recorder emits Events as component "pvrescue-agent", host NodeName.
	Recorder record.EventRecorder
	// Registerer is the agent's own Prometheus registry.
	Registerer prometheus.Registerer
	// Clock is the one time source; tests pass k8s.io/utils/clock/testing's fake.
	Clock clock.WithTicker
	// Remounter, when set, puts restored mounts back into running containers.
	Remounter ContainerRemounter
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
	// UnhealthyAfter: /healthz fails when a runnable has failed this many times in a row.
	UnhealthyAfter int
}

// Agent runs its runnables together until ctx is done.
//
// Supervision policy: a runnable that returns an error (or panics) is logged and restarted with
// exponential backoff; one broken rescuer must not stop the other. /healthz fails while any
// runnable has failed UnhealthyAfter times in a row, so the kubelet restarts the whole agent if a
// part keeps failing.
type Agent struct {
	opts      Options
	gatherer  prometheus.Gatherer
	runnables []Named

	mu       sync.Mutex
	failures map[string]int
	lastErr  map[string]error
}

// New returns an agent serving metrics from gatherer.
func New(opts Options, gatherer prometheus.Gatherer, runnables ...Named) *Agent {
	if opts.RestartBackoff <= 0 {
		opts.RestartBackoff = time.Second
	}
	if opts.MaxRestartBackoff < opts.RestartBackoff {
		opts.MaxRestartBackoff = time.Minute
	}
	if opts.UnhealthyAfter <= 0 {
		opts.UnhealthyAfter = 5
	}
	return &Agent{opts: opts, gatherer: gatherer, runnables: runnables,
		failures: map[string]int{}, lastErr: map[string]error{}}
}

// Add appends a runnable; call before Run.
func (a *Agent) Add(name string, r Runnable) {
	a.runnables = append(a.runnables, Named{Name: name, Runnable: r})
}

// Healthy reports nil unless a runnable keeps failing.
func (a *Agent) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, n := range a.failures {
		if n >= a.opts.UnhealthyAfter {
			return fmt.Errorf("%s failed %d times in a row: %v", name, n, a.lastErr[name])
		}
	}
	return nil
}

// Run starts the servers and every runnable, and returns when ctx is done and all have stopped.
// It returns an error only when a server cannot listen.
func (a *Agent) Run(ctx context.Context) error {
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
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			defer c()
			_ = srv.Shutdown(sctx)
		}()
	}
	for _, r := range a.runnables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.supervise(ctx, r)
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-serverErr:
		cancel()
	}
	wg.Wait()
	return err
}

func (a *Agent) supervise(ctx context.Context, r Named) {
	log := logr.FromContextOrDiscard(ctx).WithName(r.Name)
	rctx := logr.NewContext(ctx, log)
	backoff := a.opts.RestartBackoff
	for {
		start := time.Now()
		err := runSafely(rctx, r.Runnable)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("returned before shutdown")
		}
		a.mu.Lock()
		if time.Since(start) > 10*a.opts.MaxRestartBackoff {
			a.failures[r.Name] = 0 // it ran fine for a long while: not a crash loop
			backoff = a.opts.RestartBackoff
		}
		a.failures[r.Name]++
		a.lastErr[r.Name] = err
		n := a.failures[r.Name]
		a.mu.Unlock()
		log.Error(err, "runnable failed; restarting", "failures", n, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
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
