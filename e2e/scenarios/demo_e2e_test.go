//go:build e2e

package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// TestDemo is `make demo`: the cluster up, then the README's rescues, narrated, in about three
// minutes. The full scenario suite is TestPVRescue (`make e2e`); the stories here are its
// LostLocalDisk, the plugin restart of LostFUSEMount and LostFUSEMountBridge, cut to what a
// newcomer watches, with evidence that does not race the agent's rescue (it restores within
// ~50 ms of a daemon's death): the killed daemons' pids gone, a different FUSE connection at the
// target, the agent's own counters and Events, and reads of data put into the bucket after the
// kill, which no dead mount can serve. With PVRESCUE_DEMO=1 every object stays for the operator
// (make demo-status); without it, each story's objects go with it.
func TestDemo(t *testing.T) {
	start := time.Now()
	e := newEnv(t, "suite", true)
	setup := time.Since(start)
	var took []string
	story := func(name, what string, run func(*testing.T)) {
		t0 := time.Now()
		ok := t.Run(name, func(t *testing.T) {
			t.Logf("=== %s", what)
			run(t)
		})
		took = append(took, fmt.Sprintf("%s %s (%s)", name, map[bool]string{true: "PASS", false: "FAIL"}[ok], time.Since(t0).Round(100*time.Millisecond)))
	}
	story("LostLocalDisk", "Story 1: a local disk is lost; the pod starts on a 512-byte fake the guard filters out; the disk comes back and the pod returns to it",
		func(t *testing.T) { demoLostDisk(t, e) })
	story("PluginRestart", "Story 2: the S3 CSI plugin restarts, killing its s3fs; the agent bridges at once while it does not answer, then hands the volume to the new plugin's mount, inside the running containers, no restart",
		func(t *testing.T) { demoPluginRestart(t, e) })
	story("PluginDownBridge", "Story 3: the S3 CSI plugin stays down; the agent bridges with its own s3fs; the plugin returns and gets the volume back",
		func(t *testing.T) { demoBridge(t, e) })
	t.Logf("DEMO: cluster up and pvrescue installed in %s; %s; total %s",
		setup.Round(100*time.Millisecond), strings.Join(took, ", "), time.Since(start).Round(100*time.Millisecond))
}

// demoLostDisk is the suite's lost-disk scenario (its tables, checks and timings), followed by
// the agent's Events that tell the same story.
func demoLostDisk(t *testing.T, e *env) {
	lostLocalDisk(t, e)
	if t.Failed() {
		return
	}
	// Events on a PV are written to the default namespace: list every namespace.
	var told []string
	waitFor(t, 30*time.Second, "the agent's Events of the lost disk ("+contract.ReasonFakeDeviceCreated+", "+contract.ReasonFakeDeviceRetired+")", func() (bool, string) {
		told = told[:0]
		var missing []string
		for _, reason := range []string{contract.ReasonFakeDeviceCreated, contract.ReasonFakeDeviceRetired} {
			evs := events(t, e, "", reason)
			if len(evs) == 0 {
				missing = append(missing, reason)
			}
			told = append(told, evs...)
		}
		told = append(told, events(t, e, localNS, contract.ReasonEvictedForRealDisk)...)
		return len(missing) == 0, "no Event " + strings.Join(missing, ", ")
	})
	t.Logf("the agent's Events:\n  %s", strings.Join(told, "\n  "))
}

// demoPluginRestart: a pod of four containers on an S3 volume (HostToContainer, None, subPath,
// readOnly); the plugin's pod is deleted (its s3fs dies with it) and the DaemonSet brings a new
// one; the agent replays kubelet's calls to the new plugin and puts the new mount into every
// running container.
func demoPluginRestart(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	demoNamespace(t, e, s3NS)
	putInBucket(t, e, "hello.txt", helloRoot)
	putInBucket(t, e, "sub/hello.txt", helloSub)
	s3Objects(t, e, s3NS, s3PV)
	if !framework.Demo() {
		deletePVAtCleanup(t, e, s3PV)
	}
	logAgentOnFailure(t, e, s3PV)
	if _, err := cs.CoreV1().Pods(s3NS).Create(ctx, s3Pod("s3app", e.c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	pod := framework.WaitPod(t, cs, s3NS, "s3app", 2*time.Minute, "Running", framework.Running)
	if pod.Annotations[contract.AnnotationStatus] == "" {
		t.Fatalf("the webhook did not mutate the pod (no %s annotation): %v", contract.AnnotationStatus, pod.Annotations)
	}
	readers := []reader{
		{s3NS, "s3app", "follower", "/data/hello.txt", helloRoot},
		{s3NS, "s3app", "pinned", "/data/hello.txt", helloRoot},
		{s3NS, "s3app", "sub", "/data/hello.txt", helloSub},
		{s3NS, "s3app", "ro", "/data/hello.txt", helloRoot},
	}
	waitReads(t, e, time.Now(), 30*time.Second, "before the failure", readers...)
	restarts := map[string]map[string]int32{"s3app": restartCounts(pod)}
	target := podTarget(e, string(pod.UID), s3PV)
	was := demoTop(t, target, "before the failure")
	wasStack := mustStackIdentity(t, target)
	daemons := demoDaemons(t, pluginS3fs(e.csi), "the plugin's s3fs before the failure")
	agent, counters := demoCounters(t, e, demoDeadFound, demoRestores(s3mount.MethodBridge), demoRestores(s3mount.MethodReplay))

	t.Logf("pods before the failure:\n%s", framework.PodTable(cs, s3NS))
	t.Logf("mounts at the pod's volume %s before the failure:\n%s", target, demoStackTable(target))
	t.Logf("the plugin's s3fs serving it: %s; the agent %s: %s", daemons, agent.Name, demoShowCounters(counters))

	t.Logf("deleting the CSI plugin's pod: its s3fs dies with it and the volume goes dead; the plugin does not answer, so the agent bridges at once with its own s3fs; the DaemonSet brings a new plugin pod and the agent hands the volume to its mount")
	window := demoWindowStart(t, pod, daemons, readers)
	window.measure()
	t0 := time.Now()
	oldPlugin, err := e.csi.Kill(ctx)
	if err != nil {
		t.Fatalf("delete the CSI plugin pod: %v", err)
	}
	// Only a live mount of the bucket can show these: put on the S3 server's side after the kill.
	const rescued = "put on the S3 server's side after the plugin's s3fs died\n"
	putInBucket(t, e, "rescued.txt", rescued)
	putInBucket(t, e, "sub/rescued.txt", rescued)
	if _, err := e.csi.WaitRegistered(ctx, oldPlugin); err != nil {
		t.Fatalf("the DaemonSet's new CSI plugin pod: %v", err)
	}
	rs := append([]reader{}, readers...)
	for _, r := range readers {
		r.path, r.want = filepath.Join(filepath.Dir(r.path), "rescued.txt"), rescued
		rs = append(rs, r)
	}
	at := rescueReads(t, e, t0, 90*time.Second, "again without a restart (files put after the kill included)", []*stack.CSI{e.csi}, rs...)
	saw := window.result(t)
	// The agent bridged while the plugin was away; the new plugin answers: the volume goes back
	// to the driver's own mount.
	waitHandedBack(t, target, s3PV, e.csi)

	// The volume died: the daemons that served it are gone, and another FUSE connection now
	// serves the target. None of this depends on when the agent acted.
	if alive := daemons.alive(); len(alive) > 0 {
		t.Errorf("the plugin pod is gone but its s3fs %v still runs: the kill did not kill the volume", alive)
	}
	// By unique mount IDs: the kernel hands mountinfo's IDs (and anonymous devices) out again as
	// soon as they are freed, and did (mount ID 94 → 94, device 0:68 → 0:181 in a CI run).
	now := demoTop(t, target, "after the restore")
	if nowStack := mustStackIdentity(t, target); nowStack == wasStack {
		t.Errorf("the target is served by the same mounts as before the kill (unique mount IDs %s; mount ID %d → %d, device %s → %s): the volume was not replaced",
			nowStack, was.ID, now.ID, was.Dev, now.Dev)
	}
	fresh := demoDaemons(t, pluginS3fs(e.csi), "the new plugin's s3fs")
	if both := fresh.same(daemons); len(both) > 0 {
		t.Errorf("the new plugin's s3fs %v are the old ones %v", both, daemons)
	}
	// The agent's own record: it found the mount dead, bridged it while the plugin did not
	// answer, and handed it back through the new plugin (a replay in its count), in Events on the pod.
	moved := []string{demoDeadFound, demoRestores(s3mount.MethodBridge), demoRestores(s3mount.MethodReplay)}
	reasons := []string{contract.ReasonMountBridged, contract.ReasonBridgeRetired, contract.ReasonContainersRemounted}
	after := demoCountersMoved(t, e, agent, counters, moved...)
	told := demoWaitEvents(t, e, s3NS, "s3app", reasons...)
	checkTopFUSE(t, target, "after the restore")
	checkKubeletMounts(t, e, "after the restore")
	checkPluginMounts(t, e, e.csi, "after the restore")
	checkReadOnly(t, e, s3NS, "s3app", "ro", "after the restore")
	writeReachesBucket(t, e, s3NS, "s3app", "pinned", "/data/after-restore.txt", "after-restore.txt", "after the restore")
	final := checkRestarts(t, e, s3NS, restarts)
	if d := len(mountsAt(target)); d > 2 {
		t.Errorf("%d mounts stacked at %s, want at most 2: %s", d, target, describeStack(mountsAt(target)))
	}

	t.Logf("pods after the rescue (RESTARTS 0):\n%s", framework.PodTable(cs, s3NS))
	t.Logf("mounts at the pod's volume after the rescue (another mount ID, another FUSE device):\n%s", demoStackTable(target))
	t.Logf("the plugin's s3fs: %s before (now gone), %s now; the agent: %s → %s", daemons, fresh, demoShowCounters(counters), demoShowCounters(after))
	t.Logf("the agent's Events on the pod:\n  %s", strings.Join(told, "\n  "))
	t.Logf("RESULT plugin restart: %s", saw)
	t.Logf("RESULT plugin restart: files put on the S3 server after the kill read in every container, timed from the plugin pod's delete request (its grace period and the new plugin's start included): follower (HostToContainer) %s, pinned (None) %s, sub (subPath) %s, ro (readOnly) %s; restarts %v → %v",
		at[s3NS+"/s3app/follower"], at[s3NS+"/s3app/pinned"], at[s3NS+"/s3app/sub"], at[s3NS+"/s3app/ro"], restarts["s3app"], final["s3app"])
}

// demoBridge: the ctrox layout's plugin (s3fs of bucket:/<prefix>/csi-fs at the target) is kept
// down; the agent bridges at once with its own s3fs (s3.driverDownBridgeAfter 0); the plugin comes back and the
// volume moves to the driver's own mount again. No container restarts throughout.
func demoBridge(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	l := &fieldLayout{
		name: "bridge", driver: "ch.ctrox.csi.s3-driver", layout: csitest.LayoutCtrox,
		ns: "e2e-fuse-bridge", pv: "e2e-fuse-bridge-pv", handle: s3Bucket + "/bridge",
		attrs: map[string]string{"bucket": s3Bucket, "prefix": "bridge", "mounter": "s3fs"},
		files: map[string]string{
			"bridge/csi-fs/app.txt": "bridged app data\n",
			"bridge/app.txt":        "DECOY: the prefix level, one above csi-fs\n",
		},
		want: "bridged app data\n", dataDir: "bridge/csi-fs/", src: s3Bucket + ":/bridge/csi-fs",
	}
	demoLayoutObjects(t, e, l)
	if _, err := cs.CoreV1().Pods(l.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: appContainers(e.c.BusyboxImage), Volumes: dataVolume(),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod in %s: %v", l.ns, err)
	}
	pod := framework.WaitPod(t, cs, l.ns, "app", 2*time.Minute, "Running", framework.Running)
	waitReads(t, e, time.Now(), 30*time.Second, "before the failure", l.readers("app")...)
	restarts := map[string]map[string]int32{"app": restartCounts(pod)}
	target := podTarget(e, string(pod.UID), l.pv)
	bridgeAfter := config.Default().S3.DriverDownBridgeAfter.Duration
	was := demoTop(t, target, "before the failure")
	wasStack := mustStackIdentity(t, target)
	daemons := demoDaemons(t, pluginS3fs(l.plugin), "the "+l.driver+" plugin's s3fs before the failure")
	agent, counters := demoCounters(t, e, demoDeadFound, demoRestores(s3mount.MethodBridge), demoRestores(s3mount.MethodReplay))

	t.Logf("pods before the failure:\n%s", framework.PodTable(cs, l.ns))
	t.Logf("mounts at the pod's volume %s before the failure (the driver's s3fs of %s):\n%s", target, l.src, demoStackTable(target))
	t.Logf("the plugin's s3fs serving it: %s; the agent %s: %s", daemons, agent.Name, demoShowCounters(counters))

	t.Logf("stopping the %s plugin and keeping it down: its s3fs dies; the driver does not answer, so the agent bridges with its own s3fs (s3.driverDownBridgeAfter %s)", l.driver, bridgeAfter)
	window := demoWindowStart(t, pod, daemons, l.readers("app"))
	window.measure()
	t0 := time.Now()
	if err := l.plugin.Stop(ctx); err != nil {
		t.Fatalf("stop the plugin's DaemonSet: %v", err)
	}
	// A failure while the plugin is down must not leave the pod's teardown without its driver.
	started := false
	t.Cleanup(func() {
		if !started {
			_ = l.plugin.Start(context.Background())
		}
	})
	const whileDown = "put on the S3 server's side while the plugin was down\n"
	putInBucket(t, e, l.dataDir+"while-down.txt", whileDown)
	at := rescueReads(t, e, t0, bridgeAfter+90*time.Second, "through the agent's bridge while the plugin is down", nil,
		append(l.readers("app"), reader{l.ns, "app", "app", "/data/while-down.txt", whileDown})...)
	saw := window.result(t)
	if alive := daemons.alive(); len(alive) > 0 {
		t.Errorf("the plugin is down but its s3fs %v still runs", alive)
	}
	ours := ourS3fs(l.pv)
	if len(ours) != 1 {
		t.Errorf("the app reads with the plugin down; want exactly one s3fs of the agent's (fsname %s), found %v", ourFSName(l.pv), ours)
	}
	bridged := demoTop(t, target, "while bridged")
	if !onOurMount(target, l.pv) {
		t.Errorf("the top mount at the target is not the agent's bridge: %s", describeStack(mountsAt(target)))
	}
	bridgedStack := mustStackIdentity(t, target)
	if bridgedStack == wasStack {
		t.Errorf("the bridge is the driver's dead mount again (unique mount IDs %s; device %s → %s)", bridgedStack, was.Dev, bridged.Dev)
	}
	writeReachesBucket(t, e, l.ns, "app", "app", "/data/bridged-write.txt", l.dataDir+"bridged-write.txt", "while bridged")
	checkKubeletMounts(t, e, "while bridged")
	whileBridged := demoCountersMoved(t, e, agent, counters, demoDeadFound, demoRestores(s3mount.MethodBridge))
	told := demoWaitEvents(t, e, l.ns, "app", contract.ReasonMountBridged)
	checkRestarts(t, e, l.ns, restarts)
	t.Logf("mounts at the pod's volume while bridged (the agent's s3fs, fsname %s, pid %v):\n%s", ourFSName(l.pv), ours, demoStackTable(target))
	t.Logf("the agent: %s → %s", demoShowCounters(counters), demoShowCounters(whileBridged))
	t.Logf("RESULT bridge: plugin down → %s", saw)
	t.Logf("RESULT bridge: plugin down → a file put on the S3 server while it was down reads through the agent's s3fs, timed from the stop request: app %s, pinned (None) %s (driverDownBridgeAfter %s); restarts 0",
		at[l.ns+"/app/app"], at[l.ns+"/app/pinned"], bridgeAfter)

	t.Logf("bringing the %s plugin back: the agent hands the volume back to the driver's own mount", l.driver)
	t1 := time.Now()
	if err := l.plugin.Start(ctx); err != nil {
		t.Fatalf("bring the plugin's pod back: %v", err)
	}
	started = true
	waitHandedBack(t, target, l.pv, l.plugin)
	back := time.Since(t1).Round(100 * time.Millisecond)
	const afterBack = "put on the S3 server's side after the hand-back\n"
	putInBucket(t, e, l.dataDir+"after-back.txt", afterBack)
	after := rescueReads(t, e, t1, 30*time.Second, "on the driver's mount again", []*stack.CSI{l.plugin},
		append(l.readers("app"), reader{l.ns, "app", "app", "/data/after-back.txt", afterBack})...)
	fresh := demoDaemons(t, pluginS3fs(l.plugin), "the returned plugin's s3fs")
	if both := fresh.same(daemons); len(both) > 0 {
		t.Errorf("the returned plugin's s3fs %v are the ones that died %v", both, daemons)
	}
	handed := demoTop(t, target, "after the hand-back")
	if handedStack := mustStackIdentity(t, target); handedStack == bridgedStack || handedStack == wasStack {
		t.Errorf("after the hand-back the target holds the bridge's mounts (%s) or the dead driver mount's (%s): unique mount IDs %s (device %s; bridge %s, dead %s)",
			bridgedStack, wasStack, handedStack, handed.Dev, bridged.Dev, was.Dev)
	}
	told = append(told, demoWaitEvents(t, e, l.ns, "app", contract.ReasonBridgeRetired)...)
	// The hand-back is a replay through the returned driver, in the agent's count.
	handedBack := demoCountersMoved(t, e, agent, whileBridged, demoRestores(s3mount.MethodReplay))
	checkTopFUSE(t, target, "after the hand-back")
	checkKubeletMounts(t, e, "after the hand-back")
	checkPluginMounts(t, e, l.plugin, "after the hand-back")
	writeReachesBucket(t, e, l.ns, "app", "pinned", "/data/after-back-write.txt", l.dataDir+"after-back-write.txt", "after the hand-back")
	if d := len(mountsAt(target)); d > 2 {
		t.Errorf("depth %d at the target after the hand-back: %s", d, describeStack(mountsAt(target)))
	}
	final := checkRestarts(t, e, l.ns, restarts)

	t.Logf("pods after the hand-back (RESTARTS 0):\n%s", framework.PodTable(cs, l.ns))
	t.Logf("mounts at the pod's volume after the hand-back (the driver's s3fs again):\n%s", demoStackTable(target))
	bridge := "has exited"
	if p := ourS3fs(l.pv); len(p) > 0 {
		bridge = fmt.Sprintf("%v runs until nothing uses it (the pod's binds go with the pod)", p)
	}
	t.Logf("the plugin's s3fs: %s before (gone), %s now; the retired bridge's s3fs %s", daemons, fresh, bridge)
	t.Logf("the agent: %s → %s", demoShowCounters(whileBridged), demoShowCounters(handedBack))
	t.Logf("the agent's Events on the pod:\n  %s", strings.Join(told, "\n  "))
	t.Logf("RESULT bridge retired: plugin back → volume on the driver's mount after %s (app reads %s, pinned %s); restarts %v → %v",
		back, after[l.ns+"/app/app"], after[l.ns+"/app/pinned"], restarts["app"], final["app"])
}

// demoNamespace creates an opted-in namespace; outside the demo it goes (with its pods) when the
// test ends, in the demo it stays for the operator.
func demoNamespace(t testing.TB, e *env, name string) {
	t.Helper()
	if framework.Demo() {
		framework.Namespace(t, e.c.Client, name, map[string]string{contract.LabelInject: contract.LabelInjectEnabled})
		return
	}
	fuseNamespace(t, e, name, true)
}

// demoLayoutObjects is layoutObjects, except that in the demo the plugin, namespace and PV stay
// for the operator.
func demoLayoutObjects(t testing.TB, e *env, l *fieldLayout) {
	t.Helper()
	if !framework.Demo() {
		layoutObjects(t, e, l)
		return
	}
	l.plugin = e.csi.Sibling(l.driver, l.layout)
	if err := l.plugin.Start(context.Background()); err != nil {
		t.Fatalf("deploy the test plugin as %s (layout %s, DaemonSet %s/%s): %v", l.driver, l.layout, stack.CSINamespace, l.plugin.Name(), err)
	}
	for name, content := range l.files {
		putInBucket(t, e, name, content)
	}
	demoNamespace(t, e, l.ns)
	s3Volume(t, e, s3Vol{ns: l.ns, pv: l.pv, driver: l.driver, handle: l.handle, attrs: l.attrs, stageSecret: l.stage})
	logAgentOnFailure(t, e, l.pv, l.driver)
}

// demoTop returns the top mount at path, failing the test when nothing is mounted there.
func demoTop(t testing.TB, path, when string) mountinfo.Mount {
	t.Helper()
	st := mountsAt(path)
	if len(st) == 0 {
		t.Fatalf("%s: nothing is mounted at %s", when, path)
	}
	return st[len(st)-1]
}

// demoStackTable lists the mounts stacked at path, bottom first: mount ID, FUSE device, type,
// source.
func demoStackTable(path string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-9s %-7s %-10s %s\n", "MOUNT-ID", "DEVICE", "TYPE", "SOURCE")
	for _, m := range mountsAt(path) {
		fmt.Fprintf(&b, "  %-9d %-7s %-10s %s\n", m.ID, m.Dev, m.FSType, m.Source)
	}
	return b.String()
}

// demoProcs are processes named by pid and start time (clock ticks after boot), so a pid the
// kernel hands out again is not taken for the process that had it.
type demoProcs map[int]string

// demoDaemons records pids with their start times, failing the test when there are none.
func demoDaemons(t testing.TB, pids []int, what string) demoProcs {
	t.Helper()
	if len(pids) == 0 {
		t.Fatalf("%s: none runs", what)
	}
	p := demoProcs{}
	for _, pid := range pids {
		p[pid] = demoStartTime(pid)
	}
	return p
}

// alive lists the recorded processes that still run (same pid, same start time, not a zombie).
func (p demoProcs) alive() []int {
	var out []int
	for pid, start := range p {
		if start != "" && demoStartTime(pid) == start {
			out = append(out, pid)
		}
	}
	return out
}

// same lists the processes of p that are also in q (same pid and start time).
func (p demoProcs) same(q demoProcs) []int {
	var out []int
	for pid, start := range p {
		if start != "" && q[pid] == start {
			out = append(out, pid)
		}
	}
	return out
}

func (p demoProcs) String() string {
	pids := make([]int, 0, len(p))
	for pid := range p {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return fmt.Sprintf("s3fs pids %v", pids)
}

// demoStartTime is field 22 of /proc/<pid>/stat ("" when the process is gone or a zombie).
func demoStartTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ppid … : comm may hold spaces, so count fields after the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// The agent's counters the demo reads.
const demoDeadFound = "pvrescue_s3_dead_mounts_found_total"

func demoRestores(method string) string {
	return fmt.Sprintf("pvrescue_s3_restores_total{method=%q,result=\"success\"}", method)
}

// demoCounters reads the named series from the running agent's /metrics (a series not yet
// written counts 0) and returns that agent pod.
func demoCounters(t testing.TB, e *env, names ...string) (*corev1.Pod, map[string]float64) {
	t.Helper()
	agent, why := runningAgent(e)
	if agent == nil {
		t.Fatal(why)
	}
	got, err := demoRead(agent, names)
	if err != nil {
		t.Fatal(err)
	}
	return agent, got
}

func demoRead(agent *corev1.Pod, names []string) (map[string]float64, error) {
	url := "http://" + net.JoinHostPort(agent.Status.PodIP, "8080") + "/metrics"
	ok, body := httpGet(url)
	if !ok {
		return nil, fmt.Errorf("read the agent's metrics at %s: %s", url, body)
	}
	got := map[string]float64{}
	for _, n := range names {
		got[n] = 0
	}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if _, want := got[f[0]]; want {
				v, err := strconv.ParseFloat(f[1], 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", line, err)
				}
				got[f[0]] = v
			}
		}
	}
	return got, nil
}

// demoCountersMoved waits (30 s) until each of the named counters (all of before's when none
// are named) has grown since before, read from the same agent pod, and returns the new values.
func demoCountersMoved(t testing.TB, e *env, agent *corev1.Pod, before map[string]float64, names ...string) map[string]float64 {
	t.Helper()
	if len(names) == 0 {
		for n := range before {
			names = append(names, n)
		}
	}
	var now map[string]float64
	waitFor(t, 30*time.Second, "the agent's record of the death and the restore ("+strings.Join(names, ", ")+")", func() (bool, string) {
		cur, why := runningAgent(e)
		if cur == nil {
			return false, why
		}
		if cur.UID != agent.UID {
			return false, fmt.Sprintf("the agent pod changed (%s → %s): its counters cannot be compared", agent.Name, cur.Name)
		}
		var err error
		all := make([]string, 0, len(before))
		for n := range before {
			all = append(all, n)
		}
		if now, err = demoRead(cur, all); err != nil {
			return false, err.Error()
		}
		for _, n := range names {
			if now[n] <= before[n] {
				return false, fmt.Sprintf("%s still %v", n, now[n])
			}
		}
		return true, ""
	})
	return now
}

func demoShowCounters(c map[string]float64) string {
	var parts []string
	for _, n := range []string{demoDeadFound, demoRestores(s3mount.MethodReplay), demoRestores(s3mount.MethodBridge)} {
		if v, ok := c[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %v", n, v))
		}
	}
	return strings.Join(parts, ", ")
}

// demoWaitEvents waits (30 s) until the pod has an Event of each reason and returns the pod's
// Events of those reasons.
func demoWaitEvents(t testing.TB, e *env, ns, pod string, reasons ...string) []string {
	t.Helper()
	var out []string
	waitFor(t, 30*time.Second, fmt.Sprintf("the agent's Events %v on %s/%s", reasons, ns, pod), func() (bool, string) {
		list, err := e.c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err.Error()
		}
		out = out[:0]
		seen := map[string]bool{}
		for _, ev := range list.Items {
			for _, r := range reasons {
				if ev.Reason == r {
					seen[r] = true
					out = append(out, fmt.Sprintf("%s %s %s: %s", ev.LastTimestamp.UTC().Format(time.TimeOnly), ev.Type, ev.Reason, ev.Message))
				}
			}
		}
		for _, r := range reasons {
			if !seen[r] {
				return false, "no Event " + r + " yet; the pod's Events: " + strings.Join(podEvents(t, e, ns, pod), "; ")
			}
		}
		return true, ""
	})
	return out
}

// demoWindow measures what make bench's window matrix measures, for the demo's pod: from the
// death of the FUSE daemons serving the volume (the last of them exited, by pidfd) to the first
// good read of each container's file through that container's own mount namespace
// (/proc/<its init>/root/…: what the application sees), each container read every 10 ms; and the
// reads in that span that failed.
type demoWindow struct {
	exited <-chan time.Time
	rs     []reader
	paths  []string
	// Set by measure's goroutine, read after done is closed.
	done    chan struct{}
	death   time.Time
	windows []time.Duration
	failed  []int
	err     error
}

// demoWindowStart opens pidfds on daemons and finds each reader's container before the failure
// is caused.
func demoWindowStart(t testing.TB, pod *corev1.Pod, daemons demoProcs, rs []reader) *demoWindow {
	t.Helper()
	pids := make([]int, 0, len(daemons))
	for pid := range daemons {
		pids = append(pids, pid)
	}
	exited, err := pidsExited(pids)
	if err != nil {
		t.Fatalf("watch the daemons %v: %v", pids, err)
	}
	w := &demoWindow{exited: exited, rs: rs}
	for _, r := range rs {
		init, err := containerInit(pod, r.container)
		if err != nil {
			t.Fatal(err)
		}
		w.paths = append(w.paths, fmt.Sprintf("/proc/%d/root%s", init, r.path))
	}
	return w
}

// measure starts reading: it waits (in the background) for the death, then reads every
// container's file every 10 ms until it gives it back (90 s at most); call it before causing the
// failure (the calls that cause it return only once the plugin's pod is gone), and result after.
func (w *demoWindow) measure() {
	w.done = make(chan struct{})
	w.windows = make([]time.Duration, len(w.paths))
	w.failed = make([]int, len(w.paths))
	go func() {
		defer close(w.done)
		select {
		case w.death = <-w.exited:
		case <-time.After(2 * time.Minute):
			w.err = errors.New("the daemons serving the volume still ran 2 min after the failure was caused")
			return
		}
		var wg sync.WaitGroup
		for i := range w.paths {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.windows[i] = -1
				for time.Since(w.death) < 90*time.Second {
					if hostReads(w.paths[i], w.rs[i].want) {
						w.windows[i] = time.Since(w.death)
						return
					}
					w.failed[i]++
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
	}()
}

// result waits for the measurement and returns its line: each container's window and failed
// reads.
func (w *demoWindow) result(t testing.TB) string {
	t.Helper()
	<-w.done
	if w.err != nil {
		t.Fatal(w.err)
	}
	parts := make([]string, len(w.rs))
	total := 0
	for i, r := range w.rs {
		if w.windows[i] < 0 {
			t.Errorf("container %s did not read %s within 90 s of the daemons' death", r, r.path)
		}
		total += w.failed[i]
		parts[i] = fmt.Sprintf("%s %s (%d failed reads)", r.container, w.windows[i].Round(time.Millisecond), w.failed[i])
	}
	return fmt.Sprintf("the window the pod saw, from the daemons' death to the first good read in each container (read every 10 ms through the container's own mount namespace, as make bench measures it): %s; %d failed reads in all",
		strings.Join(parts, ", "), total)
}
