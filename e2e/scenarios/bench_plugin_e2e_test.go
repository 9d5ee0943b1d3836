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
	// pvrescue_s3_dead_mounts_found_total and of pvrescue_s3_restores_total{method="replay",
	// result="success"} on its /metrics.
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

		t0 := time.Now()
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
		time.Sleep(time.Second)
	}
	checkKubeletMounts(t, e, "after the runs")
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

// restoredSeries is the agent's counter of successful replays.
var restoredSeries = fmt.Sprintf("pvrescue_s3_restores_total{method=%q,result=\"success\"}", s3mount.MethodReplay)

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
	// Absent until the first restore.
	restored, _ = agentMetric(url, restoredSeries)
	return dead, restored, nil
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
		why = fmt.Sprintf("%s +%v, %s +%v", "pvrescue_s3_dead_mounts_found_total", dead, restoredSeries, restored)
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
