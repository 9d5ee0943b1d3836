package testenv

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestFindMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_total", Help: "h"}, []string{"result", "reason"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "t_gauge", Help: "h"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "t_seconds", Help: "h"})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("success", "").Add(3)
	c.WithLabelValues("failure", "setns").Add(2)
	g.Set(1.5)
	h.Observe(0.25)

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"t_total", map[string]string{"result": "failure", "reason": "setns"}, 2},
		{"t_total", map[string]string{"result": "success", "reason": ""}, 3},
		{"t_total", map[string]string{"result": "success"}, 3},
		{"t_gauge", nil, 1.5},
	} {
		m, err := FindMetric(reg, tc.name, tc.labels)
		if err != nil {
			t.Fatalf("FindMetric(%s, %v): %v", tc.name, tc.labels, err)
		}
		if got := MetricValue(m); got != tc.want {
			t.Errorf("MetricValue(%s%v) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if m, err := FindMetric(reg, "t_seconds", nil); err != nil || m.GetHistogram().GetSampleCount() != 1 || MetricValue(m) != 0 {
		t.Errorf("histogram: %v, %v", m, err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{{"t_total", map[string]string{"result": "other"}}, {"t_total", map[string]string{"nope": ""}}, {"absent", nil}} {
		if _, err := FindMetric(reg, tc.name, tc.labels); !errors.Is(err, ErrNoMetric) {
			t.Errorf("FindMetric(%s, %v) err = %v, want ErrNoMetric", tc.name, tc.labels, err)
		}
	}
}
