package s3mount

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ensureStaging makes sure the PV's staging directory holds a healthy s3fs mount of ours.
func (r *Restorer) ensureStaging(ctx context.Context, pvName string) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pvName)
	path := r.layout.Staging(pvName)
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return err
	}
	if table.IsMountPoint(path) {
		if r.os.Statfs.Statfs(ctx, path, r.cfg.S3.StatfsTimeout.Duration) == nil {
			return nil
		}
		// Dead staging: binds made from it keep their own reference, so it can go.
		log.Info("staging mount is dead, mounting again", "path", path)
		r.stopStaging(ctx, pvName, false)
		r.rules.UnmountAll(path, table)
	}
	vol, creds, err := r.resolve(ctx, pvName)
	if err != nil {
		return err
	}
	passwd := r.layout.PasswdFile(pvName)
	args, err := S3fsArgs(vol, creds, path, passwd, r.layout.TmpDir(pvName))
	if err != nil {
		return err // refused by the allowlists: nothing is written or started
	}
	for _, dir := range []string{path, r.layout.TmpDir(pvName)} {
		if err := r.os.FS.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("%w: create %s: %w", stack.ErrMount, dir, err)
		}
	}
	if err := r.os.FS.WriteFile(passwd, PasswdContent(creds), 0o600); err != nil {
		return fmt.Errorf("%w: write passwd file: %w", stack.ErrMount, err)
	}
	log.Info("starting s3fs", "bucket", vol.Bucket, "prefix", vol.Prefix, "staging", path)
	spec := ProcSpec{
		Path: r.cfg.S3.S3fsPath, Args: args, Dir: r.layout.Root(), LogFile: r.layout.LogFile(pvName), NetNS: r.bridgeNetNS(),
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR=" + r.layout.TmpDir(pvName)},
	}
	proc, err := r.os.Procs.Start(spec)
	for _, alt := range r.bridgeNetNSFallbacks() {
		if !errors.Is(err, ErrNetNS) {
			break
		}
		log.Error(err, "s3fs cannot start in the node's network namespace there; trying the next", "netns", alt)
		spec.NetNS = alt
		proc, err = r.os.Procs.Start(spec)
	}
	if err == nil && spec.NetNS == "" && r.bridgeNetNS() != "" {
		// A bridge in the agent's namespace still serves while the agent runs; it loses its
		// network when the agent pod is deleted (reads through it hang until a new bridge).
		log.Error(nil, "s3fs runs in the agent's network namespace: the bridge loses its network when the agent pod goes (run the agent with hostNetwork)")
	}
	if err != nil {
		_ = r.os.FS.Remove(passwd)
		return err
	}
	st := &staging{proc: proc, started: r.clk.Now()}
	r.detach(ctx, pvName, st)
	exited := make(chan struct{})
	go func() {
		werr := proc.Wait()
		close(exited)
		r.onExit(ctx, pvName, st, werr)
	}()
	if err := r.waitMounted(ctx, path, pvName, exited); err != nil {
		proc.Kill(r.opts.KillGrace)
		<-exited
		if t, terr := r.os.Mounter.MountTable(); terr == nil {
			r.rules.UnmountAll(path, t)
		}
		_ = r.os.FS.Remove(passwd)
		out := scrub(proc.Output(), creds)
		return fmt.Errorf("%w: %w; s3fs said: %s", ErrS3fs, err, lastLines(out, 3))
	}
	r.mu.Lock()
	r.stagings[pvName] = st
	r.mu.Unlock()
	r.updateBridgeGauge()
	log.Info("s3fs staging mount ready", "pid", proc.Pid(), "cgroup", st.cgroup, "after", r.clk.Since(st.started))
	return nil
}

// detach moves a just started s3fs into its own cgroup outside the agent container's and
// records it, so that it survives the container and the next agent adopts it. A failure is
// logged, not fatal: the bridge serves the pod now, it only would not outlive this agent.
func (r *Restorer) detach(ctx context.Context, pvName string, st *staging) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pvName)
	if group := BridgeCgroup(r.opts.BridgeCgroup, pvName, st.proc.Pid()); group != "" {
		if err := r.os.Cgroups.Place(st.proc.Pid(), group); err != nil {
			log.Error(err, "moving s3fs out of the agent's cgroups failed: this bridge dies with the agent container")
		} else {
			st.cgroup = group
		}
	}
	if err := r.writeBridgeRecord(pvName, BridgeRecord{Proc: st.proc.ID(), Cgroup: st.cgroup}); err != nil {
		log.Error(err, "recording the bridge failed: a restarted agent will not adopt its process")
	}
}

// forgetBridge removes what detach made once the bridge's process has exited: its record (when
// it still names that process) and its cgroup.
func (r *Restorer) forgetBridge(ctx context.Context, pvName string, st *staging) {
	var id *ProcID
	if st.proc != nil {
		pid := st.proc.ID()
		id = &pid
		r.mu.Lock()
		retiring := st.retiring
		r.mu.Unlock()
		if retiring {
			_ = r.os.FS.Remove(r.layout.retiringRecordFile(pvName, pid.Pid))
		}
	}
	r.forgetRecord(ctx, pvName, id, st.cgroup)
}

// forgetRecord removes pv's bridge record when it names id (any record when id is nil), and
// the cgroup.
func (r *Restorer) forgetRecord(ctx context.Context, pvName string, id *ProcID, cgroup string) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pvName)
	if rec, ok, err := r.readBridgeRecord(pvName); err != nil || (ok && (id == nil || rec.Proc == *id)) {
		if err := r.os.FS.Remove(r.layout.BridgeRecordFile(pvName)); err != nil {
			log.Error(err, "removing the bridge record")
		}
	}
	if cgroup != "" {
		// The process has exited; until its parent (the shim, init) reaps it the kernel may
		// still count it in the group: retry a little.
		var err error
		for range 10 {
			if err = r.os.Cgroups.Remove(cgroup); err == nil {
				break
			}
			r.clk.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			log.Error(err, "removing the bridge's cgroup", "cgroup", cgroup)
		}
	}
}

func (r *Restorer) updateBridgeGauge() {
	r.mu.Lock()
	n := len(r.stagings)
	r.mu.Unlock()
	r.metrics.BridgesActive.Set(float64(n))
}

// waitMounted waits until our s3fs answers at path, or exits, or MountTimeout passes.
func (r *Restorer) waitMounted(ctx context.Context, path, pvName string, exited <-chan struct{}) error {
	deadline := r.clk.Now().Add(r.opts.MountTimeout)
	for {
		table, err := r.os.Mounter.MountTable()
		if err != nil {
			return err
		}
		if top, ok := table.Top(path); ok && top.Source == stack.FSName(pvName) {
			// s3fs checks the bucket inside FUSE init; statfs waits for that answer.
			serr := r.os.Statfs.Statfs(ctx, path, r.opts.MountTimeout)
			select {
			case <-exited:
				return errors.New("s3fs exited")
			default:
			}
			if serr == nil {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("s3fs exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-r.clk.After(50 * time.Millisecond):
		}
		if r.clk.Now().After(deadline) {
			return fmt.Errorf("not mounted after %s", r.opts.MountTimeout)
		}
	}
}

// onExit supervises an s3fs we started: an unexpected exit triggers a check at once, so the dead
// binds are restored without waiting for the next tick; a quick death counts as a failure.
func (r *Restorer) onExit(ctx context.Context, pv string, st *staging, err error) {
	r.forgetBridge(ctx, pv, st)
	r.mu.Lock()
	current := r.stagings[pv] == st
	stopped := st.stopped
	if current {
		delete(r.stagings, pv)
	}
	r.mu.Unlock()
	r.updateBridgeGauge()
	if stopped || !current {
		return
	}
	r.metrics.StagingRestarts.Inc()
	lived := r.clk.Since(st.started)
	logr.FromContextOrDiscard(ctx).Info("s3fs exited", "pv", pv, "err", fmt.Sprint(err), "lived", lived)
	if lived < r.opts.QuickExit {
		r.backoff(pv)
	}
	r.poke()
}

// stopStaging stops our s3fs for pv (if we own one) and forgets it.
func (r *Restorer) stopStaging(ctx context.Context, pv string, wait bool) {
	r.mu.Lock()
	st := r.stagings[pv]
	delete(r.stagings, pv)
	if st != nil {
		st.stopped = true
	}
	r.mu.Unlock()
	r.updateBridgeGauge()
	if st == nil || st.proc == nil {
		return
	}
	if wait {
		st.proc.Kill(r.opts.KillGrace)
		// Its exit is handled by onExit too; forgetting here as well makes a retire complete
		// when this returns (forgetting twice is harmless).
		r.forgetBridge(ctx, pv, st)
	} else {
		go st.proc.Kill(r.opts.KillGrace)
	}
}

// bindTarget binds the bridge's staging mount onto one dead target.
func (r *Restorer) bindTarget(ctx context.Context, stagingPath string, t target) error {
	dead, ro, ok, err := r.cover(ctx, stagingPath, t)
	if err != nil || !ok {
		return err
	}
	// Recorded like a replayed mount: when it vanishes from a gone pod's target without us
	// removing it, kubelet's teardown (the driver's NodeUnpublish) took it (cleanup.go).
	r.rules.RecordTop(ctx, t.path, "the bridge bind")
	r.restored(ctx, t, MethodBridge, EventMountBridged, ro, dead, "fresh s3fs bound over the dead mount")
	return nil
}

// cover puts the live mount at source (the driver's at a fresh path, or our bridge) on top of
// the dead target t (stack.Rules.Cover), checked against the driver's dead mount there and its
// profile's FUSE type (and our own bridge's types when source is the bridge).
func (r *Restorer) cover(ctx context.Context, source string, t target) (dead []stack.Mount, ro, ok bool, err error) {
	bridge := source == r.layout.Staging(t.pv)
	return r.rules.Cover(ctx, source, t.path, t.readOnly, func(table stack.Table) stack.Check {
		c := stack.CheckFor(table, t.path, r.cfg.S3.Profile(t.driver).FUSEType)
		if bridge {
			c.FUSETypes = append(c.FUSETypes, stack.OurFUSETypes...)
		}
		return c
	})
}

// restored records a restored target: timers, metrics, log, Event, and the container remount.
func (r *Restorer) restored(ctx context.Context, t target, method, reason string, ro bool, dead []stack.Mount, how string) {
	r.mu.Lock()
	since, ok := r.deadSince[t.path]
	delete(r.deadSince, t.path)
	delete(r.hungSince, t.path)
	r.mu.Unlock()
	// A target restored without having been seen dead by this agent (a retire, a pod that got a
	// bind of our bridge from kubelet's staging path) has no detection time.
	var elapsed time.Duration
	if ok {
		elapsed = r.clk.Since(since)
		r.metrics.TimeToRestore.Observe(elapsed.Seconds())
	}
	r.metrics.Restores.WithLabelValues(method, "success").Inc()
	r.metrics.MountHealthy.WithLabelValues(t.pv, t.pod.Namespace, t.pod.Name).Set(1)
	logr.FromContextOrDiscard(ctx).Info("restored S3 mount", "method", method, "reason", reason, "pod", klogRef(t.pod), "pv", t.pv, "path", t.path,
		"readOnly", ro, "afterDetection", map[bool]any{true: elapsed, false: "unknown"}[ok])
	r.d.Recorder.Eventf(t.pod, corev1.EventTypeNormal, reason,
		"S3 volume %s mounted again (%s%s)", t.pv, how, map[bool]string{true: ", read-only", false: ""}[ro])
	r.remount(ctx, t, dead)
}

// resolve reads the PV and its credentials secret (the PV's own references only) into what s3fs
// needs.
func (r *Restorer) resolve(ctx context.Context, pvName string) (Volume, Credentials, error) {
	pv, err := r.d.View.PersistentVolume(ctx, pvName)
	if err != nil {
		return Volume{}, Credentials{}, fmt.Errorf("get PV %s: %w", pvName, err)
	}
	vol, err := ResolveVolume(pv, r.cfg.S3.Parameters, r.cfg.S3.Profile(pv.Spec.CSI.Driver))
	if err != nil {
		return Volume{}, Credentials{}, err
	}
	ref := vol.SecretRef
	secret, err := r.d.View.Secret(ctx, ref.Namespace, ref.Name)
	if apierrors.IsNotFound(err) {
		return Volume{}, Credentials{}, fmt.Errorf("%w: %s/%s", ErrSecretNotFound, ref.Namespace, ref.Name)
	}
	if err != nil {
		return Volume{}, Credentials{}, fmt.Errorf("get secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	creds, err := ParseCredentials(secret, r.cfg.S3.SecretKeys)
	if err != nil {
		return Volume{}, Credentials{}, err
	}
	return vol, creds, nil
}

// scrub removes credential values from text that may reach logs or Events.
func scrub(s string, c Credentials) string {
	for _, v := range []string{c.SecretAccessKey, c.AccessKeyID} {
		if len(v) >= 3 {
			s = strings.ReplaceAll(s, v, "<redacted>")
		}
	}
	return s
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
