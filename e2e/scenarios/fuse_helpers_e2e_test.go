//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
)

// Helpers of the FUSE scenarios: mounts and processes as the host sees them, reads from
// containers, pod deletion with the check that nothing is left at the pod's targets.

// hostMounts parses (line by line, skipping what does not parse) the test process's /proc/self/mountinfo (the host's mount namespace).
func hostMounts() []mountinfo.Mount {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ms []mountinfo.Mount
	for _, line := range strings.Split(string(b), "\n") {
		if m, err := mountinfo.ParseLine(line); err == nil {
			ms = append(ms, m)
		}
	}
	return ms
}

// mountsAt lists the mounts stacked exactly at path, bottom first (by parent IDs, not line order).
func mountsAt(path string) []mountinfo.Mount {
	return mountinfo.Stack(hostMounts(), path, mountinfo.Mount.Place)
}

// mountsUnder lists the mounts whose mount point contains s (a pod UID).
func mountsUnder(s string) []string {
	var out []string
	for _, m := range hostMounts() {
		if strings.Contains(m.MountPoint, s) {
			out = append(out, m.MountPoint+" "+m.FSType+" "+m.Source)
		}
	}
	return out
}

func describeStack(ms []mountinfo.Mount) string {
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		parts = append(parts, m.FSType+" "+m.Source)
	}
	return "[" + strings.Join(parts, " | ") + "]"
}

// ourFSName is the fsname the agent gives its own s3fs (bridge) and, through binds, its mounts.
func ourFSName(pv string) string { return "pvrescue-s3:" + pv }

// onOurMount reports whether the top mount at path is the agent's own (its bridge s3fs or a bind of it).
func onOurMount(path, pv string) bool {
	ms := mountsAt(path)
	return len(ms) > 0 && ms[len(ms)-1].Source == ourFSName(pv)
}

// waitHandedBack waits (90 s at most) until the agent has handed a bridged volume back: the top
// mount at target is no longer the agent's bridge and the returned plugin runs an s3fs.
func waitHandedBack(t *testing.T, target, pv string, plugin *stack.CSI) {
	t.Helper()
	waitFor(t, 90*time.Second, "the volume to move back to the driver's mount", func() (bool, string) {
		st := mountsAt(target)
		if len(st) == 0 || st[len(st)-1].Source == ourFSName(pv) {
			return false, "top mount still ours: " + describeStack(st)
		}
		if len(pluginS3fs(plugin)) == 0 {
			return false, "the plugin runs no s3fs yet"
		}
		return true, ""
	})
}

// waitBridgeExited waits (30 s at most) until no s3fs of the agent serves pv: a retired bridge
// exits once the pod that used it is gone.
func waitBridgeExited(t *testing.T, pv string) {
	t.Helper()
	waitFor(t, 30*time.Second, "the retired bridge's s3fs to exit once the pod is gone", func() (bool, string) {
		if p := ourS3fs(pv); len(p) > 0 {
			return false, fmt.Sprintf("agent s3fs still running: %v", p)
		}
		return true, ""
	})
}

// procs lists host processes named comm (as /proc/<pid>/comm) matching keep.
func procs(comm string, keep func(pid int, ppid int, cmdline []byte) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so split after the last ')'.
		rest := st[bytes.LastIndexByte(st, ')')+1:]
		f := strings.Fields(string(rest))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if keep(pid, ppid, cmd) {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

// ourS3fs lists the agent's own s3fs processes for pv (bridges; visible here: hostPID agent or not,
// the host sees every process).
func ourS3fs(pv string) []int {
	return procs("s3fs", func(_, _ int, cmd []byte) bool {
		return bytes.Contains(cmd, []byte("fsname="+ourFSName(pv)))
	})
}

// pluginS3fs lists the live s3fs processes in the plugin pod's csi-s3 container (host pids;
// none when no plugin pod runs).
func pluginS3fs(p *stack.CSI) []int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pids, _ := p.ContainerPids(ctx, "s3fs")
	return pids
}

// readFrom reads path in a container and reports whether it holds want.
func readFrom(e *env, ns, pod, container, path, want string) (bool, string) {
	out, err := execIn(e, ns, pod, container, "cat", path)
	if err != nil || out != want {
		return false, fmt.Sprintf("%s/%s %s: %q %v", pod, container, path, out, err)
	}
	return true, ""
}

// reader is one container that must keep reading a file of a FUSE volume.
type reader struct {
	ns, pod, container, path, want string
}

func (r reader) String() string { return r.ns + "/" + r.pod + "/" + r.container }

// waitReads polls every reader in rounds until each has read its file once, and returns, per
// container (reader.String()), the time from t0 to its first good read (of its last file, when
// a container reads several). Readers are polled together, so one slow reader does not inflate
// the others' times.
func waitReads(t testing.TB, e *env, t0 time.Time, timeout time.Duration, what string, rs ...reader) map[string]time.Duration {
	t.Helper()
	at, why := pollReads(e, t0, timeout, rs...)
	if why != "" {
		t.Fatalf("timed out after %s waiting for %d read(s) %s: %s", timeout, len(rs), what, why)
	}
	return at
}

// rescueReads is waitReads after a rescue; when the reads fail, it first reports what the
// volume is instead (mounts of the node's disk under kubelet's directory, FUSE mounts only a
// plugin sees), then fails.
func rescueReads(t testing.TB, e *env, t0 time.Time, timeout time.Duration, what string, plugins []*stack.CSI, rs ...reader) map[string]time.Duration {
	t.Helper()
	at, why := pollReads(e, t0, timeout, rs...)
	if why != "" {
		checkKubeletMounts(t, e, "the reads fail")
		for _, p := range plugins {
			checkPluginMounts(t, e, p, "the reads fail")
		}
		t.Fatalf("timed out after %s waiting for %d read(s) %s (files put on the S3 server's side included): %s", timeout, len(rs), what, why)
	}
	return at
}

// pollReads polls the readers until each read its file once or timeout passes; it returns the
// times (see waitReads) and, on timeout, why the last reads failed.
func pollReads(e *env, t0 time.Time, timeout time.Duration, rs ...reader) (map[string]time.Duration, string) {
	at := map[string]time.Duration{}
	done := map[reader]bool{}
	var why []string
	ok := pollFor(timeout, func() bool {
		why = why[:0]
		for _, r := range rs {
			if done[r] {
				continue
			}
			if ok, w := readFrom(e, r.ns, r.pod, r.container, r.path, r.want); ok {
				done[r] = true
				at[r.String()] = time.Since(t0).Round(100 * time.Millisecond)
			} else {
				why = append(why, w)
			}
		}
		return len(why) == 0
	})
	if !ok {
		return at, strings.Join(why, "; ")
	}
	return at, ""
}

// keepReading reads every reader's file in rounds until done is closed and returns the failed reads.
func keepReading(e *env, done <-chan struct{}, rs ...reader) (rounds int, failures []string) {
	for {
		select {
		case <-done:
			return rounds, failures
		default:
		}
		for _, r := range rs {
			if ok, why := readFrom(e, r.ns, r.pod, r.container, r.path, r.want); !ok {
				failures = append(failures, time.Now().UTC().Format("15:04:05.000")+" "+why)
			}
		}
		rounds++
		time.Sleep(200 * time.Millisecond)
	}
}

// podRestarts returns the restart counts of a pod's containers.
func podRestarts(t testing.TB, e *env, ns, name string) map[string]int32 {
	t.Helper()
	p, err := e.c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return restartCounts(p)
}

// checkRestarts fails when any container of the pods restarted since before.
func checkRestarts(t testing.TB, e *env, ns string, before map[string]map[string]int32) map[string]map[string]int32 {
	t.Helper()
	now := map[string]map[string]int32{}
	for pod, counts := range before {
		now[pod] = podRestarts(t, e, ns, pod)
		for c, n := range counts {
			if now[pod][c] != n {
				t.Errorf("%s/%s container %s was restarted (%d → %d): %s; events: %v", ns, pod, c, n, now[pod][c],
					lastTermination(t, e, ns, pod, c), podEvents(t, e, ns, pod))
			}
		}
	}
	return now
}

// lastTermination says why container c of ns/pod last ended (exit code, reason, message).
func lastTermination(t testing.TB, e *env, ns, pod, c string) string {
	t.Helper()
	p, err := e.c.Client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("pod unreadable: %v", err)
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == c && st.LastTerminationState.Terminated != nil {
			term := st.LastTerminationState.Terminated
			return fmt.Sprintf("last ended at %s with exit code %d, reason %q, message %q", term.FinishedAt.UTC().Format(time.RFC3339), term.ExitCode, term.Reason, term.Message)
		}
	}
	return "no last termination recorded"
}

// podEvents lists the Events about ns/pod, for failure messages.
func podEvents(t testing.TB, e *env, ns, pod string) []string {
	t.Helper()
	list, err := e.c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return []string{"events unreadable: " + err.Error()}
	}
	out := make([]string, 0, len(list.Items))
	for _, ev := range list.Items {
		out = append(out, fmt.Sprintf("%s %s %s: %s", ev.LastTimestamp.UTC().Format(time.TimeOnly), ev.Type, ev.Reason, ev.Message))
	}
	return out
}

// deletePodGone deletes a pod, waits until the object is gone (within limit) and checks that no
// mount under its UID is left on the host. It returns the time to gone.
func deletePodGone(t testing.TB, e *env, ns, name string, limit time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	uid := string(p.UID)
	t0 := time.Now()
	if err := e.c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s/%s: %v", ns, name, err)
	}
	waitFor(t, limit, fmt.Sprintf("pod %s/%s (uid %s) to be gone after its deletion", ns, name, uid), func() (bool, string) {
		got, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && string(got.UID) != uid) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, framework.DescribePod(e.c.Client, got) + "\nmounts of the pod: " + strings.Join(mountsUnder(uid), "; ")
	})
	gone := time.Since(t0).Round(100 * time.Millisecond)
	checkPodLeftNothing(t, e, ns+"/"+name, uid)
	return gone
}

// checkPodLeftNothing checks, for a pod whose object is gone, that no mount under its UID is left
// on the host and that kubelet's pod directory goes within 30 s: kubelet removes it once nothing
// is mounted and no file is left in it (its orphan cleanup runs every 2 s and refuses files, e.g. a
// vol_data.json left by a TearDown that found the target still mounted).
func checkPodLeftNothing(t testing.TB, e *env, pod, uid string) {
	t.Helper()
	if left := mountsUnder(uid); len(left) > 0 {
		t.Errorf("pod %s (%s) is gone but mounts under its UID stay on the host:\n  %s", pod, uid, strings.Join(left, "\n  "))
	}
	podDir := filepath.Join(e.c.Opts.KubeletDir, "pods", uid)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testenv.Poll(ctx, 250*time.Millisecond, func(context.Context) (bool, error) {
		_, err := os.Stat(podDir)
		return os.IsNotExist(err), nil
	}); err != nil {
		t.Errorf("pod %s is gone but kubelet's directory %s stays 30 s later; files left: %v", pod, podDir, filesUnder(podDir))
	}
}

// filesUnder lists the non-directories under dir (what keeps kubelet from removing it).
func filesUnder(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// podTarget is kubelet's publish path of a CSI PV in a pod.
func podTarget(e *env, uid, pv string) string {
	return filepath.Join(e.c.Opts.KubeletDir, "pods", uid, "volumes", "kubernetes.io~csi", pv, "mount")
}

// labelledNS creates a namespace opted in to injection and deletes it (and waits for that) at cleanup.
func fuseNamespace(t testing.TB, e *env, name string, optIn bool) {
	t.Helper()
	var labels map[string]string
	if optIn {
		labels = map[string]string{contract.LabelInject: contract.LabelInjectEnabled}
	}
	framework.Namespace(t, e.c.Client, name, labels)
	t.Cleanup(func() { deleteNamespace(t, e, name) })
}

// deleteNamespace deletes a namespace and waits until it is gone (its pods included).
func deleteNamespace(t testing.TB, e *env, name string) {
	ctx := context.Background()
	cs := e.c.Client
	if err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("cleanup: delete namespace %s: %v", name, err)
		return
	}
	// The pods too, at once, rather than when the namespace controller gets to them (after
	// APIServerAway's restart it did ~35 s after the namespace's deletion). Best effort: the
	// namespace controller deletes whatever is left. After that restart kubelet's own view of
	// the pods lags as well: e2e-away-local's pod still ran 74 s after this delete (cold run
	// 18:05), and only kubelet can end it.
	one := int64(1)
	_ = cs.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &one}, metav1.ListOptions{})
	// Not waitFor: t.Context() is already cancelled when cleanups run. Four minutes: after the
	// API server restart of APIServerAway, kubelet's teardown backs off and a namespace went at
	// 2m10s in CI (the namespace controller's log: "Namespace has been deleted").
	wctx, cancel := context.WithTimeout(ctx, namespaceGoneWithin)
	defer cancel()
	var why, slow string
	t0 := time.Now()
	err := testenv.Poll(wctx, 250*time.Millisecond, func(context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		why = fmt.Sprintf("%v; pods:\n%s", err, framework.PodTable(cs, name))
		if slow == "" && time.Since(t0) > namespaceSlowAfter {
			slow = why
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("cleanup: namespace %s not gone after %s: %s", name, namespaceGoneWithin, why)
	} else if slow != "" {
		// Said, not failed: where a slow cleanup spends the suite's time.
		t.Logf("cleanup: namespace %s gone after %s; at %s: %s", name, time.Since(t0).Round(100*time.Millisecond), namespaceSlowAfter, slow)
	}
}

// namespaceGoneWithin bounds the wait for a test namespace to go at cleanup; one that takes longer
// than namespaceSlowAfter is logged with its pods at that time.
const (
	namespaceGoneWithin = 4 * time.Minute
	namespaceSlowAfter  = 15 * time.Second
)

// deletePV deletes a PV at cleanup (after its namespace, so after its claim).
func deletePVAtCleanup(t testing.TB, e *env, name string) {
	t.Cleanup(func() {
		if err := e.c.Client.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete PV %s: %v", name, err)
		}
	})
}

// sibling starts another instance of the test plugin (driver, layout) and removes it at cleanup.
func sibling(t testing.TB, e *env, driver, layout string) *stack.CSI {
	t.Helper()
	p := e.csi.Sibling(driver, layout)
	t.Cleanup(func() {
		if err := p.Remove(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("deploy the test plugin as %s (layout %s, DaemonSet %s/%s): %v", driver, layout, stack.CSINamespace, p.Name(), err)
	}
	return p
}

// runningAgent returns the running, ready agent pod not being deleted, or nil and why not.
func runningAgent(e *env) (*corev1.Pod, string) {
	pods, err := e.c.Client.CoreV1().Pods(stack.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + stack.AgentDS})
	if err != nil {
		return nil, err.Error()
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && framework.Running(p) {
			return p, ""
		}
	}
	return nil, "no running agent pod: " + framework.PodTable(e.c.Client, stack.Namespace)
}

// logAgentOnFailure registers a cleanup that, when the test failed, logs the running agent's log
// lines naming any of needles (PV, driver; the last 60): the agent pod may be gone by the time
// someone looks.
func logAgentOnFailure(t testing.TB, e *env, needles ...string) {
	pv := strings.Join(needles, "|")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		p, why := runningAgent(e)
		if p == nil {
			t.Logf("agent log for %s: %s", pv, why)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := framework.Logs(ctx, e.c.Client, stack.Namespace, p.Name, "agent")
		if err != nil {
			t.Logf("agent log for %s: %v", pv, err)
			return
		}
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			for _, n := range needles {
				if strings.Contains(l, n) {
					lines = append(lines, l)
					break
				}
			}
		}
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		t.Logf("agent %s log lines about %s (last %d):\n%s", p.Name, pv, len(lines), strings.Join(lines, "\n"))
	})
}

// teardownHelp reads pvrescue_s3_teardown_help_total by action from the running agent, and
// returns that agent pod. It fails when the agent or either series is missing.
func teardownHelp(t testing.TB, e *env) (*corev1.Pod, map[string]float64) {
	t.Helper()
	agent, why := runningAgent(e)
	if agent == nil {
		t.Fatal(why)
	}
	url := "http://" + net.JoinHostPort(agent.Status.PodIP, "8080") + "/metrics"
	got := map[string]float64{}
	for _, a := range []string{s3mount.TeardownEmptied, s3mount.TeardownFinished} {
		v, err := agentMetric(url, fmt.Sprintf("pvrescue_s3_teardown_help_total{action=%q}", a))
		if err != nil {
			t.Fatalf("the agent's teardown help counter: %v", err)
		}
		got[a] = v
	}
	return agent, got
}

// checkNoTeardownHelp fails when the agent helped kubelet tear down between two teardownHelp
// readings (before, after), or when the agent was replaced or restarted in between (its counter
// would start again at 0).
func checkNoTeardownHelp(t testing.TB, before, after *corev1.Pod, was, is map[string]float64, during string) {
	t.Helper()
	if before.UID != after.UID || !maps.Equal(restartCounts(before), restartCounts(after)) {
		t.Errorf("the agent changed during %s (pod %s %v → %s %v): its teardown help counter cannot be compared", during,
			before.Name, restartCounts(before), after.Name, restartCounts(after))
		return
	}
	if !maps.Equal(was, is) {
		t.Errorf("the agent helped kubelet's teardown during %s: pvrescue_s3_teardown_help_total %v → %v (a stack was left at a target, or kubelet's teardown had to be finished); the agent's log lines about the PV (logged on failure) say where", during, was, is)
	}
}
