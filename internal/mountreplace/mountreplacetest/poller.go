package mountreplacetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"
)

// Decoy is the file a node test writes in the directory under a mount (BareDir): a reader sees it
// only at an instant the mount point is bare.
const Decoy = "BARE-DIRECTORY"

// BareDir makes dir with the Decoy in it.
func BareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, Decoy), []byte("not the bucket\n"), 0o600)
}

// DeadConn: a killed FUSE daemon's connection answers ENOTCONN, or ECONNABORTED to a request
// that was in flight when it died.
func DeadConn(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED)
}

// Poller looks at a mount point every millisecond while a node test kills and replaces the
// mount under it, and counts what it sees: the dead connection, the volume (its Mark file), or
// anything else — the bare directory's Decoy, a missing Mark, an empty listing, a wrong Mark
// content, an error — which is a breach.
type Poller struct {
	Name, Path string
	// Mark is a file in the volume's root and Value its content.
	Mark, Value string
	// ListEvery: every ListEvery-th look lists the directory (the others look the Mark up only,
	// which s3fs answers from its stat cache); every 20th look also reads the Mark. 0 means 1.
	ListEvery int

	Dead, Live, Reads, Errs int
	// Breaches holds what a breach looked like (for errors: only the first three).
	Breaches []string
	live     atomic.Int64
}

// LiveNow is Live, safe to read while Run runs.
func (p *Poller) LiveNow() int64 { return p.live.Load() }

// Run looks every millisecond until ctx ends. The counters are the caller's to read once it
// returns.
func (p *Poller) Run(ctx context.Context) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			p.Look(i)
		}
	}
}

// Look is the i-th look of Run.
func (p *Poller) Look(i int) {
	if every := max(p.ListEvery, 1); i%every != 0 {
		_, err := os.Stat(filepath.Join(p.Path, p.Mark))
		if p.failed("stat marker", err) {
			return
		}
		p.alive()
		return
	}
	ents, err := os.ReadDir(p.Path)
	if p.failed("list", err) {
		return
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Contains(names, p.Mark) || slices.Contains(names, Decoy) {
		p.Breaches = append(p.Breaches, fmt.Sprintf("listing %q", names))
		return
	}
	p.alive()
	if i%20 != 0 {
		return
	}
	b, err := os.ReadFile(filepath.Join(p.Path, p.Mark))
	switch {
	case DeadConn(err):
	case err != nil || string(b) != p.Value:
		p.Breaches = append(p.Breaches, fmt.Sprintf("marker %q, %v", b, err))
	default:
		p.Reads++
	}
}

// failed counts err: false when there is none.
func (p *Poller) failed(what string, err error) bool {
	switch {
	case err == nil:
		return false
	case DeadConn(err):
		p.Dead++
	default:
		p.Errs++
		if p.Errs <= 3 {
			p.Breaches = append(p.Breaches, fmt.Sprintf("%s: %v", what, err))
		}
	}
	return true
}

func (p *Poller) alive() {
	p.Live++
	p.live.Add(1)
}

// Reset zeroes the counters, before the looks that count.
func (p *Poller) Reset() {
	p.Dead, p.Live, p.Reads, p.Errs, p.Breaches = 0, 0, 0, 0, nil
	p.live.Store(0)
}

// Percentile is the p-th percentile (0–100) of d, nearest rank below; d is not changed.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[(len(d)-1)*p/100]
}
