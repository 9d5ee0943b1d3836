package localdisk

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the local-disk rescuer.
type Metrics struct {
	ActiveFakes  prometheus.Gauge
	MissingPaths prometheus.Gauge
	SyncSeconds  prometheus.Histogram
	// FakeLatency is from the event (or resync) that found a path missing to the fake's link.
	FakeLatency prometheus.Histogram
	Errors      *prometheus.CounterVec
	Retired     prometheus.Counter
}

// NewMetrics registers the metrics on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ActiveFakes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pvrescue_localdisk_fake_devices_active",
			Help: "Fake devices currently standing in for missing local disks."}),
		MissingPaths: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pvrescue_localdisk_missing_paths",
			Help: "Watched local block PV paths whose disk is missing (faked or not)."}),
		SyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pvrescue_localdisk_sync_duration_seconds",
			Help: "Duration of one reconcile pass.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		FakeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pvrescue_localdisk_fake_creation_seconds",
			Help: "From detecting a missing path to its fake device being linked.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pvrescue_localdisk_errors_total",
			Help: "Errors by kind (create, retire, invalid, sync, api)."}, []string{"kind"}),
		Retired: prometheus.NewCounter(prometheus.CounterOpts{Name: "pvrescue_localdisk_fakes_retired_total",
			Help: "Fake devices retired after the disk returned or the PV went away."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.ActiveFakes, m.MissingPaths, m.SyncSeconds, m.FakeLatency, m.Errors, m.Retired} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
