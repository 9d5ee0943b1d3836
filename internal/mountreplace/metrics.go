package mountreplace

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pvrescue/pvrescue/internal/metrics"
)

// Metrics count replacements by how they were done. Every caller registers the same collector
// (internal/metrics shares one already registered), so the node has one count.
type Metrics struct {
	// Replacements is pvrescue_mount_replace_total{mode,reason}: mode "beneath" (reason "") or
	// "stacked" with the reason (unsupported, refused, submounts).
	Replacements *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	r := metrics.NewRegistration(reg)
	m := &Metrics{Replacements: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pvrescue_mount_replace_total",
		Help: "Dead mounts replaced by a live one, by mode (beneath: the dead mount detached; stacked: left beneath the live one) and why stacked.",
	}, []string{"mode", "reason"}))}
	return m, r.Err()
}

// Observe counts one replacement that put a mount in place (res.Mode set).
func (m *Metrics) Observe(res Result) {
	if m == nil || res.Mode == "" {
		return
	}
	m.Replacements.WithLabelValues(string(res.Mode), res.Reason).Inc()
}
