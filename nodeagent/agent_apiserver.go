package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/metrics"
)

// ConditionAPIServerUnreachable is the Node condition the agent writes once the API server is
// reachable again after an outage: Status False, its message saying how long it was away.
// (While it is away the agent cannot write anything, so the condition is never True.)
const ConditionAPIServerUnreachable corev1.NodeConditionType = contract.ConditionAPIServerUnreachable

// APIContactOptions tune the API server contact tracking.
type APIContactOptions struct {
	// ProbeInterval is how often a cheap request (GET /version) is sent when no other request
	// answered within it, and how often one is retried while the API server is away (default 5s).
	ProbeInterval time.Duration
	// MinReportedOutage is the shortest outage written to the Node condition (default 10s):
	// one refused connection is not an outage worth a status write.
	MinReportedOutage time.Duration
}

func (o *APIContactOptions) defaults() {
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 5 * time.Second
	}
	if o.MinReportedOutage <= 0 {
		o.MinReportedOutage = 10 * time.Second
	}
}

// Outage is one stretch without an answer from the API server: From is the last answer before
// it (or the agent's start, when the API server never answered), To the first answer after.
type Outage struct{ From, To time.Time }

// Duration of the outage.
func (o Outage) Duration() time.Duration { return o.To.Sub(o.From) }

// APIContactOS is what the tracker needs of the cluster: a cheap request and the Node status
// patch. The real one is KubeContactOS.
type APIContactOS interface {
	// Probe sends a request whose answer (any HTTP status) proves the API server reachable; the
	// tracker learns the outcome through its transport (WrapTransport), so Probe's own error is
	// only logged.
	Probe(ctx context.Context) error
	// ReportOutage writes the Node condition for an outage that ended.
	ReportOutage(ctx context.Context, o Outage) error
}

// APIContact tracks whether the API server answers, from every request the agent's client
// sends (WrapTransport) and, when they are quiet, a probe. It never stops the agent: while the
// API server is away the rescues keep what they hold (bridges, fakes, restored mounts) and the
// informers keep their last state; this type only says how long it was away — in metrics at
// once, on the Node once it answers again.
type APIContact struct {
	clock clock.WithTicker
	opts  APIContactOptions
	os    APIContactOS

	mu          sync.Mutex
	lastContact time.Time // last answer of any HTTP status; zero before the first
	down        bool      // a request failed at the transport since lastContact
	downFrom    time.Time // lastContact when it went down (or the start)
	pending     []Outage  // ended outages not yet written to the Node
	last        Outage    // the last ended outage
	started     time.Time
	changed     chan struct{}
	returned    chan struct{}

	reachable         prometheus.Gauge
	lastContactMetric prometheus.Gauge
	outages           prometheus.Counter
	lastOutage        prometheus.Gauge
	metricsErr        error
}

// NewAPIContact returns a tracker; wire WrapTransport into the client's rest.Config (Wrap) and
// run it (Run) for the probe and the Node condition. reg may be nil.
func NewAPIContact(clk clock.WithTicker, os APIContactOS, reg prometheus.Registerer, opts APIContactOptions) *APIContact {
	opts.defaults()
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := &APIContact{clock: clk, opts: opts, os: os, started: clk.Now(), changed: make(chan struct{}, 1),
		returned: make(chan struct{}, 1)}
	r := metrics.NewRegistration(reg)
	c.reachable = metrics.Add(r, prometheus.NewGauge(prometheus.GaugeOpts{Name: "pvrescue_agent_apiserver_reachable",
		Help: "1 while the API server answers the agent's requests, 0 while it is away (the rescues keep running on what they hold)."}))
	c.lastContactMetric = metrics.Add(r, prometheus.NewGauge(prometheus.GaugeOpts{Name: "pvrescue_agent_apiserver_last_contact_timestamp_seconds",
		Help: "Unix time of the API server's last answer to the agent (any HTTP status)."}))
	metrics.Add(r, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pvrescue_agent_apiserver_unreachable_seconds",
		Help: "How long the API server has been away from the agent (since its last answer, or the agent's start); 0 while it answers."},
		func() float64 { return c.Unreachable().Seconds() }))
	c.outages = metrics.Add(r, prometheus.NewCounter(prometheus.CounterOpts{Name: "pvrescue_agent_apiserver_outages_total",
		Help: "Outages of the API server seen by the agent that ended (it answered again)."}))
	c.lastOutage = metrics.Add(r, prometheus.NewGauge(prometheus.GaugeOpts{Name: "pvrescue_agent_apiserver_last_outage_seconds",
		Help: "Length of the last ended outage of the API server seen by the agent."}))
	c.metricsErr = r.Err()
	return c
}

// WrapTransport is for rest.Config.Wrap: every answer counts as contact, every transport
// failure (refused, reset, timed out) as the API server away. A request the agent cancelled
// itself says nothing.
func (c *APIContact) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		switch {
		case err == nil:
			c.Answered()
		case req.Context().Err() != nil, errors.Is(err, context.Canceled):
		default:
			c.Failed()
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Answered records an answer from the API server now.
func (c *APIContact) Answered() {
	now := c.clock.Now()
	c.mu.Lock()
	ended := c.down
	o := Outage{From: c.downFrom, To: now}
	c.lastContact, c.down = now, false
	if ended {
		c.last = o
	}
	if ended && o.Duration() >= c.opts.MinReportedOutage {
		c.pending = append(c.pending, o)
	}
	c.mu.Unlock()
	c.reachable.Set(1)
	c.lastContactMetric.Set(float64(now.UnixNano()) / 1e9)
	if ended {
		c.outages.Inc()
		c.lastOutage.Set(o.Duration().Seconds())
		c.signal()
		select {
		case c.returned <- struct{}{}:
		default:
		}
	}
}

// Returned receives after the API server answers again following a transport failure, so work
// that waited on it (a replay's Secret, a PV) is retried at once, not after its back-off. One
// consumer (nodeagent.Deps.APIReturned).
func (c *APIContact) Returned() <-chan struct{} { return c.returned }

// Failed records a transport failure now.
func (c *APIContact) Failed() {
	c.mu.Lock()
	if !c.down {
		c.down = true
		c.downFrom = c.lastContact
		if c.downFrom.IsZero() {
			c.downFrom = c.started
		}
	}
	c.mu.Unlock()
	c.reachable.Set(0)
	c.signal()
}

func (c *APIContact) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Reachable reports whether the API server answered since its last transport failure.
func (c *APIContact) Reachable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.down && !c.lastContact.IsZero()
}

// Unreachable is how long the API server has been away: 0 while it answers, else the time since
// its last answer (or since the agent started, when it never answered).
func (c *APIContact) Unreachable() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.down:
		return c.clock.Since(c.downFrom)
	case c.lastContact.IsZero():
		return c.clock.Since(c.started)
	}
	return 0
}

// Run probes the API server when no request answered within ProbeInterval, and writes each
// ended outage to the Node condition (retrying while the write fails). It returns nil when ctx
// is done.
func (c *APIContact) Run(ctx context.Context) error {
	if c.metricsErr != nil {
		return fmt.Errorf("apiserver contact metrics: %w", c.metricsErr)
	}
	log := logr.FromContextOrDiscard(ctx)
	tick := c.clock.NewTicker(c.opts.ProbeInterval)
	defer tick.Stop()
	wasDown := false
	for {
		c.report(ctx, log)
		c.mu.Lock()
		quiet := c.down || c.clock.Since(c.lastContact) >= c.opts.ProbeInterval
		down := c.down
		c.mu.Unlock()
		if down != wasDown {
			if down {
				log.Info("API server unreachable; rescues keep running on what they hold, and what needs the API server resumes when it answers")
			} else {
				log.Info("API server reachable again", "away", c.lastOutageDuration().Round(time.Millisecond))
			}
			wasDown = down
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.changed:
			continue
		case <-tick.C():
		}
		if quiet {
			pctx, cancel := context.WithTimeout(ctx, c.opts.ProbeInterval)
			if err := c.os.Probe(pctx); err != nil {
				log.V(1).Info("API server probe failed", "err", err.Error())
			}
			cancel()
		}
	}
}

func (c *APIContact) lastOutageDuration() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last.Duration()
}

func (c *APIContact) report(ctx context.Context, log logr.Logger) {
	c.mu.Lock()
	if c.down || len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	// Only the last outage is written: the condition holds one message, and the metrics count them all.
	o := c.pending[len(c.pending)-1]
	c.mu.Unlock()
	if err := c.os.ReportOutage(ctx, o); err != nil {
		log.Error(err, "writing the API server outage to the Node; retrying", "away", o.Duration())
		return
	}
	log.Info("API server outage written to the Node condition", "condition", ConditionAPIServerUnreachable, "away", o.Duration().Round(time.Second), "from", o.From, "to", o.To)
	c.mu.Lock()
	if n := len(c.pending); n > 0 && c.pending[n-1] == o {
		c.pending = nil
	}
	c.mu.Unlock()
}

// OutageCondition is the Node condition written for an ended outage.
func OutageCondition(o Outage) corev1.NodeCondition {
	return corev1.NodeCondition{
		Type: ConditionAPIServerUnreachable, Status: corev1.ConditionFalse, Reason: contract.ReasonReconnected,
		Message: fmt.Sprintf("pvrescue-agent could not reach the API server for %s (from %s to %s); its rescues kept running on what they held",
			o.Duration().Round(time.Second), o.From.UTC().Format(time.RFC3339), o.To.UTC().Format(time.RFC3339)),
		LastHeartbeatTime:  metav1.NewTime(o.To),
		LastTransitionTime: metav1.NewTime(o.To),
	}
}

// NodeStatusPatcher is the part of the client KubeContactOS writes through.
type NodeStatusPatcher interface {
	PatchStatus(ctx context.Context, nodeName string, data []byte) (*corev1.Node, error)
}

// Prober is the request KubeContactOS sends to prove the API server reachable.
type Prober func(ctx context.Context) error

// KubeContactOS is the real APIContactOS: Probe (e.g. GET /version, readable by every
// authenticated client) and a strategic-merge patch of this Node's status conditions.
type KubeContactOS struct {
	NodeName string
	Nodes    NodeStatusPatcher
	Prober   Prober
}

// Probe implements APIContactOS.
func (k KubeContactOS) Probe(ctx context.Context) error { return k.Prober(ctx) }

// ReportOutage implements APIContactOS.
func (k KubeContactOS) ReportOutage(ctx context.Context, o Outage) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{OutageCondition(o)}}})
	if err != nil {
		return err
	}
	if _, err := k.Nodes.PatchStatus(ctx, k.NodeName, patch); err != nil {
		return fmt.Errorf("patch node %s condition %s: %w", k.NodeName, ConditionAPIServerUnreachable, err)
	}
	return nil
}
