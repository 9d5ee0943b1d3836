package s3mount

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-logr/logr"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// bridgedTargets returns, by PV, the live targets whose top mount is our bridge, for PVs whose
// driver may be replayed: when that driver answers again, the volume moves to its mount.
func (r *Restorer) bridgedTargets(table stack.Table, targets []target) map[string][]target {
	if r.os.CSI == nil {
		return nil
	}
	out := map[string][]target{}
	for _, t := range targets {
		if t.terminating {
			continue
		}
		top, ok := table.Top(t.path)
		if !ok {
			continue
		}
		if pv, ours := stack.PVFromFSName(top.Source); ours && pv == t.pv {
			out[t.pv] = append(out[t.pv], t)
		}
	}
	return out
}

// startRetires starts one retire per bridged PV that is not busy.
func (r *Restorer) startRetires(ctx context.Context, bridged map[string][]target) {
	now := r.clk.Now()
	for pv, ts := range bridged {
		if !r.claim(pv, now) {
			continue
		}
		r.wg.Add(1)
		go func(pv string, ts []target) {
			defer r.wg.Done()
			moved := r.retire(ctx, pv, ts)
			// After a move the bridge may serve nothing: a pass at once retires it
			// (retireUnusedBridges skips a PV in flight), instead of at the next periodic check.
			if r.endPass(pv) || moved > 0 {
				r.poke()
			}
		}(pv, ts)
	}
}

// retire moves bridged targets to the driver's own mount once the driver answers: the driver
// publishes at a fresh directory, then our bind at the target is replaced by the driver's mount
// (beneath ours, then ours detached; where mounts are stacked: detach ours lazily, bind the
// driver's — the dead driver mount stays below throughout, so a reader sees at worst ENOTCONN for
// that instant, never the bare directory). The bridge's s3fs stops
// when no target holds its bind any more (retireUnusedBridges). It returns how many targets moved.
func (r *Restorer) retire(ctx context.Context, pvName string, ts []target) (moved int) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pvName)
	pv, err := r.livePV(ctx, pvName, ts) // the replay uses the PV's attributes: read live (restore.go)
	if err != nil || pv.Spec.CSI == nil || !r.cfg.MayReplay(pv.Spec.CSI.Driver) {
		return 0
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.MountTimeout)
	defer cancel()
	session, err := r.csi.Open(cctx, pv)
	if errors.Is(err, csiclient.ErrDriverDown) {
		return 0 // still down: the bridge stays
	}
	if err != nil {
		log.Error(err, "driver answers, but the volume is not attached; the bridge stays", "reason", Reason(err))
		return 0
	}
	defer func() { _ = session.Close() }()
	if err := session.Restage(cctx); err != nil {
		log.Error(err, "driver answers, but staging again failed; the bridge stays")
		if errors.Is(err, stack.ErrResultRefused) {
			r.refused(ts, err)
			r.backoff(pvName)
		}
		return 0
	}
	for _, t := range ts {
		if err := r.swap(cctx, session, t); err != nil {
			log.Error(err, "moving a bridged target to the driver's mount; the bridge stays", "path", t.path)
			r.metrics.Restores.WithLabelValues(MethodReplay, "failure").Inc()
			if errors.Is(err, stack.ErrResultRefused) {
				r.refused([]target{t}, err)
				r.backoff(pvName) // the bridge serves meanwhile: ask the driver again later
			}
			continue
		}
		moved++
	}
	return moved
}

// swap publishes at a fresh directory and replaces our bridge bind at t by the driver's mount.
func (r *Restorer) swap(ctx context.Context, session *csiclient.Session, t target) error {
	pv := session.PV
	fresh := csiclient.FreshPublishPath(r.cfg.KubeletDir, string(t.pod.UID), pv.Name)
	req, err := session.Request(ctx, t.pod, fresh, t.readOnly)
	if err != nil {
		return err
	}
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return err
	}
	if err := session.Publish(ctx, req, table); err != nil {
		return err
	}
	if table, err = r.os.Mounter.MountTable(); err != nil {
		return err
	}
	// Our bridge (live) and the driver's dead mount are both in the target's stack: the
	// driver's result must be neither.
	if _, err := r.rules.Check(ctx, fresh, stack.CheckFor(table, t.path, r.cfg.S3.Profile(pv.Spec.CSI.Driver).FUSETypeOf(pv.Spec.CSI.VolumeAttributes))); err != nil {
		session.Undo(ctx, fresh)
		return err
	}
	defer session.DropFresh(ctx, fresh)
	mounts := table.Stack(t.path)
	if len(mounts) == 0 {
		return errors.New("target no longer holds our bridge")
	}
	ourBind := mounts[len(mounts)-1]
	if pv2, ours := stack.PVFromFSName(ourBind.Source); !ours || pv2 != pv.Name {
		return errors.New("target's top mount is no longer our bridge")
	}
	ro := t.readOnly || ourBind.ReadOnly()
	switch {
	case r.rules.Replaces():
		// The driver's mount goes beneath our bridge bind, which is then detached (lazily: an
		// app's open files keep working through it until closed or the bridge stops); the
		// target shows the bridge until it shows the driver's mount.
		if err := r.rules.Replace(ctx, fresh, t.path, ourBind, ro); err != nil {
			return err
		}
	case len(mounts) == 1:
		// Our bridge is the only mount (a pod that started while the bridge sat on kubelet's
		// staging path got a bind of it from the driver): removing it would show the bare
		// directory, so the driver's mount goes on top; ours below dies with the bridge and is
		// removed with the pod's target.
		if err := r.os.Mounter.Bind(fresh, t.path, ro); err != nil {
			return err
		}
	default:
		// Lazily (MNT_DETACH): an app with a file open on the bridge makes a plain unmount fail
		// with EBUSY for as long as the file stays open. The bind is provably ours (its source
		// names our bridge, checked above) and the driver's mount goes on right after; the app's
		// open files keep working through the detached bind until closed or the bridge stops.
		if err := r.os.Mounter.Unmount(t.path, true); err != nil {
			return fmt.Errorf("%w: removing our bridge bind at %s: %w", stack.ErrMount, t.path, err)
		}
		if err := r.os.Mounter.Bind(fresh, t.path, ro); err != nil {
			// Put the bridge back rather than leave the dead mount on top — checked like any
			// other mount going over a kubelet path.
			back := stack.CheckFor(table, t.path, r.cfg.S3.Profile(pv.Spec.CSI.Driver).FUSETypeOf(pv.Spec.CSI.VolumeAttributes))
			back.Dead = slices.DeleteFunc(back.Dead, func(m stack.Mount) bool { return m.ID == ourBind.ID })
			back.FUSETypes = append(back.FUSETypes, stack.OurFUSETypes...)
			if _, cerr := r.rules.Check(ctx, r.layout.MountPoint(pv.Name), back); cerr == nil {
				_ = r.os.Mounter.Bind(r.layout.MountPoint(pv.Name), t.path, ro)
			}
			return err
		}
	}
	r.rules.RecordTop(ctx, t.path, "the driver's mount that replaced our bridge")
	dead := []stack.Mount{ourBind}
	if len(mounts) >= 2 {
		dead = append(dead, mounts[len(mounts)-2])
	}
	r.restored(ctx, t, MethodReplay, contract.ReasonBridgeRetired, ro, dead, "driver "+pv.Spec.CSI.Driver+" answers again: replayed "+r.replayedWith(pv)+", moved to its own mount, bridge retired")
	return nil
}
