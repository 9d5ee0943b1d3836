//go:build node

package s3mount_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/nodeagenttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// The survival test runs the agent as a separate process (this test binary again, role
// "agent"), under a "shim" (role "shim") that, like containerd's shim, is a child subreaper and
// reaps whatever is reparented to it.
const roleEnv = "PVRESCUE_S3_NODETEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "shim":
		os.Exit(runShim())
	case "agent":
		os.Exit(runAgent())
	case "cgview":
		os.Exit(runCgroupView())
	}
	os.Exit(m.Run())
}

// agentSpec is what the agent process needs: its directories, the objects of its fake view, and
// a file whose appearance lets it start (after the test moved it into its "container" cgroup).
type agentSpec struct {
	Kubelet, State, BridgeCgroup, GoFile string
	PV                                   *corev1.PersistentVolume
	PVC                                  *corev1.PersistentVolumeClaim
	Pod                                  *corev1.Pod
	Secret                               *corev1.Secret
	StorageClass                         *storagev1.StorageClass
}

func (s agentSpec) view() *nodeagenttest.FakeView {
	v := nodeagenttest.NewFakeView()
	v.Set(s.PV, s.PVC, s.Pod, s.Secret, s.StorageClass)
	return v
}

func (s agentSpec) deps(view nodeagent.ClusterView, rec *s3mounttest.Events) nodeagent.Deps {
	cfg := config.Default()
	cfg.KubeletDir, cfg.StateDir = s.Kubelet, s.State
	cfg.S3.CheckInterval = metav1.Duration{Duration: 200 * time.Millisecond}
	cfg.S3.StatfsTimeout = metav1.Duration{Duration: time.Second}
	cfg.S3.BridgeAfter = metav1.Duration{}
	return nodeagent.Deps{NodeName: nodeName, Config: cfg, Client: fake.NewClientset(), View: view, Recorder: rec.Recorder,
		Registerer: prometheus.NewRegistry(), Clock: clock.RealClock{}}
}

func (s agentSpec) options() s3mount.Options {
	return s3mount.Options{BackoffInitial: 300 * time.Millisecond, BackoffMax: 2 * time.Second, MountTimeout: 30 * time.Second,
		KillGrace: 2 * time.Second, BridgeCgroup: s.BridgeCgroup}
}

// runShim becomes a child subreaper, starts the agent, prints its pid, and reaps until killed.
func runShim() int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "shim: subreaper:", err)
		return 1
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=agent")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "shim: start agent:", err)
		return 1
	}
	fmt.Println(cmd.Process.Pid)
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, 0, nil); errors.Is(err, unix.ECHILD) {
			time.Sleep(20 * time.Millisecond) // orphans may still be reparented to us
		}
	}
}

// runAgent runs a restorer on the real node against a fake view until it is killed.
func runAgent() int {
	var spec agentSpec
	data, err := os.ReadFile(os.Getenv("PVRESCUE_S3_NODETEST_SPEC"))
	if err == nil {
		err = json.Unmarshal(data, &spec)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent: spec:", err)
		return 1
	}
	for {
		if _, err := os.Stat(spec.GoFile); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, "agent:", prefix, args) }, funcr.Options{})
	r, err := s3mount.New(spec.deps(spec.view(), s3mounttest.NewEvents()), s3mount.NewOS(), spec.options())
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(logr.NewContext(context.Background(), log), syscall.SIGTERM)
	defer cancel()
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 1
	}
	return 0
}

// The agent's container ends (its cgroup's processes killed as runc kills them) while a bridge
// serves a pod: the bridge's s3fs, started detached into a cgroup of its own, keeps serving;
// a new agent adopts it (no second s3fs, no second bind) and retires it cleanly when the pod
// goes: unmounted, exited, reaped by its new parent (the shim), cgroup and record removed.
func TestNodeBridgeSurvivesAgentContainer(t *testing.T) {
	e := newNodeEnv(t)
	e.volume("pv-s", nil, false)
	pod := e.pod("app-s", "pv-s")
	target, driverProc := e.publish(pod, "pv-s")
	must(t, os.WriteFile(filepath.Join(target, "before.txt"), []byte("written before\n"), 0o644))

	top := fmt.Sprintf("pvrescue-nodetest-%d", os.Getpid())
	cgroups := s3fs.HostCgroups{ProcDir: "/proc/self"}
	spec := agentSpec{Kubelet: e.kubelet, State: e.state, BridgeCgroup: top + "/s3", GoFile: filepath.Join(e.dir, "go")}
	ctx := context.Background()
	var err error
	spec.PV, err = e.client.CoreV1().PersistentVolumes().Get(ctx, "pv-s", metav1.GetOptions{})
	must(t, err)
	spec.PVC, err = e.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "pv-s", metav1.GetOptions{})
	must(t, err)
	spec.Secret, err = e.client.CoreV1().Secrets(ns).Get(ctx, "s3-creds", metav1.GetOptions{})
	must(t, err)
	spec.StorageClass, err = e.client.StorageV1().StorageClasses().Get(ctx, "s3", metav1.GetOptions{})
	must(t, err)
	spec.Pod = pod
	specFile := filepath.Join(e.dir, "agent.json")
	data, _ := json.Marshal(spec)
	must(t, os.WriteFile(specFile, data, 0o600))

	// The shim, then the agent under it, moved into the "container" cgroup before it starts.
	shim := exec.Command(os.Args[0], "-test.run=^$")
	shim.Env = append(os.Environ(), roleEnv+"=shim", "PVRESCUE_S3_NODETEST_SPEC="+specFile)
	shim.Stderr = os.Stderr
	out, err := shim.StdoutPipe()
	must(t, err)
	must(t, shim.Start())
	t.Cleanup(func() { _ = shim.Process.Kill(); _ = shim.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	must(t, err)
	agentPid, err := strconv.Atoi(strings.TrimSpace(line))
	must(t, err)
	ctrGroup := top + "/agent"
	must(t, cgroups.Place(agentPid, ctrGroup))
	t.Cleanup(func() {
		for _, g := range []string{ctrGroup, top + "/s3", top} {
			_ = cgroups.Remove(g)
		}
	})
	must(t, os.WriteFile(spec.GoFile, nil, 0o600))

	must(t, driverProc.Signal(syscall.SIGKILL))
	waitFor(t, 30*time.Second, "target bridged by the agent process", func() bool {
		var st unix.Statfs_t
		return unix.Statfs(target, &st) == nil && len(stackAt(target)) == 2
	})
	must(t, os.WriteFile(filepath.Join(target, "bridged.txt"), []byte("through the bridge\n"), 0o644))
	var rec s3fs.BridgeRecord
	data, err = os.ReadFile(filepath.Join(e.state, "s3", "bridges", "pv-s.json"))
	must(t, err)
	must(t, json.Unmarshal(data, &rec))
	s3fsPid := rec.Proc.Pid
	if want := s3fs.BridgeCgroup(top+"/s3", "pv-s", s3fsPid); rec.Cgroup != want {
		t.Fatalf("bridge record cgroup %q, want %q", rec.Cgroup, want)
	}
	if cg := procCgroups(t, s3fsPid); !strings.Contains(cg, rec.Cgroup) || strings.Contains(cg, ctrGroup) {
		t.Fatalf("s3fs %d cgroups:\n%s\nwant %s on every hierarchy, not %s", s3fsPid, cg, rec.Cgroup, ctrGroup)
	}

	// The container ends: kill every process of its cgroup until none is left, then remove the
	// cgroup (runc's destroy; it fails while any process is left in it).
	killed := killCgroup(t, ctrGroup)
	if len(killed) != 1 || killed[0] != agentPid {
		t.Errorf("killed %v in the container cgroup, want only the agent %d", killed, agentPid)
	}
	must(t, cgroups.Remove(ctrGroup))
	waitFor(t, 5*time.Second, "agent gone", func() bool { return !alive(agentPid) })
	if !alive(s3fsPid) {
		t.Fatalf("bridge s3fs %d died with the agent's cgroup", s3fsPid)
	}
	if b, err := os.ReadFile(filepath.Join(target, "bridged.txt")); err != nil || string(b) != "through the bridge\n" {
		t.Fatalf("bridge unreadable after the agent container ended: %q, %v", b, err)
	}
	if pp := ppid(t, s3fsPid); pp != shim.Process.Pid {
		t.Errorf("s3fs parent after the agent died: %d, want the shim %d", pp, shim.Process.Pid)
	}

	// A new agent (in this test process) adopts the bridge.
	view := spec.view()
	r, err := s3mount.New(spec.deps(view, s3mounttest.NewEvents()), s3mount.NewOS(), spec.options())
	must(t, err)
	actx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- r.Run(actx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("agent: %v", err)
		}
	})
	time.Sleep(time.Second) // five check intervals: it must not re-bridge or stack
	if n := len(stackAt(target)); n != 2 {
		t.Errorf("target stack after adoption: %d, want 2", n)
	}
	if pids := testenv.S3fsPIDs(e.dir); len(pids) != 1 || pids[0] != s3fsPid {
		t.Errorf("s3fs after adoption: %v, want only the adopted %d", pids, s3fsPid)
	}
	var g dto.Metric
	must(t, r.Metrics().BridgesActive.Write(&g))
	if g.GetGauge().GetValue() != 1 {
		t.Errorf("bridges active after adoption: %v, want 1", g.GetGauge().GetValue())
	}
	if pp := ppid(t, s3fsPid); pp == os.Getpid() {
		t.Errorf("adopted s3fs is the new agent's child")
	}

	// The pod goes: the adopted bridge retires; our bind goes and the driver's dead mount stays
	// for the driver's NodeUnpublish.
	view.DeletePod(ns, pod.Name)
	waitFor(t, 15*time.Second, "our bind removed, the driver's mount left, bridge gone", func() bool {
		st := stackAt(target)
		if len(st) != 1 || alive(s3fsPid) {
			return false
		}
		_, ours := stack.PVFromFSName(st[0].Source)
		return !ours
	})
	must(t, unix.Unmount(target, 0)) // kubelet's teardown: the driver's plain umount
	// Record and cgroup go once the process has exited and been reaped (by the shim).
	waitFor(t, 5*time.Second, "bridge record and cgroup removed", func() bool {
		if _, err := os.Stat(filepath.Join(e.state, "s3", "bridges", "pv-s.json")); !errors.Is(err, os.ErrNotExist) {
			return false
		}
		for _, dir := range s3fs.CgroupDirs(mountTable(), "/", rec.Cgroup) {
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				return false
			}
		}
		return true
	})
	if n := len(stackAt(e.bridgeDir("pv-s"))); n != 0 {
		t.Errorf("bridge mounts left: %d", n)
	}
}

// alive: the process exists and is not a zombie (a zombie would mean nobody reaps it).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, state, err := s3fs.ParseProcStat(string(b))
	if err == nil && state == "Z" {
		return true // exists; callers waiting for it to go keep waiting until it is reaped
	}
	return err == nil
}

func ppid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(t, err)
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+1:])
	n, err := strconv.Atoi(f[1])
	must(t, err)
	return n
}

func procCgroups(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	must(t, err)
	return string(b)
}

// killCgroup SIGKILLs every process of group (in the devices hierarchy, as runc's
// signalAllProcesses reads it on cgroup v1; the unified one on v2) until it is empty.
func killCgroup(t *testing.T, group string) []int {
	t.Helper()
	procs := ""
	for _, dir := range s3fs.CgroupDirs(mountTable(), "/", group) {
		if strings.Contains(dir, "/devices/") || procs == "" {
			procs = filepath.Join(dir, "cgroup.procs")
		}
	}
	var killed []int
	waitFor(t, 10*time.Second, "container cgroup empty", func() bool {
		b, err := os.ReadFile(procs)
		must(t, err)
		pids := strings.Fields(string(b))
		for _, p := range pids {
			pid, _ := strconv.Atoi(p)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed = appendUnique(killed, pid)
		}
		return len(pids) == 0
	})
	return killed
}

func appendUnique(s []int, v int) []int {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// runCgroupView runs in a mount namespace of its own (unshare -m) and makes it look like a
// container's on cgroup v1: each hierarchy at /sys/fs/cgroup/<name> shows only the group
// $PVRESCUE_S3_NODETEST_CTR. Then it places $PVRESCUE_S3_NODETEST_PID into
// $PVRESCUE_S3_NODETEST_GROUP with /proc/1 unreachable, as HostCgroups must from such a container.
func runCgroupView() int {
	ctr, group, mountDir := os.Getenv("PVRESCUE_S3_NODETEST_CTR"), os.Getenv("PVRESCUE_S3_NODETEST_GROUP"), os.Getenv("PVRESCUE_S3_NODETEST_MOUNTDIR")
	pid, err := strconv.Atoi(os.Getenv("PVRESCUE_S3_NODETEST_PID"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cgview:", err)
		return 1
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cgview:", err)
		return 1
	}
	for _, m := range s3fs.ParseCgroupMounts(string(data)) {
		if err := unix.Mount(filepath.Join(m.MountPoint, ctr), m.MountPoint, "", unix.MS_BIND, ""); err != nil {
			fmt.Fprintln(os.Stderr, "cgview: bind", m.MountPoint, err)
			return 1
		}
	}
	c := s3fs.HostCgroups{ProcDir: "/proc/no-such-process", MountDir: mountDir}
	if err := c.Place(pid, group); err != nil {
		fmt.Fprintln(os.Stderr, "cgview: place:", err)
		return 1
	}
	if err := c.Place(pid, group); err != nil { // again: the mounts are reused
		fmt.Fprintln(os.Stderr, "cgview: place again:", err)
		return 1
	}
	return 0
}

// From a cgroup v1 container's view (only its own cgroup visible at /sys/fs/cgroup/*, init's
// /proc unreachable), HostCgroups still moves a process into a group at the hierarchies' roots,
// outside the "container" cgroup, by mounting the hierarchies afresh.
func TestNodeHostCgroupsFromAContainerView(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "unshare", "apt-get install util-linux")
	top := fmt.Sprintf("pvrescue-cgview-%d", os.Getpid())
	self := s3fs.HostCgroups{ProcDir: "/proc/self"}
	sleeper := exec.Command("sleep", "60")
	must(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	ctrGroup, bridgeGroup := top+"/ctr", top+"/bridge"
	must(t, self.Place(sleeper.Process.Pid, ctrGroup)) // the process starts in the "container"
	t.Cleanup(func() {
		_ = self.Place(sleeper.Process.Pid, "") // back to the roots, so the groups can go
		for _, g := range []string{ctrGroup, bridgeGroup, top} {
			if err := self.Remove(g); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	mountDir := t.TempDir()
	cmd := exec.Command("unshare", "-m", "--propagation", "private", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=cgview", "PVRESCUE_S3_NODETEST_CTR="+ctrGroup, "PVRESCUE_S3_NODETEST_GROUP="+bridgeGroup,
		"PVRESCUE_S3_NODETEST_PID="+strconv.Itoa(sleeper.Process.Pid), "PVRESCUE_S3_NODETEST_MOUNTDIR="+mountDir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("placing from the container view: %v\n%s", err, out)
	}
	cg := procCgroups(t, sleeper.Process.Pid)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(cg), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[2] == "/"+bridgeGroup {
			n++
		}
	}
	if want := len(s3fs.ParseCgroupMounts(string(mustRead(t, "/proc/self/mountinfo")))); n != want {
		t.Errorf("process in /%s on %d hierarchies, want all %d:\n%s", bridgeGroup, n, want, cg)
	}
	if strings.Contains(cg, ctrGroup) {
		t.Errorf("process still in the container group:\n%s", cg)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return b
}
