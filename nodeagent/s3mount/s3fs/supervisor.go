package s3fs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Supervisor runs our own s3fs bridges: it starts them detached from the agent (their own
// session, cgroup and the node's network namespace), records them, adopts those an earlier agent
// left, and lets a retired one exit by itself. Its state is one map of bridges by PV under its
// own lock.
type Supervisor struct {
	os     OS
	cfg    *config.Config
	opts   Options
	clk    clock.WithTicker
	layout Layout

	mu      sync.Mutex
	bridges map[string]*bridge // by PV
	joined  string             // the network namespace the last bridge started in
}

// OS is what the supervisor does on the node.
type OS struct {
	Mounter stack.Mounter
	Statfs  stack.StatfsChecker
	FS      stack.FS
	Procs   ProcessStarter
	Cgroups Cgroups
}

// Options tune the supervisor.
type Options struct {
	// MountTimeout bounds the wait for a started s3fs to answer at its mount point.
	MountTimeout time.Duration
	// KillGrace is how long a stopped s3fs gets between SIGTERM and SIGKILL.
	KillGrace time.Duration
	// BridgeCgroup is the parent cgroup of each bridge's own group ("" none).
	BridgeCgroup string
	// BridgeNetNS is the network namespace bridges start in ("" the agent's).
	BridgeNetNS string
	// Active counts the bridges running; Exits the unexpected exits of their s3fs.
	Active prometheus.Gauge
	Exits  prometheus.Counter
	// Exited is called after the unexpected exit of a bridge's s3fs, with how long it lived.
	Exited func(pv string, lived time.Duration)
}

// NewSupervisor returns a supervisor of the bridges under the state directory of cfg.
func NewSupervisor(os OS, cfg *config.Config, clk clock.WithTicker, opts Options) *Supervisor {
	return &Supervisor{os: os, cfg: cfg, opts: opts, clk: clk, layout: Layout{StateDir: cfg.StateDir},
		bridges: map[string]*bridge{}, joined: opts.BridgeNetNS}
}

// PVs returns the PVs whose bridge runs.
func (s *Supervisor) PVs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.bridges))
}

// Prepare creates the state directories and the credentials tmpfs.
func (s *Supervisor) Prepare(ctx context.Context) error {
	for _, dir := range []string{s.layout.MountRoot(), s.layout.CredsDir(), s.layout.TmpRoot(), s.layout.BridgesDir(), s.layout.LogDir()} {
		if err := s.os.FS.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("s3mount: create %s: %w", dir, err)
		}
	}
	table, err := s.os.Mounter.MountTable()
	if err != nil {
		return fmt.Errorf("s3mount: %w", err)
	}
	if top, ok := table.Top(s.layout.CredsDir()); !ok || top.FSType != "tmpfs" {
		if err := s.os.Mounter.MountTmpfs(s.layout.CredsDir(), credsTmpfsSize); err != nil {
			return fmt.Errorf("s3mount: credentials tmpfs: %w", err)
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("mounted tmpfs for credentials", "path", s.layout.CredsDir())
	}
	if s.opts.BridgeCgroup != "" && syscall.Getpid() == 1 {
		logr.FromContextOrDiscard(ctx).Info("the agent is PID 1 of its own PID namespace: its s3fs bridges die with its container (run it with hostPID)")
	}
	return nil
}

// netNSOrder is the order bridges try network namespaces in: BridgeNetNS; when it is set and
// cannot be joined, our parent's (with hostPID the container's shim, which runs in the node's
// namespace; seen on the demo node: init's namespace gives EACCES even to root, the shim's does
// not), then ours (""). The one the last bridge started in comes first: a namespace refused once
// (init's, joined from the agent's container) is not tried again at every incident, each try
// cost up to 14 ms of the pods' window and an error in the log.
func (s *Supervisor) netNSOrder() []string {
	order := []string{s.opts.BridgeNetNS}
	if s.opts.BridgeNetNS != "" {
		if ppid := os.Getppid(); ppid > 1 {
			order = append(order, fmt.Sprintf("/proc/%d/ns/net", ppid))
		}
		order = append(order, "")
	}
	s.mu.Lock()
	joined := s.joined
	s.mu.Unlock()
	if i := slices.Index(order, joined); i > 0 {
		order = append(append([]string{joined}, order[:i]...), order[i+1:]...)
	}
	return order
}

// bridge is one s3fs of ours and its mount.
type bridge struct {
	proc    Process // nil when adopted from an earlier agent that kept no record of it
	cgroup  string  // the cgroup it was placed in ("" when not)
	started time.Time
	stopped bool // we stopped it on purpose; its exit is not a failure
	// retiring: detached, exits by itself (retiring.go); its record is the .retiring one.
	retiring bool
}

// credsTmpfsSize bounds the tmpfs holding passwd files (a few hundred bytes each).
const credsTmpfsSize = 1 << 20

// ErrBridgeBusy: the bridge's mount does not answer statfs in time (or answers with an error
// that does not say its filesystem is gone) while its s3fs runs. A busy s3fs (heavy writes, its
// workers saturated) is slow, not dead: it is never killed nor unmounted for that, which would
// give every pod on the PV ENOTCONN and lose what it had not uploaded yet.
var ErrBridgeBusy = errors.New("bridge s3fs does not answer in time: busy, not dead")

// bridgeGone reports whether a bridge whose mount answered statfs with err may be stopped and
// unmounted: only when its filesystem is gone (ENOTCONN, ECONNABORTED, ...: stack.IsDead), or
// when no process of it runs and the error is not a timeout. A timeout never is: the kernel
// answers at once for a FUSE mount whose daemon died, so a timeout means a live daemon.
func bridgeGone(err error, running bool) bool {
	switch {
	case err == nil:
		return false
	case stack.IsDead(err):
		return true
	case errors.Is(err, stack.ErrTimeout):
		return false
	default:
		return !running
	}
}

// Adopt takes over the live bridges an earlier agent left (their mount answers; or it is busy —
// statfs timed out — the s3fs recorded in <state>/s3/bridges/<pv>.json still runs, watched from
// now on through a pidfd) and drops the dead ones: a recorded s3fs still running behind a dead
// mount (ENOTCONN, ECONNABORTED) is stopped, the mount removed, record and cgroup deleted.
// Records without a mount are dropped the same way. A timeout never drops a bridge.
func (s *Supervisor) Adopt(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	table, err := s.os.Mounter.MountTable()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, m := range table {
		pv, ok := s.layout.MountPV(m)
		if !ok || seen[pv] {
			continue
		}
		seen[pv] = true
		rec, proc := s.adoptProcess(ctx, pv, m.MountPoint)
		if serr := s.os.Statfs.Statfs(ctx, m.MountPoint, s.cfg.S3.StatfsTimeout.Duration); !bridgeGone(serr, proc != nil) {
			if serr != nil {
				log.Info("bridge left by an earlier agent does not answer in time: busy, not dead; adopted, not stopped", "pv", pv, "path", m.MountPoint, "err", serr.Error())
			}
			st := &bridge{proc: proc, started: s.clk.Now()}
			if proc != nil {
				st.cgroup = rec.Cgroup
				if rec.Cgroup != "" && s.opts.BridgeCgroup != "" && strings.HasPrefix(rec.Cgroup, s.opts.BridgeCgroup+"/") {
					// An earlier agent's bridge: today's limits and no weight above the pods'.
					if err := s.limit(rec.Cgroup); err != nil {
						log.Error(err, "bounding an adopted bridge's cgroups failed", "pv", pv, "cgroup", rec.Cgroup)
					}
				}
				go func() { s.onExit(ctx, pv, st, proc.Wait()) }()
			}
			s.mu.Lock()
			s.bridges[pv] = st
			s.mu.Unlock()
			log.Info("re-adopted healthy bridge", "pv", pv, "path", m.MountPoint, "pid", rec.Proc.Pid, "supervised", proc != nil, "cgroup", st.cgroup)
			continue
		}
		log.Info("dropping a dead bridge mount left by an earlier agent", "pv", pv, "path", m.MountPoint)
		s.dropBridge(ctx, pv, rec, proc)
		if t, err := s.os.Mounter.MountTable(); err == nil {
			stack.UnmountAll(s.os.Mounter, m.MountPoint, t)
		}
	}
	names, err := s.os.FS.ReadDir(s.layout.BridgesDir())
	if err != nil {
		return err
	}
	for _, name := range names {
		pv, ok := PVFromBridgeRecord(name)
		if !ok {
			continue
		}
		if rec, found, err := s.readRecord(pv); err == nil && found && rec.PV != "" && PVComponent(rec.PV) == pv {
			pv = rec.PV // the file is named by the hashed form of a long name
		}
		if seen[pv] {
			continue
		}
		rec, proc := s.adoptProcess(ctx, pv, s.layout.MountPoint(pv))
		log.Info("dropping the record of a bridge whose mount is gone", "pv", pv, "pid", rec.Proc.Pid, "running", proc != nil)
		s.dropBridge(ctx, pv, rec, proc)
	}
	s.updateGauge()
	s.sweepCgroups(ctx, s.adoptRetiring(ctx))
	return nil
}

// sweepCgroups removes the bridge groups under BridgeCgroup that no bridge uses: an earlier agent
// removes a bridge's group once its s3fs has exited, but not when the agent was gone by then and
// kept no record of it (its state directory removed, the node's agent reinstalled), and each
// such group stayed forever, empty. Only names of ours ("<pv>-<pid>") are touched, never a group
// of a bridge adopted or retiring here, and the kernel refuses to remove one that still has a
// process: a bridge that outlived every record keeps its group. retiring are the groups of the
// retiring bridges watched.
func (s *Supervisor) sweepCgroups(ctx context.Context, retiring []string) {
	if s.opts.BridgeCgroup == "" {
		return
	}
	log := logr.FromContextOrDiscard(ctx)
	names, err := s.os.Cgroups.Children(s.opts.BridgeCgroup)
	if err != nil {
		log.Error(err, "listing the bridges' cgroups", "parent", s.opts.BridgeCgroup)
		if len(names) == 0 {
			return
		}
	}
	inUse := map[string]bool{}
	s.mu.Lock()
	for _, st := range s.bridges {
		inUse[st.cgroup] = true
	}
	s.mu.Unlock()
	for _, group := range retiring {
		inUse[group] = true
	}
	var removed []string
	for _, name := range names {
		group := s.opts.BridgeCgroup + "/" + name
		if _, _, ours := parseBridgeCgroup(name); !ours || inUse[group] {
			continue
		}
		if err := s.os.Cgroups.Remove(group); err != nil {
			if errors.Is(err, syscall.EBUSY) {
				log.Info("a bridge cgroup no record names still has processes: kept", "cgroup", group)
			} else {
				log.Error(err, "removing an unused bridge cgroup", "cgroup", group)
			}
			continue
		}
		removed = append(removed, name)
	}
	if len(removed) > 0 {
		log.Info("removed bridge cgroups no bridge uses", "parent", s.opts.BridgeCgroup, "groups", removed)
	}
}

// adoptProcess returns pv's record and, when its s3fs still runs at mountPoint, a handle on it.
func (s *Supervisor) adoptProcess(ctx context.Context, pv, mountPoint string) (BridgeRecord, Process) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pv)
	rec, ok, err := s.readRecord(pv)
	if err != nil {
		log.Error(err, "reading the bridge record")
	}
	if !ok {
		return BridgeRecord{}, nil
	}
	proc, err := s.os.Procs.Adopt(rec.Proc, mountPoint)
	if err != nil {
		log.V(1).Info("recorded s3fs does not run any more", "err", err.Error())
		return rec, nil
	}
	return rec, proc
}

// dropBridge stops a recorded s3fs that still runs (provably ours: pid, start time and our
// mount point on its command line) and removes its record and cgroup.
func (s *Supervisor) dropBridge(ctx context.Context, pv string, rec BridgeRecord, proc Process) {
	if proc != nil {
		proc.Kill(s.opts.KillGrace)
	}
	s.forget(ctx, pv, rec, false)
}

// Ensure makes sure the PV's bridge mount point holds a healthy s3fs mount of ours; resolve
// gives the volume and its credentials when a new s3fs must start.
func (s *Supervisor) Ensure(ctx context.Context, pvName string, resolve func(context.Context) (Volume, Credentials, error)) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pvName)
	path := s.layout.MountPoint(pvName)
	table, err := s.os.Mounter.MountTable()
	if err != nil {
		return err
	}
	if table.IsMountPoint(path) {
		serr := s.os.Statfs.Statfs(ctx, path, s.cfg.S3.StatfsTimeout.Duration)
		if serr == nil {
			return nil
		}
		s.mu.Lock()
		_, running := s.bridges[pvName]
		s.mu.Unlock()
		if !bridgeGone(serr, running) {
			return fmt.Errorf("%w: %s: %w", ErrBridgeBusy, path, serr)
		}
		// A dead bridge mount: binds made from it keep their own reference, so it can go.
		log.Info("bridge mount is dead, mounting again", "path", path, "err", serr.Error())
		s.Stop(ctx, pvName, false)
		stack.UnmountAll(s.os.Mounter, path, table)
	}
	vol, creds, err := resolve(ctx)
	if err != nil {
		return err
	}
	passwd := s.layout.PasswdFile(pvName)
	size, avail := fsSpace(s.layout.TmpRoot())
	floor := DiskFreeFloorMB(s.cfg, size)
	startable, lowered := StartableFloorMB(floor, avail, vol.Options)
	args, err := Args(vol, creds, path, passwd, s.layout.TmpDir(pvName), startable)
	if err != nil {
		return err // refused by the allowlists: nothing is written or started
	}
	if lowered {
		log.Info("the node has less disk free than the bridges' floor: this bridge's s3fs gets a floor it can start with, so it serves reads and may write little to the node's disk",
			"floorMB", floor, "startsWithFloorMB", startable, "tmpRoot", s.layout.TmpRoot())
	}
	for _, dir := range []string{path, s.layout.TmpDir(pvName)} {
		if err := s.os.FS.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("%w: create %s: %w", stack.ErrMount, dir, err)
		}
	}
	if err := s.os.FS.WriteFile(passwd, PasswdContent(creds), 0o600); err != nil {
		return fmt.Errorf("%w: write passwd file: %w", stack.ErrMount, err)
	}
	log.Info("starting s3fs", "bucket", vol.Bucket, "prefix", vol.Prefix, "mountPoint", path)
	spec := ProcSpec{
		Path: s.cfg.S3.S3fsPath, Args: args, Dir: s.layout.Root(), LogFile: s.layout.LogFile(pvName),
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR=" + s.layout.TmpDir(pvName)},
	}
	var proc Process
	order := s.netNSOrder()
	for i, ns := range order {
		spec.NetNS = ns
		if proc, err = s.os.Procs.Start(spec); !errors.Is(err, ErrNetNS) || i == len(order)-1 {
			break
		}
		log.Error(err, "s3fs cannot start in the node's network namespace there; trying the next", "netns", order[i+1])
	}
	if err != nil {
		_ = s.os.FS.Remove(passwd)
		return err
	}
	s.mu.Lock()
	s.joined = spec.NetNS
	s.mu.Unlock()
	if spec.NetNS == "" && s.opts.BridgeNetNS != "" {
		// A bridge in the agent's namespace still serves while the agent runs; it loses its
		// network when the agent pod is deleted (reads through it hang until a new bridge).
		log.Error(nil, "s3fs runs in the agent's network namespace: the bridge loses its network when the agent pod goes (run the agent with hostNetwork)")
	}
	st := &bridge{proc: proc, started: s.clk.Now()}
	s.detach(ctx, pvName, st)
	exited := make(chan struct{})
	go func() {
		werr := proc.Wait()
		close(exited)
		s.onExit(ctx, pvName, st, werr)
	}()
	if err := s.waitMounted(ctx, path, pvName, exited); err != nil {
		proc.Kill(s.opts.KillGrace)
		<-exited
		if t, terr := s.os.Mounter.MountTable(); terr == nil {
			stack.UnmountAll(s.os.Mounter, path, t)
		}
		_ = s.os.FS.Remove(passwd)
		lines := strings.Split(strings.TrimSpace(scrub(proc.Output(), creds)), "\n")
		return fmt.Errorf("%w: %w; s3fs said: %s", ErrS3fs, err, strings.Join(lines[max(0, len(lines)-3):], " | "))
	}
	s.mu.Lock()
	s.bridges[pvName] = st
	s.mu.Unlock()
	s.updateGauge()
	log.Info("s3fs bridge mount ready", "pid", proc.ID().Pid, "cgroup", st.cgroup, "after", s.clk.Since(st.started))
	return nil
}

// detach moves a just started s3fs into its own cgroup outside the agent container's and
// records it, so that it survives the container and the next agent adopts it. A failure is
// logged, not fatal: the bridge serves the pod now, it only would not outlive this agent.
func (s *Supervisor) detach(ctx context.Context, pvName string, st *bridge) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pvName)
	if group := BridgeCgroup(s.opts.BridgeCgroup, pvName, st.proc.ID().Pid); group != "" {
		// The limits first (the parents', then its own), so s3fs never runs unbounded in it.
		if err := s.limit(group); err != nil {
			log.Error(err, "bounding the bridge's cgroups failed: it may run without CPU or memory limits", "cgroup", group)
		}
		if err := s.os.Cgroups.Place(st.proc.ID().Pid, group); err != nil {
			log.Error(err, "moving s3fs out of the agent's cgroups failed: this bridge dies with the agent container")
		} else {
			st.cgroup = group
		}
	}
	if err := s.writeRecord(pvName, BridgeRecord{Proc: st.proc.ID(), Cgroup: st.cgroup}); err != nil {
		log.Error(err, "recording the bridge failed: a restarted agent will not adopt its process")
	}
}

// limit sets the limits of group (a bridge's), of all bridges (BridgeCgroup) and the default
// CPU weight of each level above: an earlier agent weighed them 9548, above the pods' groups,
// and the weight stays in the node's cgroups until it is written again.
func (s *Supervisor) limit(group string) error {
	all, each := BridgeLimits(s.cfg)
	var errs []error
	parts := strings.Split(s.opts.BridgeCgroup, "/")
	for i := range parts {
		level, l := strings.Join(parts[:i+1], "/"), Limits{}
		if i == len(parts)-1 {
			l = all
		}
		if err := s.os.Cgroups.SetLimits(level, l); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.os.Cgroups.SetLimits(group, each); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// forgetBridge removes what detach (and Retire) made once the bridge's process has exited.
func (s *Supervisor) forgetBridge(ctx context.Context, pvName string, st *bridge) {
	rec := BridgeRecord{Cgroup: st.cgroup}
	if st.proc != nil {
		rec.Proc = st.proc.ID()
	}
	s.mu.Lock()
	retiring := st.retiring
	s.mu.Unlock()
	s.forget(ctx, pvName, rec, retiring)
}

// forget removes pv's retiring record of rec.Proc (when retiring), its bridge record when that
// names rec.Proc (any record when rec.Proc.Pid is 0), and rec.Cgroup.
func (s *Supervisor) forget(ctx context.Context, pvName string, rec BridgeRecord, retiring bool) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pvName)
	if retiring {
		if err := s.os.FS.Remove(s.layout.RetiringRecordFile(pvName, rec.Proc.Pid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Error(err, "removing the retiring bridge's record")
		}
	}
	if cur, ok, err := s.readRecord(pvName); err != nil || (ok && (rec.Proc.Pid == 0 || cur.Proc == rec.Proc)) {
		if err := s.os.FS.Remove(s.layout.BridgeRecordFile(pvName)); err != nil {
			log.Error(err, "removing the bridge record")
		}
	}
	if cgroup := rec.Cgroup; cgroup != "" {
		// The process has exited; until its parent (the shim, init) reaps it the kernel may
		// still count it in the group: retry a little.
		var err error
		for range 10 {
			if err = s.os.Cgroups.Remove(cgroup); err == nil {
				break
			}
			s.clk.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			log.Error(err, "removing the bridge's cgroup", "cgroup", cgroup)
		}
	}
}

func (s *Supervisor) updateGauge() {
	s.mu.Lock()
	n := len(s.bridges)
	s.mu.Unlock()
	s.opts.Active.Set(float64(n))
}

// mountPoll is how often waitMounted looks for the new s3fs's mount: s3fs mounts tens of
// milliseconds after its start, and every pod of the volume waits for this poll (the outage
// window); one mount-table read per poll costs well under a millisecond.
const mountPoll = 10 * time.Millisecond

// waitMounted waits until our s3fs answers at path, or exits, or MountTimeout passes.
func (s *Supervisor) waitMounted(ctx context.Context, path, pvName string, exited <-chan struct{}) error {
	deadline := s.clk.Now().Add(s.opts.MountTimeout)
	for {
		table, err := s.os.Mounter.MountTable()
		if err != nil {
			return err
		}
		if top, ok := table.Top(path); ok && top.Source == stack.FSName(pvName) {
			// s3fs checks the bucket inside FUSE init; statfs waits for that answer.
			serr := s.os.Statfs.Statfs(ctx, path, s.opts.MountTimeout)
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
		case <-s.clk.After(mountPoll):
		}
		if s.clk.Now().After(deadline) {
			return fmt.Errorf("not mounted after %s", s.opts.MountTimeout)
		}
	}
}

// onExit supervises an s3fs we started: an unexpected exit is reported to Exited (the rescue
// checks at once, so the dead binds are restored without waiting for the next tick; a quick
// death counts as a failure).
func (s *Supervisor) onExit(ctx context.Context, pv string, st *bridge, err error) {
	s.forgetBridge(ctx, pv, st)
	s.mu.Lock()
	current := s.bridges[pv] == st
	stopped := st.stopped
	if current {
		delete(s.bridges, pv)
	}
	s.mu.Unlock()
	s.updateGauge()
	if stopped || !current {
		return
	}
	s.opts.Exits.Inc()
	lived := s.clk.Since(st.started)
	logr.FromContextOrDiscard(ctx).Info("s3fs exited", "pv", pv, "err", fmt.Sprint(err), "lived", lived)
	if s.opts.Exited != nil {
		s.opts.Exited(pv, lived)
	}
}

// take removes pv's bridge from the running ones, stopped on purpose (its exit is no failure);
// a retired one's process, when it has one, retires.
func (s *Supervisor) take(pv string, retire bool) *bridge {
	s.mu.Lock()
	st := s.bridges[pv]
	delete(s.bridges, pv)
	if st != nil {
		st.stopped = true
		if retire {
			st.retiring = st.proc != nil
		}
	}
	s.mu.Unlock()
	s.updateGauge()
	return st
}

// Stop stops our s3fs for pv (if we own one) and forgets it.
func (s *Supervisor) Stop(ctx context.Context, pv string, wait bool) {
	st := s.take(pv, false)
	if st == nil || st.proc == nil {
		return
	}
	if wait {
		st.proc.Kill(s.opts.KillGrace)
		// Its exit is handled by onExit too; forgetting here as well makes a retire complete
		// when this returns (forgetting twice is harmless).
		s.forgetBridge(ctx, pv, st)
	} else {
		go st.proc.Kill(s.opts.KillGrace)
	}
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
