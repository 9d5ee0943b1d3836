package localdisk

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pvrescue/pvrescue/internal/metrics"
)

// Metrics of the local-disk rescuer (names agreed in the project's metric list).
type Metrics struct {
	ActiveFakes prometheus.Gauge
	// FakeActive{pv} is 1 while a fake serves the PV; the series is removed when it is retired.
	FakeActive *prometheus.GaugeVec
	// FakeCreated{pv} is the unix time the fake was made.
	FakeCreated *prometheus.GaugeVec
	// DiskMissing{pv} is 1 while the PV's disk is missing; removed when back or gone.
	DiskMissing      *prometheus.GaugeVec
	DiskMissingSince *prometheus.GaugeVec
	SyncSeconds      prometheus.Histogram
	// FakeLatency is from the event (or resync) that found a path missing to the fake's link.
	FakeLatency prometheus.Histogram
	Errors      *prometheus.CounterVec
	Retired     prometheus.Counter
}

// NewMetrics registers the metrics on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	r := metrics.NewRegistration(reg)
	pv := []string{"pv"}
	m := &Metrics{
		ActiveFakes: metrics.Add(r, prometheus.NewGauge(prometheus.GaugeOpts{Name: "pvrescue_localdisk_fake_devices_active",
			Help: "Fake devices currently standing in for missing local disks."})),
		FakeActive: metrics.Add(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pvrescue_localdisk_fake_device_active",
			Help: "1 while a fake device serves the PV."}, pv)),
		FakeCreated: metrics.Add(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pvrescue_localdisk_fake_device_created_timestamp_seconds",
			Help: "Unix time the PV's fake device was made."}, pv)),
		DiskMissing: metrics.Add(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pvrescue_localdisk_disk_missing",
			Help: "1 while the PV's local disk is missing (faked or not)."}, pv)),
		DiskMissingSince: metrics.Add(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pvrescue_localdisk_disk_missing_since_timestamp_seconds",
			Help: "Unix time the PV's local disk was first seen missing."}, pv)),
		SyncSeconds: metrics.Add(r, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pvrescue_localdisk_sync_duration_seconds",
			Help: "Duration of one reconcile pass.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})),
		FakeLatency: metrics.Add(r, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pvrescue_localdisk_fake_creation_seconds",
			Help: "From detecting a missing path to its fake device being linked.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})),
		Errors: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pvrescue_localdisk_errors_total",
			Help: "Errors by reason (create, retire, invalid, sync, api)."}, []string{"reason"})),
		Retired: metrics.Add(r, prometheus.NewCounter(prometheus.CounterOpts{Name: "pvrescue_localdisk_fakes_retired_total",
			Help: "Fake devices retired after the disk returned or the PV went away."})),
	}
	return m, r.Err()
}
