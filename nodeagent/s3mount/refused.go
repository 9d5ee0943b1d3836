package s3mount

import (
	"errors"

	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// refused reports a refusal on the pods it concerns: an Event whose reason says what the driver
// produced (the dead mount stays as it is).
func (r *Restorer) refused(ts []target, err error) {
	var re *stack.ResultError
	if !errors.As(err, &re) {
		return
	}
	r.metrics.Failures.WithLabelValues(re.Reason).Inc()
	for _, t := range ts {
		r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, re.Reason,
			"S3 volume %s: not bound over the dead mount, which stays: %s", t.pv, re.Detail)
	}
}
