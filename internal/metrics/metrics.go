// Package metrics holds the one way pvrescue's components register their Prometheus collectors.
//
// Each component builds its collectors in NewMetrics(reg) and passes every one through Add:
//
//	r := metrics.NewRegistration(reg)
//	m := &Metrics{Restored: metrics.Add(r, prometheus.NewCounter(...))}
//	return m, r.Err()
//
// A collector already registered on reg (a second instance in one process, as in tests) is
// replaced by the registered one, so both instances count into the same series.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Registration collects the errors of a series of Add calls on one registerer.
type Registration struct {
	reg  prometheus.Registerer
	errs []error
}

// NewRegistration registers on reg; a nil reg registers nothing (collectors still work).
func NewRegistration(reg prometheus.Registerer) *Registration {
	return &Registration{reg: reg}
}

// Add registers c and returns the collector to use: c itself, or the equal collector that was
// already registered.
func Add[T prometheus.Collector](r *Registration, c T) T {
	if r.reg == nil {
		return c
	}
	err := r.reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing
		}
	}
	r.errs = append(r.errs, err)
	return c
}

// Err reports every registration that failed, or nil.
func (r *Registration) Err() error {
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("register metrics: %w", errors.Join(r.errs...))
}
