package webhook

import (
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
	for _, c := range []prometheus.Collector{m.Admissions, m.Latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register webhook metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) observe(o Outcome, d time.Duration) {
	if m == nil {
		return
	}
	m.Admissions.WithLabelValues(o.Result, o.Reason).Inc()
	m.Latency.WithLabelValues(o.Result).Observe(d.Seconds())
}
