package stack

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// Rules place mounts at kubelet paths. Nothing is ever unmounted from a live pod's path except
// our own binds (our fsname, or a device in Placed), and the last mount at a path always stays:
// removing it would show running containers the bare directory.
type Rules struct {
	Mounter Mounter
	Statfs  StatfsChecker
	// StatfsTimeout bounds one statfs (read at each call: the configuration's).
	StatfsTimeout func() time.Duration
	// Placed records the mounts we put at kubelet paths.
	Placed *Placed
	// Checks counts Check's results by result label (nil: not counted).
	Checks *prometheus.CounterVec
	// Replacer puts a live mount beneath a dead one and detaches the dead one (nil: bound on
	// top, as before the kernel could mount beneath).
	Replacer Replacer
	// Replacements counts what Replacer did (nil: not counted).
	Replacements *mountreplace.Metrics
}

func (r *Rules) statfs(ctx context.Context, path string) error {
	return r.Statfs.Statfs(ctx, path, r.StatfsTimeout())
}

// UnmountAll lazily unmounts every mount stacked at path (only for paths of ours).
func (r *Rules) UnmountAll(path string, table Table) { UnmountAll(r.Mounter, path, table) }

// RecordTop records the mount now on top at path as one we put there; what names it in the log
// when the record cannot be written.
func (r *Rules) RecordTop(ctx context.Context, path, what string) {
	table, err := r.Mounter.MountTable()
	if err != nil {
		return
	}
	top, ok := table.Top(path)
	if !ok {
		return
	}
	if err := r.Placed.Put(path, top.Dev); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "recording "+what, "path", path)
	}
}

// DropOurTops removes, from the top of path's stack, our bridge binds (live or dead) and dead
// mounts we put there earlier — never the last mount at path, so path is never left bare.
func (r *Rules) DropOurTops(ctx context.Context, path string) error {
	for {
		table, err := r.Mounter.MountTable()
		if err != nil {
			return err
		}
		stack := table.Stack(path)
		if len(stack) < 2 {
			return nil
		}
		top := stack[len(stack)-1]
		_, ours := PVFromFSName(top.Source)
		if !ours && (!r.Placed.Is(path, top) || !IsDead(r.statfs(ctx, path))) {
			return nil
		}
		if err := r.Mounter.Unmount(path, true); err != nil {
			return fmt.Errorf("%w: removing our mount at %s: %w", ErrMount, path, err)
		}
		r.removedPlaced(ctx, path, top)
		logr.FromContextOrDiscard(ctx).Info("removed our mount before the driver's", "path", path, "dev", top.Dev, "source", top.Source)
	}
}

// Cover puts the live mount at source in place of the dead mount at path, after Check (with the
// check accept builds from the mount table) passed: beneath it, the dead one then detached (one
// mount at path), or — without a Replacer, or where the kernel refuses — on top of it. Stacks
// stay bounded either way: dead mounts of ours at path (left by stacking, or by agents before
// replacing) are removed first, so it never holds more than the driver's dead mount plus one
// live mount. ok=false (and nothing done) when path is not mounted or answers again. It returns
// the dead mounts running containers may still hold, and whether the new mount is read-only
// (readOnly, or the mount it covers is). The new mount is recorded as ours (Placed): when it
// vanishes from a gone pod's target without us removing it, kubelet's teardown took it. With
// the check's Answered memory, a source that answered earlier in the pass is not asked again,
// nor is the new mount once a Replacer checked it is the top at path.
func (r *Rules) Cover(ctx context.Context, source, path string, readOnly bool, accept func(Table) Check) (dead []Mount, ro, ok bool, err error) {
	log := logr.FromContextOrDiscard(ctx)
	table, err := r.Mounter.MountTable()
	if err != nil {
		return nil, false, false, err
	}
	if !table.IsMountPoint(path) {
		return nil, false, false, nil // torn down meanwhile: never mount onto a plain dir
	}
	serr := r.statfs(ctx, path)
	if !IsDead(serr) {
		return nil, false, false, nil // healthy again, hung or unknown: never stack onto it
	}
	// The table just read serves the check of source too: every read of a table as long as the
	// node has mounts waits for the kernel's mount lock, which kubelet and the runtime hold
	// while the plugin's pod goes down, and a pass reads it several times per target.
	check := accept(table)
	src, err := r.checkIn(ctx, table, source, check)
	if err != nil {
		return nil, false, false, err
	}
	for {
		stack := table.Stack(path)
		if len(stack) == 0 {
			return nil, false, false, nil
		}
		top := stack[len(stack)-1]
		if len(stack) == 1 {
			// The last mount stays, ours or not: removing it would show running containers the
			// bare directory. The live mount goes on top of it.
			dead = append(dead, top)
			break
		}
		if _, ours := PVFromFSName(top.Source); !ours && !r.Placed.Is(path, top) {
			dead = append(dead, top)
			break
		}
		// Our own dead bind: remove it before the next goes on (provably ours: our fsname, or the
		// device we recorded when we put the driver's mount there).
		if err := r.Mounter.Unmount(path, true); err != nil {
			return nil, false, false, fmt.Errorf("%w: removing our dead bind at %s: %w", ErrMount, path, err)
		}
		r.removedPlaced(ctx, path, top)
		dead = append(dead, top)
		log.Info("removed our dead bind before restoring", "path", path, "dev", top.Dev)
		if table, err = r.Mounter.MountTable(); err != nil {
			return nil, false, false, err
		}
	}
	if serr := r.statfs(ctx, path); !IsDead(serr) {
		return nil, false, false, nil // what is left answers: nothing to stack
	}
	ro = readOnly
	top, found := table.Top(path)
	if !found {
		return nil, false, false, nil
	}
	if top.ReadOnly() {
		ro = true
	}
	if err := r.put(ctx, source, path, top, ro, table); err != nil {
		return nil, false, false, err
	}
	// A Replacer checked that the top at path is now the clone of src, a mount that answered in
	// this pass (check.Answered): a statfs at path would ask the same daemon once more.
	if r.Replacer == nil || !check.Answered.Has(src) {
		if err := r.statfs(ctx, path); IsDead(err) {
			return nil, false, false, fmt.Errorf("%w: %w: bind at %s: %w", ErrMount, ErrDiedAfterPut, path, err)
		} else if err != nil {
			return nil, false, false, fmt.Errorf("%w: bind at %s does not answer: %w", ErrMount, path, err)
		}
	}
	r.recordPut(ctx, path, table, source)
	return dead, ro, true, nil
}

// recordPut records the mount just put at path as one we put there. Its device is source's (a
// clone or a bind shows the source's filesystem), read from table, the one the put used: that
// saves a read of the whole table per target. Without source in table, it reads the top.
func (r *Rules) recordPut(ctx context.Context, path string, table Table, source string) {
	const what = "the mount put over the dead one"
	src, ok := table.Top(source)
	if !ok {
		r.RecordTop(ctx, path, what)
		return
	}
	if err := r.Placed.Put(path, src.Dev); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "recording "+what, "path", path)
	}
}

// Empty removes our own mounts from the top of path's stack (a gone pod's target): our bridge
// binds (our fsname, live or dead) and dead mounts we put there (Placed). It stops at the first
// mount that is not ours. With keepLast it never removes the last mount at path, ours or not:
// kubelet's teardown is still to come and calls the driver's NodeUnpublishVolume there, and a
// driver whose unpublish is a plain umount of the target (k8s-csi-s3) fails with EINVAL, for
// ever, when it finds no mount. So the driver's mounts, dead or alive, stay for the driver, and
// so does a mount of ours that is the only one (the driver's umount takes it). keepLast is off
// only once kubelet's teardown is over. A removed mount's record is forgotten: its absence then
// says nothing about kubelet's teardown.
func (r *Rules) Empty(ctx context.Context, path string, table Table, keepLast bool) (ours int) {
	log := logr.FromContextOrDiscard(ctx)
	stack := table.Stack(path)
	last := 0
	if keepLast {
		last = 1
	}
	for i := len(stack) - 1; i >= last; i-- {
		top := stack[i]
		if !r.ours(ctx, path, top) {
			return ours
		}
		if err := r.Mounter.Unmount(path, true); err != nil {
			log.Error(err, "removing our mount from a gone pod's target", "path", path)
			return ours
		}
		r.removedPlaced(ctx, path, top)
		ours++
	}
	return ours
}

// ours reports whether top, the top mount at path, is provably one we put there: our fsname (a
// bridge bind, which keeps it even after its s3fs died), or the device we recorded when we put
// the driver's replayed mount there, dead (a live one serves until kubelet's teardown takes it).
func (r *Rules) ours(ctx context.Context, path string, top Mount) bool {
	if _, mine := PVFromFSName(top.Source); mine {
		return true
	}
	return r.Placed.Is(path, top) && IsDead(r.statfs(ctx, path))
}

// ClearAfterTeardown removes, from the top of path's stack, the mounts dead accepts, and
// returns how many. Only for a gone pod's target whose kubelet teardown is over: the mount we
// put there was taken by the driver's NodeUnpublishVolume, which succeeded, so kubelet calls it
// no more and what it left below (the driver's own dead mount) has nobody else to remove it.
func (r *Rules) ClearAfterTeardown(ctx context.Context, path string, dead func(ctx context.Context, path string, top Mount) bool) int {
	log := logr.FromContextOrDiscard(ctx)
	n := 0
	for {
		table, err := r.Mounter.MountTable()
		if err != nil {
			log.Error(err, "reading the mount table")
			return n
		}
		top, ok := table.Top(path)
		if !ok || !dead(ctx, path, top) {
			return n
		}
		if err := r.Mounter.Unmount(path, true); err != nil {
			log.Error(err, "removing a dead driver mount left after kubelet's teardown", "path", path)
			return n
		}
		r.removedPlaced(ctx, path, top)
		n++
	}
}

// removedPlaced forgets path's record when we ourselves removed the mount it names.
func (r *Rules) removedPlaced(ctx context.Context, path string, m Mount) {
	if r.Placed.Dev(path) != m.Dev {
		return
	}
	if err := r.Placed.Forget(path); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "forgetting the record of a removed mount", "path", path)
	}
}

// UnmountAll lazily unmounts every mount stacked at path (only for paths of ours).
func UnmountAll(m Mounter, path string, table Table) {
	for range table.Stack(path) {
		if err := m.Unmount(path, true); err != nil {
			return
		}
	}
}
