package s3mount

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pvrescue/pvrescue/internal/metrics"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// Teardown help actions (label action of pvrescue_s3_teardown_help_total).
const (
	TeardownEmptied  = "emptied"  // our own mounts removed from a gone pod's target (never its last mount)
	TeardownFinished = "finished" // after kubelet's teardown: the dead driver mount it left, mount dir, vol_data.json
)

// Restore methods (label method of pvrescue_s3_restores_total).
const (
	MethodReplay = "replay" // the driver's own NodeStage/NodePublish, replayed
	MethodBridge = "bridge" // our own s3fs bound over the dead mount
)

// Metrics of the rescue. Labels carry reasons and object names only, never volume secrets.
type Metrics struct {
	DeadFound prometheus.Counter
	// MountHealthy is 1 live / 0 dead for every S3 CSI target of a pod on this node; a series is
	// removed when its target goes away.
	MountHealthy *prometheus.GaugeVec
	// Restores counts restores by method and result.
	Restores *prometheus.CounterVec
	// Failures counts failed restore attempts by reason.
	Failures      *prometheus.CounterVec
	BridgesActive prometheus.Gauge
	TimeToRestore prometheus.Histogram
	// BridgeExits counts unexpected exits of our bridges' s3fs.
	BridgeExits prometheus.Counter
	// ResultChecks counts the checks before a bind over a kubelet path, by result (OK or the
	// refusal's Event reason).
	ResultChecks *prometheus.CounterVec
	// HungFound counts targets found hung; MountsHung is the number hung now; HungAborts counts
	// aborted FUSE connections (s3.abortHungAfter) by result.
	HungFound  prometheus.Counter
	MountsHung prometheus.Gauge
	HungAborts *prometheus.CounterVec
	// TeardownHelp counts gone pods' targets the agent helped kubelet tear down, by action
	// (TeardownEmptied, TeardownFinished). With the live mount put beneath the dead one a
	// top-only NodeUnpublish finds one mount and kubelet finishes alone: it moves only for
	// stacks (left by earlier agents, or where the kernel refused to replace).
	TeardownHelp *prometheus.CounterVec
	// SyncSeconds observes each pass (Sync) at its end: its count is the passes ended, which
	// lets a test wait until the rescue has looked instead of for a fixed time.
	SyncSeconds prometheus.Histogram
	// Replace is pvrescue_mount_replace_total{mode,reason}, shared with containermount.
	Replace *mountreplace.Metrics
}

// NewMetrics builds the rescue's collectors and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	r := metrics.NewRegistration(reg)
	m := &Metrics{
		DeadFound: metrics.Add(r, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pvrescue_s3_dead_mounts_found_total",
			Help: "Pod S3 volume mounts found dead (ENOTCONN, EIO, ...; a timeout is a hung mount, not a dead one).",
		})),
		MountHealthy: metrics.Add(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pvrescue_s3_mount_healthy",
			Help: "1 while a pod's S3 CSI volume target answers, 0 while it is dead.",
		}, []string{"pv", "namespace", "pod"})),
		Restores: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_s3_restores_total",
			Help: "Restores of dead pod S3 volume targets, by method (replay, bridge) and result.",
		}, []string{"method", "result"})),
		Failures: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_s3_restore_failures_total",
			Help: "Failed restore attempts, by reason.",
		}, []string{"reason"})),
		BridgesActive: metrics.Add(r, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pvrescue_s3_bridges_active",
			Help: "Our own s3fs bridges running on this node.",
		})),
		TimeToRestore: metrics.Add(r, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pvrescue_s3_time_to_restore_seconds",
			Help:    "Time from finding a mount dead to its restored mount answering.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300},
		})),
		BridgeExits: metrics.Add(r, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pvrescue_s3_staging_exits_total",
			Help: "s3fs processes started by the agent that exited unexpectedly.",
		})),
		ResultChecks: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_s3_result_checks_total",
			Help: "Checks of a mount before binding it over a kubelet path, by result (OK, ReplayResultNotVisible, ReplayResultWrongFilesystem, ReplayResultSameDevice, ReplayResultNotAnswering).",
		}, []string{"result"})),
		HungFound: metrics.Add(r, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pvrescue_s3_hung_mounts_found_total",
			Help: "Pod S3 volume mounts found hung (statfs timing out while the FUSE daemon still holds the connection).",
		})),
		MountsHung: metrics.Add(r, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pvrescue_s3_mounts_hung",
			Help: "Pod S3 volume mounts hung now (never replaced while their daemon lives).",
		})),
		HungAborts: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_s3_hung_aborts_total",
			Help: "FUSE connections of hung mounts aborted through fusectl (s3.abortHungAfter), by result.",
		}, []string{"result"})),
		TeardownHelp: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pvrescue_s3_teardown_help_total",
			Help: "Gone pods' S3 volume targets the agent helped kubelet tear down, by action (emptied: our own mounts removed, the driver's and the last mount left for the driver's NodeUnpublish; finished: after a top-only NodeUnpublish took our mount, the dead driver mount it left, kubelet's mount dir and vol_data.json removed).",
		}, []string{"action"})),
		SyncSeconds: metrics.Add(r, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pvrescue_s3_sync_duration_seconds",
			Help:    "Duration of one check pass of the S3 rescue (finding dead targets and starting their restores; the restores run on after it).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		})),
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	rm, err := mountreplace.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	m.Replace = rm
	// Exported at 0 from the start: "no help was needed" is then a value, not a missing series.
	for _, a := range []string{TeardownEmptied, TeardownFinished} {
		m.TeardownHelp.WithLabelValues(a)
	}
	return m, nil
}
