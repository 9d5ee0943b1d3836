package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// A rescue that keeps failing is restarted in process, its failures show in metrics and
// RunnableHealth, and /healthz stays ok: restarting the container would kill the other rescue's
// s3fs bridges and fix nothing for the failing one.
func TestAgentFailingRunnableDoesNotFailLiveness(t *testing.T) {
	var failing, steady atomic.Int32
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	reg := prometheus.NewRegistry()
	a := New(Options{RestartBackoff: time.Second, MaxRestartBackoff: 4 * time.Second, Clock: clk}, reg)
	a.Add("localdisk", RunnableFunc(func(ctx context.Context) error {
		if failing.Add(1) == 2 {
			panic("boom") // a panic is a failure too, not a crash of the agent
		}
		return errors.New("broken disk")
	}))
	a.Add("s3mount", RunnableFunc(func(ctx context.Context) error {
		steady.Add(1)
		<-ctx.Done()
		return nil
	}))
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for want := int32(1); want <= 4; want++ {
		// Each failure leaves the supervisor waiting on the fake clock's backoff timer.
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("failure %d and the backoff timer", want), testenv.Until(func() bool { return failing.Load() == want && clk.HasWaiters() }))
		clk.Step(4 * time.Second)
	}
	testenv.WaitFor(t, 10*time.Second, "failure 5 and the backoff timer", testenv.Until(func() bool { return failing.Load() == 5 && clk.HasWaiters() }))

	if err := a.Healthy(); err != nil {
		t.Fatalf("Healthy() = %v although only a rescue fails", err)
	}
	rec := httptest.NewRecorder()
	a.healthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/healthz = %d %q, want 200", rec.Code, rec.Body.String())
	}
	h := a.RunnableHealth()
	if h["localdisk"] == nil || h["s3mount"] != nil {
		t.Fatalf("RunnableHealth = %v, want localdisk failing and s3mount healthy", h)
	}
	for _, c := range []struct {
		metric, runnable string
		want             float64
	}{
		{"pvrescue_agent_runnable_up", "localdisk", 0},
		{"pvrescue_agent_runnable_up", "s3mount", 1},
		{"pvrescue_agent_runnable_consecutive_failures", "localdisk", 5},
		{"pvrescue_agent_runnable_failures_total", "localdisk", 5},
		{"pvrescue_agent_runnable_failures_total", "s3mount", 0},
	} {
		if got := gatheredValue(t, reg, c.metric, c.runnable); got != c.want {
			t.Errorf("%s{runnable=%q} = %v, want %v", c.metric, c.runnable, got, c.want)
		}
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
		t.Fatalf("steady runnable started %d times, want 1 (never restarted by the other's failures)", steady.Load())
	}
}

func gatheredValue(t *testing.T, g prometheus.Gatherer, name, runnable string) float64 {
	t.Helper()
	m, err := testenv.FindMetric(g, name, map[string]string{"runnable": runnable})
	if err != nil {
		t.Fatal(err)
	}
	return testenv.MetricValue(m)
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
