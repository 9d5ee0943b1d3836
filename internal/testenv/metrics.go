package testenv

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// ErrNoMetric is returned when no series of the metric with the wanted labels was gathered.
var ErrNoMetric = errors.New("metric not gathered")

// FindMetric gathers g and returns the first series of metric name whose labels include every
// pair of labels (nil or empty: the first series of the metric).
func FindMetric(g prometheus.Gatherer, name string, labels map[string]string) (*dto.Metric, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				return m, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: %s%v", ErrNoMetric, name, labels)
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// MetricValue is the value of a counter, gauge or untyped series (0 for other kinds).
func MetricValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
