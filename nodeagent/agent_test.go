package nodeagent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
)

func TestAgentRestartsFailingRunnableAndStopsOnCancel(t *testing.T) {
	var failing, steady atomic.Int32
	a := New(Options{RestartBackoff: time.Millisecond, MaxRestartBackoff: 2 * time.Millisecond, UnhealthyAfter: 3},
		prometheus.NewRegistry())
	a.Add("failing", RunnableFunc(func(ctx context.Context) error {
		if failing.Add(1) == 2 {
			panic("boom") // a panic is a failure too, not a crash of the agent
		}
		return errors.New("broken")
	}))
	a.Add("steady", RunnableFunc(func(ctx context.Context) error {
		steady.Add(1)
		<-ctx.Done()
		return nil
	}))
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for failing.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if failing.Load() < 4 {
		t.Fatalf("failing runnable ran %d times, want restarts", failing.Load())
	}
	if err := a.Healthy(); err == nil {
		t.Fatal("healthy although a runnable keeps failing")
	}
	rec := httptest.NewRecorder()
	a.healthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("/healthz = %d", rec.Code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("agent did not stop on cancel")
	}
	if steady.Load() != 1 {
		t.Fatalf("steady runnable started %d times, want 1", steady.Load())
	}
}

func TestAgentHealthyAndMetricsServed(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "pvrescue_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	a := New(Options{MetricsAddr: "127.0.0.1:0"}, reg)
	rec := httptest.NewRecorder()
	a.healthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Fatalf("/healthz = %d %q", rec.Code, rec.Body.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	a = New(Options{MetricsAddr: "256.0.0.1:1"}, reg)
	if err := a.Run(context.Background()); err == nil {
		t.Fatal("bad listen address accepted")
	}
}
