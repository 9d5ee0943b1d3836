package containermount

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/nodeagent"
)

// Event reasons on the pod.
const (
	ReasonRestored = "MountRestoredInContainer"
	ReasonFailed   = "MountRestoreInContainerFailed"
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
// dead connection req.DeadDevice, and stacks a clone of the live mount at req.LivePath (at the
// same offset inside the volume) on top of each such dead mount. Mount points already on a live
// mount are left alone, so a second pass changes nothing. A container that cannot be fixed is
// reported in Failed and does not stop the others; the error is for a request that could not be
// worked on at all.
func (r *Remounter) RemountInContainers(ctx context.Context, req RemountRequest) (RemountResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.clock.Now()
	res := RemountResult{Failed: map[string]error{}}
	if err := validate(&req); err != nil {
		return res, err
	}
	pod := req.Pod
	log := logr.FromContextOrDiscard(ctx).WithName("containermount").WithValues(
		"pod", pod.Namespace+"/"+pod.Name, "device", req.DeadDevice, "livePath", req.LivePath)

	self := r.os.Proc.Self()
	if self == 1 {
		return res, ErrNoHostPID
	}
	live, err := r.liveMount(self, req)
	if err != nil {
		return res, err
	}
	selfNS, err := r.os.Proc.MountNS(self)
	if err != nil {
		return res, fmt.Errorf("own mount namespace: %w", err)
	}
	selfUser, _ := r.os.Proc.UserNS(self)
	hostNS, _ := r.os.Proc.MountNS(1) // without hostPID, pid 1 is our own container's
	procs, err := r.podProcs(string(pod.UID))
	if err != nil {
		return res, err
	}
	names := containerNames(pod)
	var fixedLabels []string
	for _, ns := range GroupByNamespace(procs, string(pod.UID), selfNS, hostNS) {
		label := nsLabel(ns, names)
		fixed := r.fixNamespace(ctx, log, req, live, ns, label, selfUser, &res)
		if fixed && !contains(fixedLabels, label) {
			fixedLabels = append(fixedLabels, label)
		}
	}
	r.report(pod, res, fixedLabels, start)
	log.V(1).Info("remount pass done", "fixed", res.Fixed, "failed", len(res.Failed), "untouched", res.Untouched)
	return res, nil
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

// liveMount returns the mount a lookup of LivePath reaches in our own namespace, which must not
// be the dead connection.
func (r *Remounter) liveMount(self int, req RemountRequest) (Mount, error) {
	content, err := r.os.Proc.MountInfo(self)
	if err != nil {
		return Mount{}, fmt.Errorf("own mountinfo: %w", err)
	}
	table, err := ParseMountInfo(content)
	if err != nil {
		return Mount{}, fmt.Errorf("own mountinfo: %w", err)
	}
	live, ok := table.Top(req.LivePath)
	if !ok {
		return Mount{}, fmt.Errorf("%w: nothing mounted at %s", ErrNotRestored, req.LivePath)
	}
	if live.Dev == req.DeadDevice {
		return Mount{}, fmt.Errorf("%w: %s still shows the dead connection %s", ErrNotRestored, req.LivePath, live.Dev)
	}
	return live, nil
}

// podProcs lists the processes in the pod's cgroup. Processes that end while being read are
// skipped: they are not the pod's any more.
func (r *Remounter) podProcs(podUID string) ([]Proc, error) {
	pids, err := r.os.Proc.Pids()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	want := NormalizeUID(podUID)
	var out []Proc
	for _, pid := range pids {
		cg, err := r.os.Proc.Cgroup(pid)
		if err != nil {
			continue
		}
		info, ok := ParseCgroup(cg)
		if !ok || info.PodUID != want {
			continue
		}
		mnt, err := r.os.Proc.MountNS(pid)
		if err != nil {
			continue
		}
		user, _ := r.os.Proc.UserNS(pid)
		out = append(out, Proc{Pid: pid, MountNS: mnt, UserNS: user, Cgroup: info})
	}
	return out, nil
}

// fixNamespace plans, attaches and verifies in one container namespace; it reports whether at
// least one mount was fixed.
func (r *Remounter) fixNamespace(ctx context.Context, log logr.Logger, req RemountRequest, live Mount, ns Namespace,
	label string, selfUser uint64, res *RemountResult) bool {
	log = log.WithValues("container", label, "mountNS", ns.Inode)
	table, err := r.table(ns)
	if err != nil {
		r.fail(res, label, "", err)
		return false
	}
	plan := PlanNamespace(table, req.DeadDevice, req.DeadRoot)
	res.Untouched += plan.Live
	for _, mp := range sortedKeys(plan.Skipped) {
		r.fail(res, label, mp, plan.Skipped[mp])
		log.Info("dead mount left alone", "mountPoint", mp, "reason", plan.Skipped[mp].Error())
	}
	if len(plan.Targets) == 0 {
		return false
	}
	attaches := make([]Attach, len(plan.Targets))
	for i, t := range plan.Targets {
		attaches[i] = Attach{Offset: t.Offset, Target: t.MountPoint, ExpectMountID: t.DeadMountID,
			ReadOnly: t.ReadOnly, NoSuid: t.NoSuid, NoDev: t.NoDev, NoExec: t.NoExec, Slave: t.Slave}
	}
	userNamespaced := ns.UserNS != 0 && selfUser != 0 && ns.UserNS != selfUser
	nctx, cancel := context.WithTimeout(ctx, r.opts.NamespaceTimeout)
	errs, err := r.os.NS.AttachInNamespace(nctx, NamespaceRef{Inode: ns.Inode, Pids: ns.Pids}, req.LivePath, attaches)
	cancel()
	if err != nil {
		err = lockedIf(userNamespaced, err)
		for _, t := range plan.Targets {
			r.fail(res, label, t.MountPoint, err)
		}
		log.Error(err, "cannot remount in container")
		return false
	}
	after, verr := r.table(ns)
	fixed := false
	for i, t := range plan.Targets {
		var aerr error
		if i < len(errs) {
			aerr = errs[i]
		}
		if aerr == nil {
			aerr = verify(after, verr, t, live)
		}
		if aerr != nil {
			aerr = lockedIf(userNamespaced, aerr)
			r.fail(res, label, t.MountPoint, aerr)
			log.Error(aerr, "cannot remount in container", "mountPoint", t.MountPoint, "offset", t.Offset)
			continue
		}
		res.Fixed = append(res.Fixed, label+":"+t.MountPoint)
		r.metrics.Remounts.WithLabelValues("success", "").Inc()
		log.Info("live mount restored in container", "mountPoint", t.MountPoint, "offset", t.Offset, "readOnly", t.ReadOnly)
		fixed = true
	}
	return fixed
}

// table reads the namespace's mount table through the first pid that still answers.
func (r *Remounter) table(ns Namespace) (MountTable, error) {
	var lastErr error = ErrNamespaceGone
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
func verify(after MountTable, readErr error, t Target, live Mount) error {
	if readErr != nil {
		return fmt.Errorf("%w: %w", ErrVerify, readErr)
	}
	top, ok := after.Top(t.MountPoint)
	want := ExpectedRoot(live.Root, t.Offset)
	switch {
	case !ok:
		return fmt.Errorf("%w: nothing mounted at %s", ErrVerify, t.MountPoint)
	case top.Dev != live.Dev:
		return fmt.Errorf("%w: %s shows device %s, want %s", ErrVerify, t.MountPoint, top.Dev, live.Dev)
	case top.Root != want:
		return fmt.Errorf("%w: %s shows %q of the volume, want %q", ErrVerify, t.MountPoint, top.Root, want)
	case top.ReadOnly() != (t.ReadOnly || live.ReadOnly()):
		return fmt.Errorf("%w: %s read-only=%t, want %t", ErrVerify, t.MountPoint, top.ReadOnly(), t.ReadOnly || live.ReadOnly())
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

func (r *Remounter) report(pod *corev1.Pod, res RemountResult, fixedLabels []string, start time.Time) {
	if len(res.Fixed) > 0 {
		r.metrics.Duration.Observe(r.clock.Since(start).Seconds())
	}
	if r.rec == nil {
		return
	}
	if len(res.Fixed) > 0 {
		r.rec.Eventf(pod, corev1.EventTypeNormal, ReasonRestored,
			"Volume mount restored without a restart in container(s) %s (%s)",
			strings.Join(fixedLabels, ", "), strings.Join(res.Fixed, ", "))
	}
	if len(res.Failed) > 0 {
		var parts []string
		for _, k := range sortedKeys(res.Failed) {
			parts = append(parts, k+": "+res.Failed[k].Error())
		}
		r.rec.Eventf(pod, corev1.EventTypeWarning, ReasonFailed,
			"Volume mount still dead in container(s); the liveness probe remains the fallback: %s", strings.Join(parts, "; "))
	}
}

// Reason maps an error to the metrics label value.
func Reason(err error) string {
	for _, c := range []struct {
		err    error
		reason string
	}{
		{ErrLocked, "userns_locked"},
		{ErrNamespaceGone, "namespace_gone"},
		{ErrSource, "source"},
		{ErrSetns, "setns"},
		{ErrTargetChanged, "target_changed"},
		{ErrAttach, "attach"},
		{ErrVerify, "verify"},
		{ErrOutsideVolume, "outside_volume"},
		{ErrDeletedRoot, "deleted_root"},
		{context.DeadlineExceeded, "timeout"},
		{context.Canceled, "canceled"},
		{ErrUnsupported, "unsupported"},
		{ErrMountInfo, "mountinfo"},
	} {
		if errors.Is(err, c.err) {
			return c.reason
		}
	}
	return "other"
}

// containerNames maps container IDs (without the runtime scheme) to names.
func containerNames(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses,
		pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			if s.ContainerID != "" {
				out[TrimContainerID(s.ContainerID)] = s.Name
			}
		}
	}
	return out
}

// nsLabel names a namespace by its containers' names, or by its lowest pid when no container
// status matches (the sandbox, or a status not yet reported).
func nsLabel(ns Namespace, names map[string]string) string {
	var got []string
	for _, id := range ns.ContainerIDs {
		if n, ok := names[id]; ok && !contains(got, n) {
			got = append(got, n)
		}
	}
	if len(got) == 0 {
		return "pid " + strconv.Itoa(ns.Pids[0])
	}
	sort.Strings(got)
	return strings.Join(got, "+")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
