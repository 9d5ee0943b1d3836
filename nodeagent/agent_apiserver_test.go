package nodeagent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

type fakeContactOS struct {
	mu      sync.Mutex
	probes  int
	reports []Outage
	failing bool // ReportOutage fails
}

func (f *fakeContactOS) Probe(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probes++
	return nil
}

func (f *fakeContactOS) ReportOutage(_ context.Context, o Outage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return errors.New("apiserver still flaky")
	}
	f.reports = append(f.reports, o)
	return nil
}

func (f *fakeContactOS) snapshot() (int, []Outage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probes, append([]Outage(nil), f.reports...)
}

func metricValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	m, err := testenv.FindMetric(g, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.MetricValue(m)
}

// The transport tells answers from failures; an outage shows in metrics while it lasts and is
// written to the Node once the API server answers, blips shorter than MinReportedOutage only
// in metrics.
func TestAPIContactOutageMetricsAndCondition(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	fos := &fakeContactOS{failing: true}
	reg := prometheus.NewRegistry()
	c := NewAPIContact(clk, fos, reg, APIContactOptions{ProbeInterval: 5 * time.Second, MinReportedOutage: 10 * time.Second})

	up := true
	var mu sync.Mutex
	rt := c.WrapTransport(roundTripperFunc(func(*http.Request) (*http.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			return nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody}, nil // any answer is contact
	}))
	send := func(ctx context.Context) {
		req := httptest.NewRequest(http.MethodGet, "https://apiserver/version", nil).WithContext(ctx)
		_, _ = rt.RoundTrip(req)
	}
	setUp := func(v bool) { mu.Lock(); up = v; mu.Unlock() }

	send(context.Background())
	if !c.Reachable() || c.Unreachable() != 0 || metricValue(t, reg, "pvrescue_agent_apiserver_reachable") != 1 {
		t.Fatalf("after an answer: reachable=%v unreachable=%v", c.Reachable(), c.Unreachable())
	}
	if got := metricValue(t, reg, "pvrescue_agent_apiserver_last_contact_timestamp_seconds"); got != 1000 {
		t.Fatalf("last contact = %v, want 1000", got)
	}

	// A request the agent cancelled itself says nothing about the API server.
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	setUp(false)
	send(cctx)
	if !c.Reachable() {
		t.Fatal("a cancelled request marked the API server away")
	}

	// A blip: 3 s away, counted, not written to the Node.
	send(context.Background())
	clk.Step(3 * time.Second)
	setUp(true)
	send(context.Background())
	if got := metricValue(t, reg, "pvrescue_agent_apiserver_outages_total"); got != 1 {
		t.Fatalf("outages_total = %v after a blip, want 1", got)
	}

	// A real outage: 3 minutes from the last answer.
	setUp(false)
	clk.Step(time.Second)
	send(context.Background()) // last answer was 1 s ago
	clk.Step(3 * time.Minute)
	if c.Reachable() {
		t.Fatal("reachable while every request fails")
	}
	if got := metricValue(t, reg, "pvrescue_agent_apiserver_unreachable_seconds"); got != 181 {
		t.Fatalf("unreachable_seconds = %v, want 181 (since the last answer)", got)
	}
	if got := metricValue(t, reg, "pvrescue_agent_apiserver_reachable"); got != 0 {
		t.Fatalf("reachable = %v during the outage", got)
	}

	ctx, stop := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	defer stop()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	// While away, Run probes on every tick.
	for i := 0; i < 2; i++ {
		testenv.WaitFor(t, 10*time.Second, "the probe ticker", testenv.Until(clk.HasWaiters))
		clk.Step(5 * time.Second)
	}
	testenv.WaitFor(t, 10*time.Second, "probes while away", testenv.Until(func() bool { p, _ := fos.snapshot(); return p >= 1 }))

	setUp(true)
	send(context.Background()) // the API server is back: 191 s after the last answer
	if got := metricValue(t, reg, "pvrescue_agent_apiserver_last_outage_seconds"); got != 191 {
		t.Fatalf("last_outage_seconds = %v, want 191", got)
	}
	if got := metricValue(t, reg, "pvrescue_agent_apiserver_unreachable_seconds"); got != 0 {
		t.Fatalf("unreachable_seconds = %v once back, want 0", got)
	}
	// The first Node write fails (the API server is still flaky): it is retried on the next tick.
	fos.mu.Lock()
	fos.failing = false
	fos.mu.Unlock()
	testenv.WaitFor(t, 10*time.Second, "the outage written to the Node", func() error {
		if _, r := fos.snapshot(); len(r) == 1 {
			return nil
		}
		if clk.HasWaiters() {
			clk.Step(5 * time.Second)
		}
		return errors.New("not yet")
	})
	_, reports := fos.snapshot()
	if d := reports[0].Duration(); d != 191*time.Second {
		t.Fatalf("reported outage %v, want 191s", d)
	}
	cond := OutageCondition(reports[0])
	if cond.Type != ConditionAPIServerUnreachable || cond.Status != corev1.ConditionFalse || !strings.Contains(cond.Message, "3m11s") {
		t.Fatalf("condition = %+v", cond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// With the API server never reached since the start, the outage counts from the start.
func TestAPIContactAwayFromStart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := NewAPIContact(clk, &fakeContactOS{}, nil, APIContactOptions{})
	c.Failed()
	clk.Step(time.Minute)
	if got := c.Unreachable(); got != time.Minute {
		t.Fatalf("Unreachable() = %v, want 1m", got)
	}
	c.Answered()
	if got := c.lastOutageDuration(); got != time.Minute {
		t.Fatalf("outage = %v, want 1m", got)
	}
}

// Returned fires once per ended outage, never for answers while the API server was there.
func TestAPIContactReturnedAfterAnOutageOnly(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := NewAPIContact(clk, &fakeContactOS{}, nil, APIContactOptions{})
	returned := func() bool {
		select {
		case <-c.Returned():
			return true
		default:
			return false
		}
	}
	c.Answered()
	if returned() {
		t.Fatal("Returned fired for an answer with no outage before it")
	}
	c.Failed()
	c.Failed()
	if returned() {
		t.Fatal("Returned fired while the API server is away")
	}
	clk.Step(time.Minute)
	c.Answered()
	c.Answered()
	if !returned() {
		t.Fatal("Returned did not fire when the API server answered after an outage")
	}
	if returned() {
		t.Fatal("Returned fired twice for one outage")
	}
}

type syncGate struct{ ch chan struct{} }

func (g syncGate) WaitForSync(ctx context.Context) error {
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The agent serves /healthz while its rescues wait for the informers (an API server away at
// start), and the rescues start once they synced.
func TestAgentServesHealthBeforeSync(t *testing.T) {
	gate := syncGate{ch: make(chan struct{})}
	started := make(chan struct{})
	addr := testenv.Addr("127.0.0.1", testenv.FreePort(t))
	a := New(Options{HealthAddr: addr, MetricsAddr: "0"}, prometheus.NewRegistry())
	a.Add("localdisk", AfterSync(gate, RunnableFunc(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return nil
	})))
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	testenv.WaitFor(t, 10*time.Second, "/healthz ok before sync", func() error {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
	select {
	case <-started:
		t.Fatal("the rescue started before the view synced")
	default:
	}
	close(gate.ch)
	testenv.WaitFor(t, 10*time.Second, "the rescue started after sync", testenv.Until(func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	}))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h := a.RunnableHealth(); h["localdisk"] != nil {
		t.Fatalf("RunnableHealth = %v", h)
	}
}
