package stack

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// Replacer puts a live mount in place of the dead top mount at a kubelet path.
type Replacer interface {
	// Replace puts a clone of the mount at source in place of mount old, the top at target:
	// beneath it, then old detached, so target shows old until it shows the clone and never the
	// bare directory; where the kernel refuses, on top of old (Result.Mode Stacked, with the
	// reason). The clone keeps old's read-only, nosuid, nodev, noexec and propagation, and is
	// read-only when readOnly is set. noPeerGroup: source is in no peer group, so the clone
	// cannot be a slave. table is the mount table the caller read after choosing old (nil: read
	// one).
	Replace(source, target string, old int, readOnly, noPeerGroup bool, table Table) (mountreplace.Result, error)
}

// put puts the live mount at source in place of top, the dead top mount at path (the caller
// checked both). With a Replacer it goes beneath and top is detached; without one (unit tests
// with a plain fake Mounter), it is bound on top as before the kernel could mount beneath.
func (r *Rules) put(ctx context.Context, source, path string, top Mount, readOnly bool, table Table) error {
	if r.Replacer == nil {
		return r.Mounter.Bind(source, path, readOnly)
	}
	noPeer := true
	if src, ok := table.Top(source); ok {
		noPeer = !mountreplace.PropagationOf(src).Shared
	}
	res, err := r.Replacer.Replace(source, path, top.ID, readOnly, noPeer, table)
	r.Replacements.Observe(res)
	if err != nil {
		return fmt.Errorf("%w: replace mount %d at %s by %s (%s): %w", ErrMount, top.ID, path, source, res.Mode, err)
	}
	log := logr.FromContextOrDiscard(ctx)
	if res.Mode == mountreplace.Stacked {
		log.Info("live mount stacked on the dead one", "path", path, "reason", res.Reason, "refusal", fmt.Sprint(res.Refusal), "dead", top.ID, "new", res.New)
	} else {
		log.V(1).Info("dead mount replaced beneath", "path", path, "dead", top.ID, "new", res.New, "took", res.Took)
	}
	return nil
}

// Put puts the live mount at source in place of the dead top mount at path (kubelet's staging
// path after a restage): beneath it, the dead one detached, where the kernel allows. The caller
// checked source (Check) and that path's top is dead.
func (r *Rules) Put(ctx context.Context, source, path string, readOnly bool) error {
	table, err := r.Mounter.MountTable()
	if err != nil {
		return err
	}
	top, ok := table.Top(path)
	if !ok {
		return r.Mounter.Bind(source, path, readOnly) // nothing mounted: nothing to replace
	}
	return r.put(ctx, source, path, top, readOnly, table)
}

// Replace puts the live mount at source in place of old, the top mount at path (checked by the
// caller, and again by the kernel calls: another top fails with mountreplace.ErrTargetChanged).
func (r *Rules) Replace(ctx context.Context, source, path string, old Mount, readOnly bool) error {
	table, err := r.Mounter.MountTable()
	if err != nil {
		return err
	}
	return r.put(ctx, source, path, old, readOnly, table)
}

// Replaces reports whether mounts are put beneath dead ones (a Replacer is set); the kernel may
// still refuse at a path, which Replacements counts.
func (r *Rules) Replaces() bool { return r.Replacer != nil }
