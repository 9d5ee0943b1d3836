package s3mount

import (
	"fmt"
	"strings"
)

// Ablations switches mechanisms of the rescue path off one at a time, for the bench's ablation
// mode only (`make bench-ablation`, issue 52: each mechanism must move the window a pod sees
// beyond the run-to-run spread to stay). Never set in production: the zero value is the
// shipped agent, and the agent sets it only from its hidden --ablate flag.
type Ablations struct {
	// Prefetch: a restore does not start the container remounter's list of the pods' processes
	// at its beginning (PrefetchPods); the remount pass lists them itself.
	Prefetch bool
}

// Ablation names accepted by ParseAblation (the agent's --ablate flag) for Ablations' fields.
const (
	AblatePrefetch = "prefetch"
)

// Set switches the named mechanism off; false when the name is not one of s3mount's.
func (a *Ablations) Set(name string) bool {
	switch strings.TrimSpace(name) {
	case AblatePrefetch:
		a.Prefetch = true
	default:
		return false
	}
	return true
}

// String lists the mechanisms switched off ("" for the shipped agent).
func (a Ablations) String() string {
	var out []string
	for _, f := range []struct {
		on   bool
		name string
	}{{a.Prefetch, AblatePrefetch}} {
		if f.on {
			out = append(out, f.name)
		}
	}
	return strings.Join(out, ",")
}

// ParseAblations switches off each named mechanism (comma-separated).
func ParseAblations(names string) (Ablations, error) {
	var a Ablations
	for _, n := range strings.Split(names, ",") {
		if strings.TrimSpace(n) == "" {
			continue
		}
		if !a.Set(n) {
			return a, fmt.Errorf("unknown ablation %q (s3mount: %s)", n, AblatePrefetch)
		}
	}
	return a, nil
}
