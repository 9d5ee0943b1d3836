package s3mount

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the restorer. Labels carry reasons only, never volume secrets.
type Metrics struct {
	DeadFound       prometheus.Counter
	Restored        prometheus.Counter
	Failures        *prometheus.CounterVec
	TimeToRestore   prometheus.Histogram
	StagingRestarts prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		DeadFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pvrescue_s3_dead_mounts_found_total",
			Help: "Pod S3 volume mounts found dead (ENOTCONN, EIO, timeout, ...).",
		}),
		Restored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pvrescue_s3_mounts_restored_total",
			Help: "Dead pod S3 volume mounts restored by binding a fresh s3fs mount on top.",
		}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_s3_restore_failures_total",
			Help: "Failed restore attempts, by reason.",
		}, []string{"reason"}),
		TimeToRestore: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pvrescue_s3_time_to_restore_seconds",
			Help:    "Time from finding a mount dead to its restored bind answering.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300},
		}),
		StagingRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pvrescue_s3_staging_exits_total",
			Help: "s3fs processes started by the agent that exited.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.DeadFound, err = register(reg, m.DeadFound); err != nil {
		return nil, err
	}
	if m.Restored, err = register(reg, m.Restored); err != nil {
		return nil, err
	}
	if m.Failures, err = register(reg, m.Failures); err != nil {
		return nil, err
	}
	if m.TimeToRestore, err = register(reg, m.TimeToRestore); err != nil {
		return nil, err
	}
	if m.StagingRestarts, err = register(reg, m.StagingRestarts); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under its name, so a second
// restorer in one process (a test restarting the agent) shares the counters.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("register s3mount metrics: %w", err)
	}
	return c, nil
}
