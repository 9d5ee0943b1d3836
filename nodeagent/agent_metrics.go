package nodeagent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pvrescue/pvrescue/internal/metrics"
)

// agentMetrics is the per-runnable health that /healthz leaves out on purpose.
type agentMetrics struct {
	up          *prometheus.GaugeVec
	consecutive *prometheus.GaugeVec
	failures    *prometheus.CounterVec
}

func newAgentMetrics(reg prometheus.Registerer) (*agentMetrics, error) {
	r := metrics.NewRegistration(reg)
	m := &agentMetrics{
		up: metrics.Add(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pvrescue_agent_runnable_up",
			Help: "1 while the agent's runnable (a rescue) is running, 0 while it waits to be restarted after a failure."}, []string{"runnable"})),
		consecutive: metrics.Add(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pvrescue_agent_runnable_consecutive_failures",
			Help: "Failures of the runnable in a row (reset after it ran well for ten maximum backoffs)."}, []string{"runnable"})),
		failures: metrics.Add(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pvrescue_agent_runnable_failures_total",
			Help: "Failures (errors, panics, early returns) of the runnable, each followed by an in-process restart."}, []string{"runnable"})),
	}
	return m, r.Err()
}
