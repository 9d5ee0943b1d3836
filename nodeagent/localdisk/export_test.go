package localdisk

// What the external tests (package localdisk_test, which use localdisktest's fake host and so
// cannot be inside this package) read of the package's internals.

// PodsWarned is the set of pods the controller remembers having warned about.
func (c *Controller) PodsWarned() map[string]bool {
	out := map[string]bool{}
	for uid := range c.podsWarned {
		out[string(uid)] = true
	}
	return out
}

// WithDefaults is withDefaults.
func (o Options) WithDefaults() Options { return o.withDefaults() }

// RecordPath is where the record of pv is kept.
func (r *Reconciler) RecordPath(pv string) string { return r.recordPath(pv) }

// Options are the options the reconciler was made with.
func (r *Reconciler) Options() ReconcilerOptions { return r.opts }
