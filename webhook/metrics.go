package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pvrescue/pvrescue/internal/metrics"
)

// Metrics of the admission handler.
type Metrics struct {
	Admissions *prometheus.CounterVec
	Latency    *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them on reg (controller-runtime's metrics.Registry
// in the server, a fresh registry in tests); a second server in the same process (tests) shares
// the collectors already registered.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	r := metrics.NewRegistration(reg)
	m := &Metrics{
		Admissions: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_webhook_admissions_total",
			Help: "Pod admissions by result (injected, skipped, error) and reason.",
		}, []string{"result", "reason"})),
		Latency: metrics.Add(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pvrescue_webhook_admission_duration_seconds",
			Help:    "Time to answer one pod admission, by result.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"result"})),
	}
	return m, r.Err()
}

func (m *Metrics) observe(o Injection, d time.Duration) {
	if m == nil {
		return
	}
	m.Admissions.WithLabelValues(o.Result, o.Reason).Inc()
	m.Latency.WithLabelValues(o.Result).Observe(d.Seconds())
}
