package containermount

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/nodeagent"
)

// Event reasons on the pod (internal/contract names them for every process).
const (
	ReasonRestored = contract.ReasonMountRestoredInContainer
	ReasonFailed   = contract.ReasonMountRestoreInContainerFailed
	// ReasonSkipped: the pod spec and the container's mount table disagree (ErrUnverified).
	ReasonSkipped = contract.ReasonContainerMountSkipped
)

// Request errors.
var (
	// ErrBadRequest: the request is incomplete or malformed; nothing was touched.
	ErrBadRequest = errors.New("bad remount request")
	// ErrNotRestored: LivePath does not hold a live mount (nothing there, or still the dead
	// connection); nothing was touched.
	ErrNotRestored = errors.New("no live mount at the restored path")
	// ErrNoHostPID: the agent is pid 1 of its own PID namespace, so it cannot see any
	// container's processes (the DaemonSet lacks hostPID: true).
	ErrNoHostPID = errors.New("agent does not share the host's PID namespace (hostPID: true is needed)")
)

// Options tune the remounter.
type Options struct {
	// NamespaceTimeout bounds the kernel work inside one container's namespace.
	NamespaceTimeout time.Duration
}

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{NamespaceTimeout: 10 * time.Second}
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	if o.NamespaceTimeout <= 0 {
		return fmt.Errorf("containermount: NamespaceTimeout must be positive, got %s", o.NamespaceTimeout)
	}
	return nil
}

// Remounter puts a restored mount back into the running containers of a pod.
type Remounter struct {
	// mu serialises passes: two passes planning on the same container at once would both see
	// the dead mount, and the second would report the first's fix as target_changed.
	mu      sync.Mutex
	os      OS
	rec     record.EventRecorder
	clock   clock.PassiveClock
	metrics *Metrics
	opts    Options
}

// New builds a remounter from the agent's shared dependencies (Recorder, Registerer and Clock
// are used; a nil Recorder emits no Events, a nil Clock is the real one), the OS seam and
// options (zero fields get defaults).
func New(deps nodeagent.Deps, os OS, opts Options) (*Remounter, error) {
	if opts.NamespaceTimeout == 0 {
		opts.NamespaceTimeout = NewOptions().NamespaceTimeout
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if deps.Clock != nil {
		clk = deps.Clock
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if os.Proc == nil || os.NS == nil {
		return nil, errors.New("containermount: OS needs both Proc and NS")
	}
	m, err := NewMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	return &Remounter{os: os, rec: deps.Recorder, clock: clk, metrics: m, opts: opts}, nil
}

// Metrics returns the remounter's metrics.
func (r *Remounter) Metrics() *Metrics { return r.metrics }

// RemountInContainers finds every container of req.Pod whose mount namespace still reaches the
// dead connection req.DeadDevice, and replaces each such dead mount by a clone of the live mount
// at req.LivePath (at the same offset inside the volume): beneath it, then the dead one detached,
// or stacked on it where the kernel refuses (counted and logged with the reason). Mount points already on a live
// mount are left alone, so a second pass changes nothing. A container that cannot be fixed is
// reported in Failed and does not stop the others; the error is for a request that could not be
// worked on at all.
func (r *Remounter) RemountInContainers(ctx context.Context, req RemountRequest) (RemountResult, error) {
	out := r.RemountPods(ctx, []RemountRequest{req})
	return out[0].Result, out[0].Err
}

// RemountPods is RemountInContainers for each request, in order, as one pass: the node's
// processes are listed and the agent's own mount table is read once for all of them, not once
// per pod. A restore pass puts one volume back for every pod of the node, and those two reads
// (every process's cgroup; a table as long as the node has mounts) were most of each pod's
// share of the time the last pod waits. The snapshot is taken after the caller restored the
// host targets, as one pod's was: a container started after that binds the live target, and a
// process that exits or a pid reused afterwards is caught where the namespace is entered (its
// inode and owner checked on the descriptor). One outcome per request, in the same order.
func (r *Remounter) RemountPods(ctx context.Context, reqs []RemountRequest) []RemountOutcome {
	out := make([]RemountOutcome, len(reqs))
	// What a tenant's namespaces cost (reading their mount tables, the Events) is paid after the
	// pass, outside r.mu: a slow read there never holds up the next pass.
	for _, finish := range r.pass(ctx, reqs, out) {
		finish()
	}
	return out
}

// pass is RemountPods' part under r.mu; it returns, per pod worked on, what is left to do once
// r.mu is released.
func (r *Remounter) pass(ctx context.Context, reqs []RemountRequest, out []RemountOutcome) []func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.clock.Now()
	uids := map[string]bool{}
	for i := range reqs {
		out[i].Result = RemountResult{Failed: map[string]error{}}
		if out[i].Err = validate(&reqs[i]); out[i].Err == nil {
			uids[NormalizeUID(string(reqs[i].Pod.UID))] = true
		}
	}
	if len(uids) == 0 {
		return nil
	}
	n, err := r.snapshot(uids)
	var later []func()
	for i, req := range reqs {
		if out[i].Err != nil {
			continue
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		finish, perr := r.remountPod(ctx, req, n, start, &out[i].Result)
		if out[i].Err = perr; finish != nil {
			later = append(later, finish)
		}
	}
	return later
}

// node is what one pass reads once: the agent's own pid, namespaces and mount table, the
// host's mount namespace, and the processes of the pods asked about, by normalised pod UID.
type node struct {
	self             int
	selfNS, selfUser uint64
	hostNS           uint64
	table            MountTable
	procs            map[string][]Proc
}

func (r *Remounter) snapshot(uids map[string]bool) (node, error) {
	n := node{self: r.os.Proc.Self()}
	if n.self == 1 {
		return n, ErrNoHostPID
	}
	content, err := r.os.Proc.MountInfo(n.self)
	if err != nil {
		return n, fmt.Errorf("own mountinfo: %w", err)
	}
	if n.table, err = ParseMountInfo(content); err != nil {
		return n, fmt.Errorf("own mountinfo: %w", err)
	}
	if n.selfNS, err = r.os.Proc.MountNS(n.self); err != nil {
		return n, fmt.Errorf("own mount namespace: %w", err)
	}
	n.selfUser, _ = r.os.Proc.UserNS(n.self)
	n.hostNS, _ = r.os.Proc.MountNS(1) // without hostPID, pid 1 is our own container's
	n.procs, err = r.podProcs(uids)
	return n, err
}

// remountPod fixes the pod's runtime-made namespaces into res; the returned func reports the
// foreign ones and the pass's Events, and is called without r.mu.
func (r *Remounter) remountPod(ctx context.Context, req RemountRequest, n node, start time.Time, res *RemountResult) (func(), error) {
	pod := req.Pod
	log := logr.FromContextOrDiscard(ctx).WithName("containermount").WithValues(
		"pod", pod.Namespace+"/"+pod.Name, "device", req.DeadDevice, "livePath", req.LivePath)
	live, err := liveMount(n.table, req)
	if err != nil {
		return nil, err
	}
	procs := n.procs[NormalizeUID(string(pod.UID))]
	names := containerNames(pod)
	runtimeProcs, foreign := runtimeInits(procs, n.selfUser)
	var fixedLabels []string
	for _, ns := range GroupByNamespace(runtimeProcs, string(pod.UID), n.selfNS, n.hostNS) {
		label := nsLabel(ns, names)
		spec, identified := SpecMounts(pod, nsNames(ns, names))
		fixed := r.fixNamespace(ctx, log, req, live, ns, label, n.selfUser, nsSpec{spec, identified}, res)
		if fixed && !contains(fixedLabels, label) {
			fixedLabels = append(fixedLabels, label)
		}
	}
	if len(res.Fixed) > 0 {
		r.metrics.Duration.Observe(r.clock.Since(start).Seconds())
	}
	return func() {
		r.skipForeign(log, req, live, foreign, names, res, n.selfNS, n.hostNS)
		r.report(pod, *res, fixedLabels)
		log.V(1).Info("remount pass done", "fixed", res.Fixed, "failed", len(res.Failed), "untouched", res.Untouched)
	}, nil
}

func validate(req *RemountRequest) error {
	if req.Pod == nil || req.Pod.UID == "" {
		return fmt.Errorf("%w: pod with a UID is required", ErrBadRequest)
	}
	if !validDev(req.DeadDevice) {
		return fmt.Errorf("%w: dead device %q is not major:minor", ErrBadRequest, req.DeadDevice)
	}
	if req.DeadRoot == "" {
		req.DeadRoot = "/"
	}
	if !path.IsAbs(req.DeadRoot) || !path.IsAbs(req.LivePath) {
		return fmt.Errorf("%w: dead root %q and live path %q must be absolute", ErrBadRequest, req.DeadRoot, req.LivePath)
	}
	req.LivePath = path.Clean(req.LivePath)
	return nil
}

// liveMount returns the mount a lookup of LivePath reaches in the agent's own table, which must
// not be the dead connection.
func liveMount(table MountTable, req RemountRequest) (Mount, error) {
	live, ok := table.Reach(req.LivePath)
	if !ok || live.MountPoint != req.LivePath {
		return Mount{}, fmt.Errorf("%w: nothing mounted at %s", ErrNotRestored, req.LivePath)
	}
	if live.Dev == req.DeadDevice {
		return Mount{}, fmt.Errorf("%w: %s still shows the dead connection %s", ErrNotRestored, req.LivePath, live.Dev)
	}
	return live, nil
}

// podProcs lists the processes in the cgroups of the pods uids names (normalised UIDs), by pod
// UID. Processes that end while being read are skipped: they are not the pod's any more.
func (r *Remounter) podProcs(uids map[string]bool) (map[string][]Proc, error) {
	pids, err := r.os.Proc.Pids()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := map[string][]Proc{}
	for _, pid := range pids {
		if p, ok := r.readProc(pid, uids); ok {
			out[p.Cgroup.PodUID] = append(out[p.Cgroup.PodUID], p)
		}
	}
	return out, nil
}

// readProc reads one process, if it is in the cgroup of one of the pods uids names.
func (r *Remounter) readProc(pid int, uids map[string]bool) (Proc, bool) {
	cg, err := r.os.Proc.Cgroup(pid)
	if err != nil {
		return Proc{}, false
	}
	info, ok := ParseCgroup(cg)
	if !ok || !uids[info.PodUID] {
		return Proc{}, false
	}
	mnt, err := r.os.Proc.MountNS(pid)
	if err != nil {
		return Proc{}, false
	}
	user, _ := r.os.Proc.UserNS(pid)
	st, err := r.os.Proc.Stat(pid)
	if err != nil {
		return Proc{}, false
	}
	p := Proc{Pid: pid, MountNS: mnt, UserNS: user, Cgroup: info, PPid: st.PPid, StartTime: st.StartTime}
	if m, owner, err := r.os.Proc.MountNSOwner(pid); err == nil && m == mnt {
		p.MountNSOwner = owner
	}
	if u, parent, err := r.os.Proc.UserNSParent(pid); err == nil && u == user {
		p.UserNSParent = parent
	}
	return p, true
}

// runtimeInits keeps the processes through which the agent may act: each container's init
// (ContainerInits) whose namespaces the runtime made (RuntimeMade). foreign lists the processes
// in every other mount namespace of the pod's — made by a process of a container, or held by an
// init that fails RuntimeMade — each with why it is left alone.
func runtimeInits(procs []Proc, agentUser uint64) (ok []Proc, foreign []foreignProc) {
	inits, nested := ContainerInits(procs)
	sandbox := podSandbox(inits)
	runtimeNS := map[uint64]bool{}
	for _, p := range inits {
		if err := RuntimeMade(p, sandbox, agentUser); err != nil {
			foreign = append(foreign, foreignProc{p, err})
			continue
		}
		ok = append(ok, p)
		runtimeNS[p.MountNS] = true
	}
	for _, p := range nested {
		if !runtimeNS[p.MountNS] {
			foreign = append(foreign, foreignProc{p, fmt.Errorf("%w: pid %d made it (its container's init, the process the runtime started, is in another one)",
				ErrNotRuntimeNamespace, p.Pid)})
		}
	}
	for i := 0; i < len(foreign); {
		if runtimeNS[foreign[i].MountNS] {
			foreign = append(foreign[:i], foreign[i+1:]...) // an init failing RuntimeMade in a namespace another init vouches for: not entered through it
			continue
		}
		i++
	}
	return ok, foreign
}

// foreignProc is a process in a mount namespace the agent does not act in, and why.
type foreignProc struct {
	Proc
	why error
}

// skipForeign reports, for every foreign namespace where a lookup still reaches the dead
// connection, each such mount point as failed with ErrNotRuntimeNamespace (a
// ContainerMountSkipped Event): nothing is attached there, the probe remains the fallback.
// The agent's own and the host's namespaces (skip) are not the pod's to report.
func (r *Remounter) skipForeign(log logr.Logger, req RemountRequest, live Mount, foreign []foreignProc, names map[string]string,
	res *RemountResult, skip ...uint64) {
	seen := map[uint64]bool{}
	for _, s := range skip {
		if s != 0 {
			seen[s] = true
		}
	}
	for _, f := range foreign {
		if seen[f.MountNS] {
			continue
		}
		seen[f.MountNS] = true
		ns := Namespace{Inode: f.MountNS, Pids: []int{f.Pid}, UserNS: f.UserNS}
		if f.Cgroup.ContainerID != "" {
			ns.ContainerIDs = []string{f.Cgroup.ContainerID}
		}
		table, err := r.foreignTable(ns)
		if err != nil {
			if errors.Is(err, ErrMountInfoTooLarge) {
				log.Info("mount table of a namespace the runtime did not make not read: too large", "mountNamespace", f.MountNS, "pid", f.Pid, "err", err.Error())
			}
			continue // gone, or too large to read: nothing reported
		}
		plan := PlanNamespace(table, req.DeadDevice, req.DeadRoot, live.Dev)
		dead := make([]string, 0, len(plan.Targets)+len(plan.Skipped))
		for _, t := range plan.Targets {
			dead = append(dead, t.MountPoint)
		}
		dead = append(dead, sortedKeys(plan.Skipped)...)
		label := nsLabel(ns, names) + " (mount namespace " + strconv.FormatUint(f.MountNS, 10) + " of pid " + strconv.Itoa(f.Pid) + ")"
		for _, mp := range dead {
			r.fail(res, label, mp, f.why)
			log.Info("dead mount left in a mount namespace the runtime did not make", "namespace", label, "mountPoint", mp, "why", f.why.Error())
		}
	}
}

// nsSpec is what the pod spec says of one namespace's containers' mounts (SpecMounts).
type nsSpec struct {
	mounts     map[string][]SpecMount
	identified bool
}

// maxRounds bounds plan-attach-verify rounds in one namespace: a round that fixes an outer
// mount point hides the dead ones nested in it, which the next round puts back inside.
const maxRounds = 4

// fixNamespace plans, attaches and verifies in one container namespace; it reports whether at
// least one mount was fixed.
func (r *Remounter) fixNamespace(ctx context.Context, log logr.Logger, req RemountRequest, live Mount, ns Namespace,
	label string, selfUser uint64, spec nsSpec, res *RemountResult) bool {
	log = log.WithValues("container", label, "mountNS", ns.Inode)
	userNamespaced := ns.UserNS != 0 && selfUser != 0 && ns.UserNS != selfUser
	var fixed []string
	failed := map[string]error{}
	var left []string
	for round := 0; round < maxRounds; round++ {
		table, err := r.table(ns)
		if err != nil {
			if round == 0 {
				r.fail(res, label, "", err)
				return false
			}
			break
		}
		// Offsets and read-only flags come from the pod spec; mountinfo only has to agree.
		plan := CheckPlan(PlanNamespace(table, req.DeadDevice, req.DeadRoot, live.Dev), table, live.Dev, spec.mounts, spec.identified)
		left = plan.Live
		planned := map[string]bool{}
		for mp, err := range plan.Skipped {
			planned[mp] = true
			failed[mp] = err
		}
		for _, t := range plan.Targets {
			planned[t.MountPoint] = true
		}
		for mp := range failed {
			if !planned[mp] {
				delete(failed, mp) // something else is mounted there now: not ours to touch
			}
		}
		if len(plan.Targets) == 0 {
			break
		}
		progress, changed := r.attachRound(ctx, log, req, live, ns, plan, userNamespaced, &fixed, failed)
		if !progress || !changed {
			break
		}
	}
	for _, mp := range fixed {
		res.Fixed = append(res.Fixed, label+":"+mp)
		r.metrics.Remounts.WithLabelValues("success", "").Inc()
	}
	for _, mp := range left {
		if !contains(fixed, mp) {
			res.Untouched++
		}
	}
	for _, mp := range sortedKeys(failed) {
		r.fail(res, label, mp, failed[mp])
		log.Error(failed[mp], "cannot remount in container", "mountPoint", mp)
	}
	return len(fixed) > 0
}

// attachRound attaches one plan and verifies it. progress: at least one mount point fixed;
// changed: at least one target no longer reached what was planned (possibly hidden by this round).
func (r *Remounter) attachRound(ctx context.Context, log logr.Logger, req RemountRequest, live Mount, ns Namespace, plan Plan,
	userNamespaced bool, fixed *[]string, failed map[string]error) (progress, changed bool) {
	// Flags of the live mount are added too: a clone never widens what it is cloned from. A
	// slave needs a peer group to receive from: the live mount must be shared (kubelet's
	// directory is).
	liveShared := mountreplace.PropagationOf(live).Shared
	attaches := make([]Attach, len(plan.Targets))
	for i, t := range plan.Targets {
		attaches[i] = Attach{Offset: t.Offset, Target: t.MountPoint, ExpectMountID: t.DeadMountID,
			ReadOnly: t.ReadOnly || live.ReadOnly(), NoSuid: t.NoSuid || live.HasOption("nosuid"),
			NoDev: t.NoDev || live.HasOption("nodev"), NoExec: t.NoExec || live.HasOption("noexec"),
			Slave: t.Slave && liveShared, NoPeerGroup: !liveShared, Nest: t.Nest, Protect: t.Reprotect}
	}
	nctx, cancel := context.WithTimeout(ctx, r.opts.NamespaceTimeout)
	outs, err := r.os.NS.AttachInNamespace(nctx, NamespaceRef{Inode: ns.Inode, Pids: ns.Pids, Owner: ns.UserNS}, req.LivePath, attaches)
	cancel()
	if err != nil {
		for _, t := range plan.Targets {
			failed[t.MountPoint] = lockedIf(userNamespaced, err)
		}
		return false, false
	}
	after, verr := r.table(ns)
	for i, t := range plan.Targets {
		var o Outcome
		if i < len(outs) {
			o = outs[i]
		} else {
			o.Err = fmt.Errorf("%w: no outcome for %s", ErrAttach, t.MountPoint)
		}
		// Counted whenever a mount was put in place, even if a later step failed.
		r.metrics.Replace.Observe(o.Replace)
		if o.Replace.Mode == mountreplace.Stacked {
			log.Info("kernel did not mount beneath: live mount stacked on the dead one", "mountPoint", t.MountPoint,
				"reason", o.Replace.Reason, "refusal", errString(o.Replace.Refusal))
		}
		aerr := o.Err
		if aerr == nil {
			aerr = verify(after, verr, t, live, o.Replace.Mode)
		}
		if aerr != nil {
			failed[t.MountPoint] = lockedIf(userNamespaced, aerr)
			changed = changed || errors.Is(aerr, ErrTargetChanged)
			continue
		}
		delete(failed, t.MountPoint)
		if !contains(*fixed, t.MountPoint) {
			*fixed = append(*fixed, t.MountPoint)
		}
		progress = true
		if t.Reprotect {
			log.Info("live mount propagated into container made read-only again", "mountPoint", t.MountPoint)
			continue
		}
		log.Info("live mount restored in container", "mountPoint", t.MountPoint, "offset", t.Offset,
			"readOnly", attaches[i].ReadOnly, "slave", attaches[i].Slave, "mode", modeOf(o), "took", o.Replace.Took)
	}
	return progress, changed
}

func modeOf(o Outcome) string {
	if o.Replace.Mode == "" {
		return "nested"
	}
	return string(o.Replace.Mode)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// foreignTable is table for a namespace the agent does not act in: read with a byte cap
// (MaxForeignMountInfo) when the ProcFS can.
func (r *Remounter) foreignTable(ns Namespace) (MountTable, error) {
	capped, ok := r.os.Proc.(MountInfoCapped)
	if !ok {
		return r.table(ns)
	}
	for _, pid := range ns.Pids {
		if inode, err := r.os.Proc.MountNS(pid); err != nil || inode != ns.Inode {
			continue
		}
		content, err := capped.MountInfoUpTo(pid, MaxForeignMountInfo)
		if err != nil {
			return nil, fmt.Errorf("mountinfo of pid %d: %w", pid, err)
		}
		return ParseMountInfo(content)
	}
	return nil, ErrNamespaceGone
}

// table reads the namespace's mount table through the first pid that still answers.
func (r *Remounter) table(ns Namespace) (MountTable, error) {
	lastErr := ErrNamespaceGone
	for _, pid := range ns.Pids {
		if inode, err := r.os.Proc.MountNS(pid); err != nil || inode != ns.Inode {
			continue
		}
		content, err := r.os.Proc.MountInfo(pid)
		if err != nil {
			lastErr = fmt.Errorf("%w: mountinfo of pid %d: %w", ErrNamespaceGone, pid, err)
			continue
		}
		t, err := ParseMountInfo(content)
		if err != nil {
			return nil, fmt.Errorf("mountinfo of pid %d: %w", pid, err)
		}
		return t, nil
	}
	return nil, lastErr
}

// verify checks, in the table read after attaching, that a lookup of the mount point reaches the
// live connection showing exactly the planned directory of the volume (never the volume root for
// a subPath).
func verify(after MountTable, readErr error, t Target, live Mount, mode mountreplace.Mode) error {
	if readErr != nil {
		return fmt.Errorf("%w: %w", ErrVerify, readErr)
	}
	top, ok := after.Reach(t.MountPoint)
	if t.Reprotect {
		// The same mount, now read-only.
		switch {
		case !ok || top.ID != t.DeadMountID:
			return fmt.Errorf("%w: %s no longer reaches mount %d", ErrVerify, t.MountPoint, t.DeadMountID)
		case !top.ReadOnly():
			return fmt.Errorf("%w: %s is still writable", ErrVerify, t.MountPoint)
		}
		return nil
	}
	want := ExpectedRoot(live.Root, t.Offset)
	switch {
	case !ok || top.MountPoint != t.MountPoint:
		return fmt.Errorf("%w: nothing mounted at %s", ErrVerify, t.MountPoint)
	case top.Dev != live.Dev:
		return fmt.Errorf("%w: %s shows device %s, want %s", ErrVerify, t.MountPoint, top.Dev, live.Dev)
	case top.Root != want:
		return fmt.Errorf("%w: %s shows %q of the volume, want %q", ErrVerify, t.MountPoint, top.Root, want)
	case top.ReadOnly() != (t.ReadOnly || live.ReadOnly()):
		return fmt.Errorf("%w: %s read-only=%t, want %t", ErrVerify, t.MountPoint, top.ReadOnly(), t.ReadOnly || live.ReadOnly())
	}
	if mode == mountreplace.Beneath {
		for _, m := range after {
			if m.ID == t.DeadMountID {
				return fmt.Errorf("%w: dead mount %d still in the table after it was replaced at %s", ErrVerify, m.ID, t.MountPoint)
			}
		}
	}
	return nil
}

func lockedIf(userNamespaced bool, err error) error {
	if userNamespaced && (errors.Is(err, ErrSetns) || errors.Is(err, ErrAttach)) {
		return fmt.Errorf("%w: %w", ErrLocked, err)
	}
	return err
}

func (r *Remounter) fail(res *RemountResult, label, mountPoint string, err error) {
	key := label
	if mountPoint != "" {
		key += ":" + mountPoint
	}
	res.Failed[key] = err
	r.metrics.Remounts.WithLabelValues("failure", Reason(err)).Inc()
}
