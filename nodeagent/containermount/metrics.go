package containermount

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the container remounter (names agreed in METRICS.md).
type Metrics struct {
	// Remounts counts container mounts handled, by result ("success"|"failure") and reason
	// ("" on success, else Reason(err)).
	Remounts *prometheus.CounterVec
	// Duration is the time from the host-side restore (the call) to the last container fixed.
	Duration prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg (nil: unregistered). A collector
// already registered under the same name is reused, so two remounters in one process share it.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Remounts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_container_remounts_total",
			Help: "Dead volume mounts inside running containers replaced by the live mount, by result and failure reason.",
		}, []string{"result", "reason"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pvrescue_container_remount_duration_seconds",
			Help:    "Time from the host-side restore of a volume to the last of its pod's containers fixed.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.Remounts, err = register(reg, m.Remounts); err != nil {
		return nil, err
	}
	if m.Duration, err = register(reg, m.Duration); err != nil {
		return nil, err
	}
	return m, nil
}

func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("register containermount metrics: %w", err)
	}
	return c, nil
}
