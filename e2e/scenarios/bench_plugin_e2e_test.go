//go:build e2e

package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
)

// Environment of BenchmarkPluginPodDeleted (set by `make bench`, hack/bench section "e2e").
const (
	// BenchOutEnv names the JSON file the results are written to (PluginBenchResult).
	BenchOutEnv = "PVRESCUE_BENCH_OUT"
	// BenchRepeatsEnv is the number of plugin pod deletions (default 8).
	BenchRepeatsEnv = "PVRESCUE_BENCH_REPEATS"
)

// PluginBenchResult is what BenchmarkPluginPodDeleted writes to $PVRESCUE_BENCH_OUT: after every
// run and once more when the benchmark ends, passed or failed, so a failed benchmark leaves the
// figures of the runs before the failure and what failed.
type PluginBenchResult struct {
	Layout string `json:"layout"`
	Driver string `json:"driver"`
	// Every figure is timed from the plugin pod's delete request. ExitMs: → every s3fs that
	// served the volume has exited (pidfds opened before the deletion: the instant the volume
	// died, never missed however fast the rescue); ReadableMs: → the first read of the node's
	// target after that exit that gives the file back (polled every 10 ms); RegisteredMs: → the
	// DaemonSet's new plugin pod Running and ready (its registrar has registered the plugin).
	ExitMs       []float64 `json:"exitMs"`
	ReadableMs   []float64 `json:"readableMs"`
	RegisteredMs []float64 `json:"registeredMs"`
	// Runs is the evidence of each run that the volume died and the agent put another mount in
	// its place.
	Runs []PluginBenchRun `json:"runs"`
	// MountIDKind is the statx mount ID compared: "unique" (STATX_MNT_ID_UNIQUE, never reused) or
	// "reusable" (STATX_MNT_ID, kernels before 6.8).
	MountIDKind string `json:"mountIdKind"`
	// SetupSeconds is the cluster and install time before the runs.
	SetupSeconds float64 `json:"setupSeconds"`
	// Grace is the plugin pod's termination grace period.
	GraceSeconds int64 `json:"graceSeconds"`
	// Failures are the benchmark's failure messages (t.Errorf/t.Fatalf, its helpers' included),
	// in order; empty when it passed. Runs holds the runs completed before them.
	Failures []string `json:"failures,omitempty"`
	// Window is the window matrix (issue 34): per behaviour, pod count and way the plugin goes
	// away, one incident; WindowWrites the server-side check of the load's writes after it.
	Window       []WindowCase  `json:"window,omitempty"`
	WindowWrites *WindowWrites `json:"windowWrites,omitempty"`
}

// PluginBenchRun is one plugin pod deletion's evidence.
type PluginBenchRun struct {
	// DeadPids are the host pids of the FUSE daemons (s3fs) in the plugin's container before the
	// deletion, the processes holding /dev/fuse (all exited); LivePids those in the new plugin
	// pod's container after the rescue.
	DeadPids []int `json:"deadPids"`
	LivePids []int `json:"livePids"`
	// MountIDBefore and MountIDAfter are the statx mount IDs at the pod's target before the
	// deletion and once it read again (they differ: another mount stands there).
	MountIDBefore uint64 `json:"mountIdBefore"`
	MountIDAfter  uint64 `json:"mountIdAfter"`
	// DeadFound and Restored are the agent's own record of the run: the increase of
	// pvrescue_s3_dead_mounts_found_total and of pvrescue_s3_restores_total{method="replay"
	// or "bridge", result="success"} on its /metrics (the plugin away, the agent bridges at
	// once, then hands back through the new plugin: a replay in its count).
	DeadFound float64 `json:"deadFound"`
	Restored  float64 `json:"restored"`
}

// failRecorder is the benchmark's testing.TB with every failure message kept as well, for the
// result file: the helpers it is handed (cluster bring-up, pod set-up, checks) fail through it.
type failRecorder struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (r *failRecorder) note(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, msg)
}

func (r *failRecorder) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func (r *failRecorder) Error(args ...any) {
	r.Helper()
	r.note(fmt.Sprint(args...))
	r.TB.Error(args...)
}
func (r *failRecorder) Fatal(args ...any) {
	r.Helper()
	r.note(fmt.Sprint(args...))
	r.TB.Fatal(args...)
}
func (r *failRecorder) Errorf(format string, args ...any) {
	r.Helper()
	r.note(fmt.Sprintf(format, args...))
	r.TB.Errorf(format, args...)
}
func (r *failRecorder) Fatalf(format string, args ...any) {
	r.Helper()
	r.note(fmt.Sprintf(format, args...))
	r.TB.Fatalf(format, args...)
}

// BenchmarkPluginPodDeleted: the test CSI plugin runs as a DaemonSet pod with the upstream
// manifest's mounts (yandex layout: s3fs at kubelet's staging path, a bind per target); its pod
// is deleted, its s3fs die with it, the DaemonSet brings a new pod, and the agent replays through
// it. Each run is timed from the delete request to the volume's s3fs exiting (a pidfd per s3fs,
// opened before the deletion) and to the app's file first reading back at the pod's target on
// the node after that exit (polled every 10 ms). The proof that the volume died and was put
// back does not race the rescue (which is often done before anyone could stat the dead mount):
// the old s3fs exited, another mount ID stands at the target, and the agent counted a dead mount
// found and a replay restored. A whole cluster per invocation: run it with -benchtime 1x; `make
// bench` does (hack/bench section "e2e").
func BenchmarkPluginPodDeleted(b *testing.B) {
	start := time.Now()
	t := &failRecorder{TB: b}
	ctx := context.Background()
	l := fieldLayouts()[0]
	res := PluginBenchResult{Layout: l.layout, Driver: l.driver}
	out := os.Getenv(BenchOutEnv)
	var resMu sync.Mutex
	save := func() {
		if out == "" {
			return
		}
		resMu.Lock()
		defer resMu.Unlock()
		res.Failures = t.failures()
		j, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = os.WriteFile(out, j, 0o644)
		}
		if err != nil {
			b.Errorf("write the result file %s: %v", out, err)
		}
	}
	// Registered first, so it runs last: after every other cleanup's failure.
	b.Cleanup(save)
	repeats := 8
	if v := os.Getenv(BenchRepeatsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", BenchRepeatsEnv, v)
		}
		repeats = n
	}
	e := newEnv(t, "bench", false)
	pod := fusePodSetup(t, e, l)
	mnt := podTarget(e, string(pod.UID), l.pv)
	target := filepath.Join(mnt, "app.txt")
	res.SetupSeconds = time.Since(start).Seconds()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for i := 0; i < repeats; i++ {
		old, err := l.plugin.Pod(ctx)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if old.Spec.TerminationGracePeriodSeconds != nil {
			res.GraceSeconds = *old.Spec.TerminationGracePeriodSeconds
		}
		if !hostReads(target, l.want) {
			t.Fatalf("run %d: %s does not read %q before the deletion", i, target, l.want)
		}
		var run PluginBenchRun
		var kind string
		if run.MountIDBefore, kind, err = mountID(mnt); err != nil {
			t.Fatalf("run %d: before the deletion: %v", i, err)
		}
		res.MountIDKind = kind
		var why string
		if run.DeadPids, why = fuseDaemons(l.plugin); len(run.DeadPids) == 0 {
			t.Fatalf("run %d: no process of the %s plugin's container holds /dev/fuse before the deletion; %s", i, l.driver, why)
		}
		exited, err := pidsExited(run.DeadPids)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		agent, deadBefore, restoredBefore := agentRecord(t, e, fmt.Sprintf("run %d, before the deletion", i))

		// Deaths closer than this are a flapping plugin to the agent (s3.bridgeFlapLimit per
		// s3.bridgeFlapWindow), which waits s3.bridgeAfter before bridging: not this case.
		time.Sleep(time.Until(lastBenchDeath.Add(benchDeathSpacing)))
		t0 := time.Now()
		lastBenchDeath = t0
		if err := e.c.Client.CoreV1().Pods(stack.CSINamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("run %d: delete plugin pod %s: %v", i, old.Name, err)
		}
		var exit time.Duration
		select {
		case at := <-exited:
			exit = at.Sub(t0)
		case <-time.After(3 * time.Minute):
			t.Fatalf("run %d: the volume's s3fs %v still run 3m after the deletion of plugin pod %s", i, run.DeadPids, old.Name)
		}
		if !pollEvery(10*time.Millisecond, 3*time.Minute, func() bool { return hostReads(target, l.want) }) {
			checkKubeletMounts(t, e, "the reads fail")
			t.Fatalf("run %d: %s not readable again within 3m of its s3fs %v exiting (%s after the plugin pod's deletion); stack at the target %s",
				i, target, run.DeadPids, exit.Round(time.Millisecond), describeStack(mountsAt(mnt)))
		}
		readable := time.Since(t0)
		if run.MountIDAfter, _, err = mountID(mnt); err != nil {
			t.Fatalf("run %d: the target reads again: %v", i, err)
		}
		if run.MountIDAfter == run.MountIDBefore {
			t.Fatalf("run %d: the target reads again, but on the same mount (%s mount ID %d) as before the deletion, although its s3fs %v exited; stack %s",
				i, kind, run.MountIDBefore, run.DeadPids, describeStack(mountsAt(mnt)))
		}
		checkTopFUSE(t, mnt, fmt.Sprintf("run %d, the pod's target after the rescue", i))
		run.LivePids, _ = fuseDaemons(l.plugin)
		run.DeadFound, run.Restored = agentCounted(t, e, agent, deadBefore, restoredBefore, fmt.Sprintf("run %d", i))
		if _, err := l.plugin.WaitRegistered(ctx, old.UID); err != nil {
			t.Fatalf("run %d: the DaemonSet's new plugin pod: %v", i, err)
		}
		registered := time.Since(t0)
		resMu.Lock()
		res.ExitMs, res.ReadableMs, res.RegisteredMs = append(res.ExitMs, ms(exit)), append(res.ReadableMs, ms(readable)), append(res.RegisteredMs, ms(registered))
		res.Runs = append(res.Runs, run)
		resMu.Unlock()
		save()
		b.Logf("run %d: plugin pod %s deleted → its s3fs %v exited %s, target readable %s (mount ID %d → %d, s3fs %v; agent: %v found dead, %v restored); new plugin pod ready by %s",
			i, old.Name, run.DeadPids, exit.Round(time.Millisecond), readable.Round(time.Millisecond), run.MountIDBefore, run.MountIDAfter, run.LivePids,
			run.DeadFound, run.Restored, registered.Round(time.Millisecond))
		// With the plugin away the agent bridged; the next run starts once the volume is back
		// on the new plugin's mount.
		waitFor(t, 90*time.Second, fmt.Sprintf("run %d: the target back on the driver's mount", i), func() (bool, string) {
			return !onOurMount(mnt, l.pv) && len(pluginS3fs(l.plugin)) > 0, describeStack(mountsAt(mnt))
		})
		time.Sleep(time.Second)
	}
	checkKubeletMounts(t, e, "after the runs")
	windowMatrix(t, e, l, &res, save)
	checkKubeletMounts(t, e, "after the window matrix")
}

// fuseDaemons lists the processes of the plugin's csi-s3 container that hold /dev/fuse open:
// the FUSE daemons (s3fs) serving its volumes, found by what they hold rather than by name or
// command line. why describes the container's processes when there are none.
func fuseDaemons(p *stack.CSI) (pids []int, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := p.ContainerPids(ctx, "")
	if err != nil {
		return nil, err.Error()
	}
	var seen []string
	for _, pid := range all {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		seen = append(seen, fmt.Sprintf("%d %s %q", pid, strings.TrimSpace(string(comm)), strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if dst, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && dst == "/dev/fuse" {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, fmt.Sprintf("processes of its csi-s3 container: %v", seen)
}

// pidsExited opens a pidfd for each pid now and returns a channel that receives the time the
// last of them exited. A pidfd reports the exit however soon after it is read: nothing is missed
// by polling.
func pidsExited(pids []int) (<-chan time.Time, error) {
	fds := make([]int, 0, len(pids))
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			for _, f := range fds {
				_ = unix.Close(f) // the open error is the one to report
			}
			return nil, fmt.Errorf("pidfd_open(%d): %w", pid, err)
		}
		fds = append(fds, fd)
	}
	ch := make(chan time.Time, 1)
	go func() {
		for _, fd := range fds {
			for {
				_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
				if err != unix.EINTR {
					break
				}
			}
			_ = unix.Close(fd) // read-only use
		}
		ch <- time.Now()
	}()
	return ch, nil
}

// mountID is the ID of the mount path is the root of, by statx: STATX_MNT_ID_UNIQUE where the
// kernel has it (6.8: never reused), else STATX_MNT_ID; kind says which ("unique", "reusable").
func mountID(path string) (id uint64, kind string, err error) {
	var st unix.Statx_t
	flags := unix.AT_STATX_DONT_SYNC | unix.AT_SYMLINK_NOFOLLOW
	if err := unix.Statx(unix.AT_FDCWD, path, flags, unix.STATX_MNT_ID_UNIQUE, &st); err != nil {
		return 0, "", fmt.Errorf("statx %s: %w", path, err)
	}
	if st.Mask&unix.STATX_MNT_ID_UNIQUE != 0 {
		return st.Mnt_id, "unique", nil
	}
	if err := unix.Statx(unix.AT_FDCWD, path, flags, unix.STATX_MNT_ID, &st); err != nil {
		return 0, "", fmt.Errorf("statx %s: %w", path, err)
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		return 0, "", fmt.Errorf("statx %s: the kernel gives no mount ID", path)
	}
	return st.Mnt_id, "reusable", nil
}

// restoredSeries and bridgedSeries are the agent's counters of successful replays and bridges.
var (
	restoredSeries = fmt.Sprintf("pvrescue_s3_restores_total{method=%q,result=\"success\"}", s3mount.MethodReplay)
	bridgedSeries  = fmt.Sprintf("pvrescue_s3_restores_total{method=%q,result=\"success\"}", s3mount.MethodBridge)
)

// agentRecord reads the running agent's dead-mounts-found and replays-restored counters.
func agentRecord(t testing.TB, e *env, when string) (*corev1.Pod, float64, float64) {
	t.Helper()
	agent, why := runningAgent(e)
	if agent == nil {
		t.Fatalf("%s: %s", when, why)
	}
	dead, restored, err := agentCounters(agent)
	if err != nil {
		t.Fatalf("%s: the agent's record: %v", when, err)
	}
	return agent, dead, restored
}

func agentCounters(agent *corev1.Pod) (dead, restored float64, err error) {
	url := "http://" + net.JoinHostPort(agent.Status.PodIP, "8080") + "/metrics"
	if dead, err = agentMetric(url, "pvrescue_s3_dead_mounts_found_total"); err != nil {
		return 0, 0, err
	}
	// Absent until the first restore. A bridge (the plugin did not answer) or a replay.
	replayed, _ := agentMetric(url, restoredSeries)
	bridged, _ := agentMetric(url, bridgedSeries)
	return dead, replayed + bridged, nil
}

// agentCounted waits (10 s: the counters follow the mount by a moment) until the same agent pod
// has counted at least one more dead mount and one more replay than before, and returns the
// increases.
func agentCounted(t testing.TB, e *env, before *corev1.Pod, dead0, restored0 float64, when string) (float64, float64) {
	t.Helper()
	var dead, restored float64
	var why string
	ok := pollEvery(100*time.Millisecond, 10*time.Second, func() bool {
		agent, w := runningAgent(e)
		if agent == nil || agent.UID != before.UID || !maps.Equal(restartCounts(agent), restartCounts(before)) {
			why = fmt.Sprintf("the agent pod changed or restarted (was %s %v): %s", before.Name, restartCounts(before), w)
			return false
		}
		d, r, err := agentCounters(agent)
		if err != nil {
			why = err.Error()
			return false
		}
		dead, restored = d-dead0, r-restored0
		why = fmt.Sprintf("%s +%v, %s and %s +%v", "pvrescue_s3_dead_mounts_found_total", dead, restoredSeries, bridgedSeries, restored)
		return dead >= 1 && restored >= 1
	})
	if !ok {
		t.Fatalf("%s: the target reads again, but the agent's record of it is missing 10 s later: %s", when, why)
	}
	return dead, restored
}

// pollEvery calls cond every interval until it holds (true) or timeout has passed (false).
func pollEvery(interval, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(interval)
	}
	return false
}

// benchDeathSpacing is the least time between two plugin deaths of the benchmark: the agent's
// default flap limit is 5 driver-down bridges of a PV per minute (config s3.bridgeFlapLimit,
// s3.bridgeFlapWindow); every 13 s stays under it.
const benchDeathSpacing = 13 * time.Second

// Environment of the window matrix of BenchmarkPluginPodDeleted (issue 34).
const (
	// BenchWindowPodsEnv lists the pod counts of the window matrix (default "1,20,100"; "" or "0"
	// skips it).
	BenchWindowPodsEnv = "PVRESCUE_BENCH_WINDOW_PODS"
	// BenchWindowDownEnv is how long the plugin is kept down in the "kept down" case (default 30s).
	BenchWindowDownEnv = "PVRESCUE_BENCH_WINDOW_DOWN"
	// BenchWindowAgentLogEnv, when set, names a file that receives the agent's log of every
	// window incident (from the incident's start until it settled): where a slow window went.
	BenchWindowAgentLogEnv = "PVRESCUE_BENCH_WINDOW_AGENT_LOG"
)

// WindowCase is one cell of the window matrix: an agent configuration, a way the plugin goes
// away, a number of pods reading and writing the volume; one incident.
type WindowCase struct {
	// Behaviour is "shipped" (the agent's defaults) or "baseline" (s3.driverDownBridgeAfter 10s:
	// the wait for a plugin that does not answer as shipped before issue 34); Config says it.
	Behaviour string `json:"behaviour"`
	Config    string `json:"config"`
	// Case is "deleted" (plugin pod deleted, the DaemonSet brings another), "down" (kept down
	// DownSeconds, then back) or "rolled" (the DaemonSet's template changed: kubectl rollout
	// restart).
	Case        string  `json:"case"`
	DownSeconds float64 `json:"downSeconds,omitempty"`
	Pods        int     `json:"pods"`
	// WindowMs, one per pod: from the death (the last of the plugin's s3fs exited, pidfd) to the
	// first read of the file at the pod's target on the node that gives it back (each target
	// polled every 10 ms from the death).
	WindowMs []float64 `json:"windowMs"`
	// ContainerWindowMs, one per pod: from the death to the first read of the file through the
	// pod's own container (/proc/<its init>/root/data, its mount namespace: what the application
	// sees, after the container remount), polled every 10 ms like the target.
	ContainerWindowMs []float64 `json:"containerWindowMs"`
	// PodWindowMs, one per pod that saw a failed operation: from the death to the pod's own first
	// successful read after its failures (its log's CRI timestamps; its load reads every 200 ms).
	PodWindowMs []float64 `json:"podWindowMs"`
	// FailedReads and FailedWrites are the pods' failed operations of the incident (all pods), of
	// Reads and Writes attempted from the death until the incident settled.
	FailedReads  int `json:"failedReads"`
	FailedWrites int `json:"failedWrites"`
	Reads        int `json:"reads"`
	Writes       int `json:"writes"`
	// Daemons are the agent's s3fs processes for the PV that started during the incident (/proc
	// scanned every 50 ms); DaemonRSSKB the largest resident set one of them reached.
	Daemons     int `json:"daemons"`
	DaemonRSSKB int `json:"daemonRssKB"`
	// DaemonsLeft are those still running when the incident settled (a retired bridge exits
	// once nothing holds its mount).
	DaemonsLeft int `json:"daemonsLeft"`
	// PluginBackMs: from the death to the new plugin pod registered; SettledMs: to every target
	// on the driver's own mount again (handed back, or replayed).
	PluginBackMs float64 `json:"pluginBackMs"`
	SettledMs    float64 `json:"settledMs"`
}

// WindowWrites is the server-side check of the load's writes after the whole matrix.
type WindowWrites struct {
	Acknowledged int      `json:"acknowledged"`
	Lost         int      `json:"lost"`
	LostExamples []string `json:"lostExamples,omitempty"`
}

// loadScript is each load pod's steady load: a read of app.txt every 200 ms (the shell's read
// built-in: no process per read) and, every fifth, an appended line of its own object
// (load-<pod>.txt) flushed with fsync (dd conv=fsync: s3fs uploads on fsync and reports its
// failure), so "W <n> ok" is a write acknowledged after it reached S3. It prints failures, each
// write's result, and the first good read after failures.
const loadScript = `i=0; bad=0
while true; do
  i=$((i+1)); x=
  if read -r x 2>/dev/null < /data/app.txt || [ -n "$x" ]; then
    if [ $bad = 1 ]; then echo "R $i ok"; bad=0; fi
  else
    echo "R $i fail"; bad=1
  fi
  if [ $((i % 5)) = 0 ]; then
    if echo "$HOSTNAME $i" | dd of=/data/load-$HOSTNAME.txt oflag=append conv=notrunc,fsync 2>/dev/null; then echo "W $i ok"; else echo "W $i fail"; fi
  fi
  sleep 0.2
done`

// windowMatrix runs the window matrix on the benchmark's cluster (l's plugin and PV): for each
// behaviour (shipped, then baseline) and pod count, the three ways the plugin goes away.
func windowMatrix(t *failRecorder, e *env, l *fieldLayout, res *PluginBenchResult, save func()) {
	if ablationSteps(t, e, l, res, save) {
		return
	}
	counts := []int{1, 20, 100}
	if v, ok := os.LookupEnv(BenchWindowPodsEnv); ok {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
				counts = append(counts, n)
			}
		}
	}
	if len(counts) == 0 {
		return
	}
	down := 30 * time.Second
	if v := os.Getenv(BenchWindowDownEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", BenchWindowDownEnv, v)
		}
		down = d
	}
	behaviours := []struct{ name, config, yaml string }{
		{"shipped", "the agent's defaults: s3.driverDownBridgeAfter 0s (bridge at once), s3.bridgeAfter 10s", ""},
		{"baseline", "s3.driverDownBridgeAfter 10s: the wait for a plugin that does not answer as shipped before issue 34", "  driverDownBridgeAfter: 10s\n"},
	}
	var pods []string
	current := ""
	for i, n := range counts {
		pods = ensureLoadPods(t, e, l, pods, n)
		order := behaviours
		if i%2 == 1 { // one configuration change per pod count: shipped, baseline | baseline, shipped | …
			order = []struct{ name, config, yaml string }{behaviours[1], behaviours[0]}
		}
		for _, b := range order {
			if b.yaml != current {
				setAgentS3Config(t, e, b.yaml)
				current = b.yaml
			}
			for _, kind := range []string{"deleted", "down", "rolled"} {
				c := windowIncident(t, e, l, kind, pods, down)
				c.Behaviour, c.Config = b.name, b.config
				res.Window = append(res.Window, c)
				save()
				t.Logf("window %s %s %d pods: window p50 %.0f ms max %.0f ms; failed reads %d/%d, writes %d/%d; daemons %d (RSS %d kB, %d left); plugin back %.0f ms, settled %.0f ms",
					b.name, kind, n, percentileMs(c.WindowMs, 50), percentileMs(c.WindowMs, 100), c.FailedReads, c.Reads, c.FailedWrites, c.Writes, c.Daemons, c.DaemonRSSKB, c.DaemonsLeft, c.PluginBackMs, c.SettledMs)
			}
		}
	}
	if current != "" {
		setAgentS3Config(t, e, "")
	}
	// No acknowledged write lost: every "W <n> ok" a load pod printed is in its object on the
	// S3 server's side (read from versitygw's directory, not through any mount).
	var w WindowWrites
	for _, p := range loadPodsNamed(t, e, l) {
		acked := loadLog(t, e, l.ns, p, time.Time{}, time.Now().Add(time.Hour))
		obj := bucketObject(e, l.dataDir+"load-"+p.Name+".txt")
		have := map[string]bool{}
		for _, line := range strings.Split(obj, "\n") {
			have[strings.TrimSpace(line)] = true
		}
		for _, ev := range acked {
			if ev.op != "W" || !ev.ok {
				continue
			}
			w.Acknowledged++
			if want := p.Name + " " + ev.n; !have[want] {
				w.Lost++
				if len(w.LostExamples) < 5 {
					w.LostExamples = append(w.LostExamples, want)
				}
			}
		}
	}
	res.WindowWrites = &w
	save()
	if w.Lost > 0 {
		t.Errorf("%d of %d acknowledged writes are not in their objects on the S3 server, e.g. %v", w.Lost, w.Acknowledged, w.LostExamples)
	}
}

func percentileMs(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// agentConfigAsInstalled is the agent ConfigMap's data before setAgentS3Config first changed it.
var agentConfigAsInstalled map[string]string

// setAgentS3Config sets the agent's ConfigMap to the installed one with lines added under s3:
// ("" for the installed one) and replaces the agent pod, so the DaemonSet's new pod reads it.
func setAgentS3Config(t testing.TB, e *env, lines string) {
	t.Helper()
	ctx := context.Background()
	cs := e.c.Client
	writeAgentS3Config(t, e, lines)
	old, why := runningAgent(e)
	if old == nil {
		t.Fatal(why)
	}
	if err := cs.CoreV1().Pods(stack.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the agent pod: %v", err)
	}
	waitFor(t, 2*time.Minute, "the agent's new pod with the changed configuration", func() (bool, string) {
		p, why := runningAgent(e)
		if p == nil || p.UID == old.UID {
			return false, why
		}
		for _, s := range p.Status.ContainerStatuses {
			if !s.Ready {
				return false, "not ready"
			}
		}
		return true, ""
	})
}

// restoreAgentConfigAtCleanup is setAgentS3Config(t, e, "") for a Cleanup function, where
// t.Context() (and so waitFor) has already ended: it polls with its own deadline.
func restoreAgentConfigAtCleanup(t testing.TB, e *env) {
	t.Helper()
	writeAgentS3Config(t, e, "")
	old, _ := runningAgent(e)
	if old != nil {
		if err := e.c.Client.CoreV1().Pods(stack.Namespace).Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete the agent pod %s to put the installed configuration back: %v", old.Name, err)
			return
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		p, _ := runningAgent(e)
		if p == nil || (old != nil && p.UID == old.UID) {
			continue
		}
		ready := len(p.Status.ContainerStatuses) > 0
		for _, s := range p.Status.ContainerStatuses {
			ready = ready && s.Ready
		}
		if ready {
			return
		}
	}
	t.Errorf("no ready agent pod with the installed configuration 2 min after putting it back: %s", framework.PodTable(e.c.Client, stack.Namespace))
}

// writeAgentS3Config writes the agent's ConfigMap as setAgentS3Config does, without replacing
// the agent pod: the agent reads it at its next start.
func writeAgentS3Config(t testing.TB, e *env, lines string) {
	t.Helper()
	ctx := context.Background()
	cs := e.c.Client
	ds, err := cs.AppsV1().DaemonSets(stack.Namespace).Get(ctx, stack.AgentDS, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the agent DaemonSet: %v", err)
	}
	var name string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.Name == "config" {
			name = v.ConfigMap.Name
		}
	}
	cm, err := cs.CoreV1().ConfigMaps(stack.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the agent's ConfigMap %q: %v", name, err)
	}
	if agentConfigAsInstalled == nil {
		agentConfigAsInstalled = maps.Clone(cm.Data)
	}
	changed := false
	for k, v := range agentConfigAsInstalled {
		cm.Data[k] = v
		if lines != "" && strings.Contains(v, "\ns3:\n") {
			cm.Data[k], changed = strings.Replace(v, "\ns3:\n", "\ns3:\n"+lines, 1), true
		}
	}
	if lines != "" && !changed {
		t.Fatalf("the agent's ConfigMap %s has no s3: section to add %q to", name, lines)
	}
	if _, err := cs.CoreV1().ConfigMaps(stack.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update the agent's ConfigMap: %v", err)
	}
}

// ensureLoadPods creates load pods "load-<i>" on l's claim until there are n, and returns their names.
func ensureLoadPods(t testing.TB, e *env, l *fieldLayout, have []string, n int) []string {
	t.Helper()
	ctx := context.Background()
	for i := len(have); i < n; i++ {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d", i)},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
				Containers: []corev1.Container{{Name: "load", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", loadScript},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				Volumes: dataVolume(),
			},
		}
		if _, err := e.c.Client.CoreV1().Pods(l.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create load pod %s: %v", p.Name, err)
		}
		have = append(have, p.Name)
	}
	for _, name := range have {
		framework.WaitPod(t, e.c.Client, l.ns, name, 3*time.Minute, "Running", framework.Running)
	}
	// Every pod has written once: its log holds a good write.
	waitFor(t, time.Minute, "every load pod's first acknowledged write", func() (bool, string) {
		for _, p := range loadPodsNamed(t, e, l) {
			ok := false
			for _, ev := range loadLog(t, e, l.ns, p, time.Time{}, time.Now().Add(time.Hour)) {
				ok = ok || (ev.op == "W" && ev.ok)
			}
			if !ok {
				return false, p.Name + " has no acknowledged write yet"
			}
		}
		return true, ""
	})
	return have
}

func loadPodsNamed(t testing.TB, e *env, l *fieldLayout) []*corev1.Pod {
	t.Helper()
	list, err := e.c.Client.CoreV1().Pods(l.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods in %s: %v", l.ns, err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Name, "load-") {
			out = append(out, &list.Items[i])
		}
	}
	return out
}

// loadEvent is one line of a load pod's log.
type loadEvent struct {
	at time.Time
	op string // R or W
	n  string
	ok bool
}

// loadLog reads a load pod's container log (through the API: kubelet serves it, each line
// timestamped by the container runtime as it arrived) between from and to.
func loadLog(t testing.TB, e *env, ns string, p *corev1.Pod, from, to time.Time) []loadEvent {
	t.Helper()
	b, err := e.c.Client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "load", Timestamps: true}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("the log of load pod %s/%s: %v", ns, p.Name, err)
	}
	var out []loadEvent
	for _, line := range strings.Split(string(b), "\n") {
		// <RFC3339Nano> <message>
		ts, msg, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(from) || at.After(to) {
			continue
		}
		f := strings.Split(strings.TrimSpace(msg), " ")
		if len(f) != 3 {
			continue
		}
		out = append(out, loadEvent{at: at, op: f[0], n: f[1], ok: f[2] == "ok"})
	}
	return out
}

// lastBenchDeath is when the benchmark's last plugin death began, of the repeated pod
// deletions and the window incidents alike (benchDeathSpacing): with a clock of their own, the
// first window incident came right after the last deletion, and the agent's flap limit (five
// driver-down bridges of the PV within a minute) rightly held its bridge back.
var lastBenchDeath time.Time

// windowIncident makes the plugin go away (kind) and measures the window, the pods' failed
// operations and the agent's daemons, until every target is on the driver's mount again.
func windowIncident(t *failRecorder, e *env, l *fieldLayout, kind string, names []string, down time.Duration) WindowCase {
	ctx := context.Background()
	c := WindowCase{Case: kind, Pods: len(names)}
	if kind == "down" {
		c.DownSeconds = down.Seconds()
	}
	old, err := l.plugin.Pod(ctx)
	if err != nil {
		t.Fatalf("window %s: %v", kind, err)
	}
	var pods []*corev1.Pod
	for _, p := range loadPodsNamed(t, e, l) {
		if slices.Contains(names, p.Name) {
			pods = append(pods, p)
		}
	}
	targets := make([]string, len(pods))
	inside := make([]string, len(pods)) // the file as each pod's container sees it
	// Each incident starts from a volume every pod reads. The previous incident's hand-back
	// just put 100 pods on the driver's new s3fs, whose first reads of the file can each take
	// over hostReads' 2 s on 2 shared cores (seen once, with the agent finding nothing dead):
	// that is the state before the incident settling, not a loss, so each read has 30 s.
	readsSoon := func(path string) bool {
		return pollEvery(100*time.Millisecond, 30*time.Second, func() bool { return hostReads(path, l.want) })
	}
	for i, p := range pods {
		targets[i] = podTarget(e, string(p.UID), l.pv)
		if !readsSoon(filepath.Join(targets[i], "app.txt")) {
			t.Fatalf("window %s: %s does not read before the incident: %s", kind, targets[i], describeStack(mountsAt(targets[i])))
		}
		pid, err := containerInit(p, "load")
		if err != nil {
			t.Fatalf("window %s: %v", kind, err)
		}
		inside[i] = fmt.Sprintf("/proc/%d/root/data/app.txt", pid)
		if !readsSoon(inside[i]) {
			t.Fatalf("window %s: pod %s does not read %s in its container before the incident", kind, p.Name, inside[i])
		}
	}
	dead, why := fuseDaemons(l.plugin)
	if len(dead) == 0 {
		t.Fatalf("window %s: the plugin runs no FUSE daemon: %s", kind, why)
	}
	exited, err := pidsExited(dead)
	if err != nil {
		t.Fatalf("window %s: %v", kind, err)
	}
	before := map[int]bool{}
	for _, p := range ourS3fs(l.pv) {
		before[p] = true
	}
	stopScan := make(chan struct{})
	scanned := make(chan struct{})
	started := map[int]bool{}
	go func() { // the agent's s3fs started during the incident, and their memory
		defer close(scanned)
		for {
			for _, p := range ourS3fs(l.pv) {
				if !before[p] {
					started[p] = true
					c.DaemonRSSKB = max(c.DaemonRSSKB, rssKB(p))
				}
			}
			select {
			case <-stopScan:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	time.Sleep(time.Until(lastBenchDeath.Add(benchDeathSpacing)))
	t0 := time.Now()
	lastBenchDeath = t0
	switch kind {
	case "deleted":
		err = e.c.Client.CoreV1().Pods(stack.CSINamespace).Delete(ctx, old.Name, metav1.DeleteOptions{})
	case "down":
		go func() { _ = l.plugin.Stop(ctx) }() // returns once the pod is gone; the death is timed by pidfd
	case "rolled":
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
		_, err = e.c.Client.AppsV1().DaemonSets(stack.CSINamespace).Patch(ctx, l.plugin.Name(), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	}
	if err != nil {
		t.Fatalf("window %s: %v", kind, err)
	}
	var death time.Time
	select {
	case death = <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("window %s: the plugin's s3fs %v still run 2m later", kind, dead)
	}
	// Each target, and each pod's view in its container, polled every 10 ms from the death until
	// it reads the file again.
	windows := make([]float64, len(targets))
	inContainer := make([]float64, len(targets))
	var wg sync.WaitGroup
	poll := func(path string, into *float64) {
		defer wg.Done()
		if pollEvery(10*time.Millisecond, 2*time.Minute, func() bool { return hostReads(path, l.want) }) {
			*into = float64(time.Since(death)) / float64(time.Millisecond)
		} else {
			*into = -1
		}
	}
	for i, tg := range targets {
		wg.Add(2)
		go poll(filepath.Join(tg, "app.txt"), &windows[i])
		go poll(inside[i], &inContainer[i])
	}
	wg.Wait()
	for i := range windows {
		if windows[i] < 0 {
			t.Fatalf("window %s: %s not readable within 2m of the death; stack %s", kind, targets[i], describeStack(mountsAt(targets[i])))
		}
		if inContainer[i] < 0 {
			// What the container holds at /data and what its target holds, and the agent's whole
			// log of the incident: a container left on a mount no pass asks about is otherwise
			// invisible after the fact.
			keepAgentLog(t, e, fmt.Sprintf("window %s, %d pod(s): death at %s; FAILED: pod %s not readable in its container",
				kind, len(pods), death.UTC().Format(time.RFC3339Nano), pods[i].Name), t0)
			t.Fatalf("window %s: pod %s not readable in its container (%s) within 2m of the death; its /data: %s; its target %s: %s",
				kind, pods[i].Name, inside[i], procMountsAt(inside[i], "/data"), targets[i], describeStack(mountsAt(targets[i])))
		}
	}
	c.WindowMs, c.ContainerWindowMs = windows, inContainer
	if kind == "down" {
		time.Sleep(time.Until(death.Add(down)))
		if err := l.plugin.Start(ctx); err != nil {
			t.Fatalf("window down: bring the plugin back: %v", err)
		}
	} else if _, err := l.plugin.WaitRegistered(ctx, old.UID); err != nil {
		t.Fatalf("window %s: the new plugin pod: %v", kind, err)
	}
	c.PluginBackMs = float64(time.Since(death)) / float64(time.Millisecond)
	waitFor(t, 90*time.Second, "window "+kind+": every target on the driver's mount again", func() (bool, string) {
		for _, tg := range targets {
			if onOurMount(tg, l.pv) || !hostReads(filepath.Join(tg, "app.txt"), l.want) {
				return false, tg + ": " + describeStack(mountsAt(tg))
			}
		}
		return true, ""
	})
	c.SettledMs = float64(time.Since(death)) / float64(time.Millisecond)
	time.Sleep(time.Second) // the pods' last operations on the old mount are in their logs
	close(stopScan)
	<-scanned
	c.Daemons = len(started)
	for p := range started {
		if pidRuns(p) {
			c.DaemonsLeft++
		}
	}
	end := time.Now()
	for _, p := range pods {
		var firstFail, goodAfter time.Time
		for _, ev := range loadLog(t, e, l.ns, p, t0, end) {
			switch {
			case ev.op == "R" && !ev.ok:
				c.FailedReads++
				if firstFail.IsZero() {
					firstFail = ev.at
				}
			case ev.op == "R" && ev.ok && !firstFail.IsZero() && goodAfter.IsZero():
				goodAfter = ev.at
			case ev.op == "W" && !ev.ok:
				c.FailedWrites++
			}
			if ev.op == "W" {
				c.Writes++
			}
		}
		if !goodAfter.IsZero() {
			c.PodWindowMs = append(c.PodWindowMs, float64(goodAfter.Sub(death))/float64(time.Millisecond))
		}
	}
	// Reads attempted: one per 200 ms per pod over the incident (the log holds failures only).
	c.Reads = int(end.Sub(t0)/(200*time.Millisecond)) * len(pods)
	keepAgentLog(t, e, fmt.Sprintf("window %s, %d pod(s): death at %s", kind, len(pods), death.UTC().Format(time.RFC3339Nano)), t0)
	time.Sleep(time.Second)
	return c
}

// rssKB is a process's resident set in kB (0 when gone).
func rssKB(pid int) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(procStatus(pid, "VmRSS"), " kB"))
	return n
}

// procStatus is the value of one field of /proc/<pid>/status, trimmed ("" when gone or absent).
func procStatus(pid int, field string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// procMountsAt is the mountinfo lines of the process whose file inside names
// (/proc/<pid>/root/...) with mount point mp, or why they cannot be read.
func procMountsAt(inside, mp string) string {
	proc, _, ok := strings.Cut(strings.TrimPrefix(inside, "/proc/"), "/")
	if !ok {
		return "no process in " + inside
	}
	b, err := os.ReadFile("/proc/" + proc + "/mountinfo")
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == mp {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "nothing mounted at " + mp
	}
	return strings.Join(lines, " | ")
}

// keepAgentLog appends the running agent's log since since to $PVRESCUE_BENCH_WINDOW_AGENT_LOG
// (when set), under a heading; a log that cannot be read is noted there, not failed on.
func keepAgentLog(t *failRecorder, e *env, heading string, since time.Time) {
	path := os.Getenv(BenchWindowAgentLogEnv)
	if path == "" {
		return
	}
	text := ""
	if a, why := runningAgent(e); a == nil {
		text = "no agent log: " + why + "\n"
	} else {
		st := metav1.NewTime(since.Add(-time.Second))
		b, err := e.c.Client.CoreV1().Pods(a.Namespace).GetLogs(a.Name, &corev1.PodLogOptions{SinceTime: &st, Timestamps: true}).DoRaw(context.Background())
		text = string(b)
		if err != nil {
			text = fmt.Sprintf("no agent log of pod %s: %v\n", a.Name, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("keep the agent log: %v", err)
		return
	}
	defer func() { _ = f.Close() }()
	if _, err := fmt.Fprintf(f, "=== %s\n%s\n", heading, text); err != nil {
		t.Errorf("keep the agent log: %v", err)
	}
}

// containerInit is the pid of the init process of a running container of p: the one of its
// processes (found by the container ID in /proc/<pid>/cgroup) whose parent is not in the
// container (the runtime's shim started it). Through /proc/<pid>/root the bench reads files as
// that container sees them; the load's short-lived children (sleep, dd) would vanish under it.
func containerInit(p *corev1.Pod, container string) (int, error) {
	id := ""
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			_, id, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	if id == "" {
		return 0, fmt.Errorf("pod %s: no ID for container %q in its status", p.Name, container)
	}
	inContainer := func(pid int) bool {
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		return err == nil && strings.Contains(string(cg), id)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil || !inContainer(pid) {
			continue
		}
		// PID 1 of the container's own PID namespace: a process exec'd into the container (the
		// injected liveness probe, every few seconds per pod) also has a parent outside it, and
		// is gone a moment later.
		if ppid, ok := parentPid(pid); ok && !inContainer(ppid) && namespacePid(pid) == 1 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("pod %s: no init process of container %s (%s) on the node", p.Name, container, id)
}

// namespacePid is a process's PID in its innermost PID namespace (the last NSpid field of
// /proc/<pid>/status), 0 when unknown.
func namespacePid(pid int) int {
	f := strings.Fields(procStatus(pid, "NSpid"))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[len(f)-1])
	return n
}

// parentPid reads a process's parent from /proc/<pid>/stat (the field after the command, which
// may itself hold spaces and parentheses).
func parentPid(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b)[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
