package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestAddSharesAlreadyRegisteredCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "pvrescue_test_total", Help: "test"}

	r1 := NewRegistration(reg)
	first := Add(r1, prometheus.NewCounter(opts))
	r2 := NewRegistration(reg)
	second := Add(r2, prometheus.NewCounter(opts))
	if err := r1.Err(); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	if err := r2.Err(); err != nil {
		t.Fatalf("second registration of an equal collector: %v", err)
	}
	second.Inc()
	if first != second {
		t.Fatalf("second instance got its own collector; want the registered one")
	}
}

func TestAddReportsConflicts(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewRegistration(reg)
	Add(r, prometheus.NewCounter(prometheus.CounterOpts{Name: "pvrescue_conflict", Help: "a"}))
	Add(r, prometheus.NewGauge(prometheus.GaugeOpts{Name: "pvrescue_conflict", Help: "b"}))
	if r.Err() == nil {
		t.Fatal("a counter and a gauge under one name registered without error")
	}
}

func TestNilRegistererRegistersNothing(t *testing.T) {
	r := NewRegistration(nil)
	c := Add(r, prometheus.NewCounter(prometheus.CounterOpts{Name: "pvrescue_nil_total", Help: "x"}))
	c.Inc()
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
}
