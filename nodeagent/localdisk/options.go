package localdisk

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// Options tune the rescue beyond the shared config.
type Options struct {
	// PathRoots: PV paths must lie under one of them (default: the config's localBlock.pathRoots,
	// else DefaultPathRoots); kernel device names are followed but never faked.
	PathRoots []string
	// LinkRoots: fake links are only made under them (default: the config's
	// localBlock.linkRoots, else DefaultLinkRoots).
	LinkRoots []string
	// DevDir holds the loop nodes (default /dev).
	DevDir string
	// LoopSearchLimit is how many loop numbers from FirstLoopMinor may be used (default 256).
	LoopSearchLimit int
	// HeartbeatPeriod refreshes the Node condition even when unchanged (default 5m).
	HeartbeatPeriod time.Duration
}

// NewOptions returns the defaults (the roots are left empty: New takes them from the config).
func NewOptions() Options {
	return Options{DevDir: "/dev", LoopSearchLimit: 256, HeartbeatPeriod: 5 * time.Minute}
}

// withDefaults fills zero fields from NewOptions.
func (o Options) withDefaults() Options {
	d := NewOptions()
	if len(o.PathRoots) == 0 {
		o.PathRoots = DefaultPathRoots
	}
	if len(o.LinkRoots) == 0 {
		o.LinkRoots = DefaultLinkRoots
	}
	if o.DevDir == "" {
		o.DevDir = d.DevDir
	}
	if o.LoopSearchLimit <= 0 {
		o.LoopSearchLimit = d.LoopSearchLimit
	}
	if o.HeartbeatPeriod <= 0 {
		o.HeartbeatPeriod = d.HeartbeatPeriod
	}
	return o
}

// Validate reports bad options: every root absolute and clean, and every link root under a
// path root (a fake link elsewhere could never be reached from a PV path).
func (o Options) Validate() error {
	var errs []error
	for _, set := range [][]string{o.PathRoots, o.LinkRoots, {o.DevDir}} {
		for _, d := range set {
			if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" {
				errs = append(errs, fmt.Errorf("localdisk: %q must be an absolute clean directory other than /", d))
			}
		}
	}
	if len(o.LinkRoots) == 0 {
		errs = append(errs, errors.New("localdisk: at least one link root is required"))
	}
	if o.LoopSearchLimit <= 0 {
		errs = append(errs, fmt.Errorf("localdisk: loop search limit must be positive, got %d", o.LoopSearchLimit))
	}
	return errors.Join(errs...)
}
