package containermount

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pvrescue/pvrescue/internal/metrics"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// Metrics of the container remounter (names agreed in METRICS.md).
type Metrics struct {
	// Remounts counts container mounts handled, by result ("success"|"failure") and reason
	// ("" on success, else Reason(err)).
	Remounts *prometheus.CounterVec
	// Duration is the time from the host-side restore (the call) to the last container fixed.
	Duration prometheus.Histogram
	// Replace counts dead container mounts replaced, by mode and why stacked
	// (pvrescue_mount_replace_total, shared with every other caller of mountreplace).
	Replace *mountreplace.Metrics
}

// NewMetrics creates the metrics and registers them with reg (nil: unregistered), the house way
// (internal/metrics): a collector already registered is shared.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	r := metrics.NewRegistration(reg)
	m := &Metrics{
		Remounts: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_container_remounts_total",
			Help: "Dead volume mounts inside running containers replaced by the live mount, by result and failure reason.",
		}, []string{"result", "reason"})),
		Duration: metrics.Add(r, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pvrescue_container_remount_duration_seconds",
			Help:    "Time from the host-side restore of a volume to the last of its pod's containers fixed.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
		})),
	}
	rm, err := mountreplace.NewMetrics(reg)
	m.Replace = rm
	return m, errors.Join(r.Err(), err)
}
