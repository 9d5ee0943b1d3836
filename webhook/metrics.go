package webhook

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the admission handler.
type Metrics struct {
	Admissions *prometheus.CounterVec
	Latency    *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them on reg (controller-runtime's metrics.Registry
// in the server, a fresh registry in tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_webhook_admissions_total",
			Help: "Pod admissions by result (injected, skipped, error) and reason.",
		}, []string{"result", "reason"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pvrescue_webhook_admission_duration_seconds",
			Help:    "Time to answer one pod admission, by result.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"result"}),
	}
	// A second server in the same process (tests) shares the collectors already registered.
	if err := reg.Register(m.Admissions); err != nil {
		are := prometheus.AlreadyRegisteredError{}
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("register webhook metrics: %w", err)
		}
		m.Admissions = are.ExistingCollector.(*prometheus.CounterVec)
	}
	if err := reg.Register(m.Latency); err != nil {
		are := prometheus.AlreadyRegisteredError{}
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("register webhook metrics: %w", err)
		}
		m.Latency = are.ExistingCollector.(*prometheus.HistogramVec)
	}
	return m, nil
}

func (m *Metrics) observe(o Injection, d time.Duration) {
	if m == nil {
		return
	}
	m.Admissions.WithLabelValues(o.Result, o.Reason).Inc()
	m.Latency.WithLabelValues(o.Result).Observe(d.Seconds())
}
