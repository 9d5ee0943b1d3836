//go:build node

package containermount_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/containermount/containermounttest"
)

const podUID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"

// node is one pod's volume on a real node: the driver's s3fs at the pod's target, killed, and
// restored the way s3mount does it (a new s3fs at a staging directory, bound on top of the dead
// target).
type node struct {
	*s3Env
	target   string
	deadDev  string
	deadRoot string
	driver   *testenv.S3fsMount
	restores int
	// spec is each container's volumeMounts in the pod spec request() sends (the API's view).
	spec map[string][]corev1.VolumeMount
}

// vm is one volumeMount of the volume.
func vm(mountPath, subPath string, readOnly bool) corev1.VolumeMount {
	return corev1.VolumeMount{Name: "vol", MountPath: mountPath, SubPath: subPath, ReadOnly: readOnly}
}

// mounts records what the pod spec says of container name's mounts.
func (n *node) mounts(name string, vms ...corev1.VolumeMount) {
	n.spec[name] = append(n.spec[name], vms...)
}

func newNode(t testing.TB) *node {
	e := newS3Env(t)
	e.file("pv1/root.txt", "volume root\n")
	e.file("pv1/sub/dir/sub.txt", "subdirectory\n")
	n := &node{s3Env: e, target: filepath.Join(e.dir, "pods", podUID, "volumes", "pv1", "mount"), spec: map[string][]corev1.VolumeMount{}}
	n.driver = e.s3fs("pv1", n.target)
	top, _ := hostTable(t).Top(n.target)
	n.deadDev, n.deadRoot = top.Dev, top.Root
	return n
}

// kill kills the s3fs serving the target (the driver's, or the last restore's): every view of
// its connection answers ENOTCONN. deadDev and deadRoot name that connection afterwards.
func (n *node) kill() {
	n.t.Helper()
	top, _ := hostTable(n.t).Top(n.target)
	n.deadDev, n.deadRoot = top.Dev, top.Root
	n.driver.Kill() // SIGKILL, as a plugin restart does to its s3fs
	testenv.WaitFor(n.t, 10*time.Second, "target dead after kill -9", testenv.Until(func() bool {
		var st unix.Statfs_t
		return errors.Is(unix.Statfs(n.target, &st), syscall.ENOTCONN)
	}))
}

// restore mounts a new s3fs at a staging directory of its own and binds it on top of the dead
// target, as s3mount does on the host today.
func (n *node) restore() {
	n.t.Helper()
	staging := n.newStaging()
	must(n.t, unix.Mount(staging, n.target, "", unix.MS_BIND, ""))
}

func (n *node) newStaging() string {
	n.restores++
	staging := filepath.Join(n.dir, "staging", fmt.Sprintf("pv1-%d", n.restores))
	n.driver = n.s3fs("pv1", staging)
	return staging
}

// appContainer starts a container with mountPropagation None: /data is the volume, /cfg a
// read-only subPath (sub/dir); like a runtime's rootfs, it has no copy of the kubelet target.
func (n *node) appContainer(name string) (c *container, data, cfg string) {
	n.t.Helper()
	root := filepath.Join(n.dir, "ctr-"+name)
	data, cfg = filepath.Join(root, "data"), filepath.Join(root, "cfg")
	must(n.t, os.MkdirAll(data, 0o755))
	must(n.t, os.MkdirAll(cfg, 0o755))
	c = n.startContainer(name, "private", strings.Join([]string{
		"mount --bind " + n.target + " " + data,
		"mount --bind " + n.target + "/sub/dir " + cfg,
		"mount -o remount,bind,ro " + cfg,
		"umount " + n.target,
		"cd " + data, // the main process keeps its working directory on the volume
	}, "\n"))
	n.mounts(name, vm(data, "", false), vm(cfg, "sub/dir", true))
	return c, data, cfg
}

func (n *node) remounter(cgroups map[int]string) (*containermount.Remounter, *record.FakeRecorder) {
	n.t.Helper()
	rec := record.NewFakeRecorder(20)
	os := realOS(n.t)
	os.Proc = containermounttest.CgroupProcFS{ProcFS: os.Proc, Cgroups: cgroups}
	r, err := containermount.New(nodeagent.Deps{Recorder: rec, Registerer: prometheus.NewRegistry()}, os, containermount.Options{})
	must(n.t, err)
	return r, rec
}

func (n *node) request(containers ...string) containermount.RemountRequest {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: types.UID(podUID)}}
	for _, c := range containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses,
			corev1.ContainerStatus{Name: c, ContainerID: "containerd://" + c + "-id"})
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, VolumeMounts: n.spec[c]})
	}
	return containermount.RemountRequest{Pod: pod, DeadDevice: n.deadDev, DeadRoot: n.deadRoot, LivePath: n.target}
}

func read(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func TestNodeRemountInContainers(t *testing.T) {
	n := newNode(t)
	app, data, cfg := n.appContainer("app")
	side := n.join(app) // a second container sharing app's mount namespace
	// "watcher" has mountPropagation HostToContainer and uses the target path itself.
	watcher := n.startContainer("watcher", "slave", "true")
	n.mounts("side", n.spec["app"]...)
	n.mounts("watcher", vm(n.target, "", false))
	if got := read(t, app.path(cfg)+"/sub.txt"); got != "subdirectory\n" {
		t.Fatalf("subPath before the failure: %q", got)
	}

	n.kill()
	if _, err := os.Stat(app.path(data) + "/root.txt"); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("container view after kill -9: %v, want ENOTCONN", err)
	}
	n.restore()
	// The HostToContainer container gets the live mount by propagation; app does not.
	if got := read(t, watcher.path(n.target)+"/root.txt"); got != "volume root\n" {
		t.Fatalf("HostToContainer view after restore: %q", got)
	}
	if _, err := os.Stat(app.path(data) + "/root.txt"); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("app view after host restore: %v, want still ENOTCONN", err)
	}
	watcherTop, _ := watcher.table(t).Top(n.target)

	r, rec := n.remounter(inPod(map[int]string{app.pid: "app", side.pid: "side", watcher.pid: "watcher"}))
	ctx := logr.NewContext(context.Background(), testr.New(t))
	ownNS := nsOf(t, os.Getpid())
	t0 := time.Now()
	res, err := r.RemountInContainers(ctx, n.request("app", "side", "watcher"))
	took := time.Since(t0)
	must(t, err)
	if got := nsOf(t, os.Getpid()); got != ownNS {
		t.Fatalf("the agent left its mount namespace: %s, want %s", got, ownNS)
	}
	t.Logf("RemountInContainers: %s, result %+v", took, res)

	wantFixed := []string{"app+side:" + data, "app+side:" + cfg}
	if !slices.Equal(res.Fixed, wantFixed) || len(res.Failed) != 0 || res.Untouched != 1 {
		t.Fatalf("result = %+v; want fixed %v (one namespace, handled once), 1 untouched (watcher)", res, wantFixed)
	}
	// Inside app's namespace: /data is the volume root again, /cfg its subdirectory (not the root).
	if got := read(t, app.path(data)+"/root.txt"); got != "volume root\n" {
		t.Errorf("/data/root.txt = %q", got)
	}
	if got := read(t, side.path(data)+"/sub/dir/sub.txt"); got != "subdirectory\n" {
		t.Errorf("side's /data/sub/dir/sub.txt = %q", got)
	}
	if got := read(t, app.path(cfg)+"/sub.txt"); got != "subdirectory\n" {
		t.Errorf("/cfg/sub.txt = %q", got)
	}
	if _, err := os.Stat(app.path(cfg) + "/root.txt"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/cfg shows the volume root (seaweedfs-csi#271): stat root.txt = %v", err)
	}
	// Read-only stays read-only; the writable mount writes through to the bucket.
	if err := os.WriteFile(app.path(cfg)+"/new.txt", []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to the read-only subPath: %v, want EROFS", err)
	}
	must(t, os.WriteFile(app.path(data)+"/after.txt", []byte("after\n"), 0o644))
	testenv.WaitFor(t, 10*time.Second, "write through the new mount reaches the bucket", testenv.Until(func() bool {
		b, err := os.ReadFile(filepath.Join(n.s3dir, bucket, "pv1", "after.txt"))
		return err == nil && string(b) == "after\n"
	}))
	// The new mounts copy the container's flags and do not share events with the host.
	for _, mp := range []string{data, cfg} {
		top, _ := app.table(t).Top(mp)
		for _, o := range top.Optional {
			if strings.HasPrefix(o, "shared:") {
				t.Errorf("new mount at %s is shared with the host (%v)", mp, top.Optional)
			}
		}
		t.Logf("app %s: %+v", mp, top)
	}
	// Replaced, not stacked: only the live mount is at /data, the dead one was detached (lazily:
	// what was opened on the dead connection, here the main process's working directory, stays
	// broken).
	if s := app.table(t).Stack(data); len(s) != 1 || s[0].Dev == n.deadDev {
		t.Errorf("stack at /data = %+v; want only the live mount", s)
	}
	if _, err := os.ReadFile(fmt.Sprintf("/proc/%d/cwd/root.txt", app.pid)); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("reading through a working directory opened on the dead mount: %v, want ENOTCONN", err)
	}
	// The HostToContainer container was left exactly as it was.
	if top, _ := watcher.table(t).Top(n.target); top.ID != watcherTop.ID {
		t.Errorf("watcher's mount at the target changed: %+v -> %+v", watcherTop, top)
	}
	ev := drain(rec)
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal "+containermount.ReasonRestored) || !strings.Contains(ev[0], "app+side") {
		t.Errorf("events = %q; want one %s naming app+side", ev, containermount.ReasonRestored)
	}

	// A second pass changes nothing.
	res, err = r.RemountInContainers(ctx, n.request("app", "side", "watcher"))
	must(t, err)
	if len(res.Fixed) != 0 || len(res.Failed) != 0 || res.Untouched != 1 {
		t.Errorf("second pass: %+v; want nothing fixed or failed, 1 untouched (watcher: the dead connection is left only there)", res)
	}
	if ev := drain(rec); len(ev) != 0 {
		t.Errorf("second pass emitted %q", ev)
	}
}

// inPod maps pids to the pod's cgroup of the named containers.
func inPod(names map[int]string) map[int]string {
	out := map[int]string{}
	for pid, name := range names {
		out[pid] = containermounttest.PodCgroup(podUID, name+"-id")
	}
	return out
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestNodeAgentStaysInItsNamespace enters a container's namespace many times, from goroutines on
// whatever threads the scheduler picks, and checks the agent as a whole (/proc/self, which
// follows the main thread) never leaves its own namespace and no thread is left behind.
func TestNodeAgentStaysInItsNamespace(t *testing.T) {
	e := newS3Env(t)
	c := e.startContainer("c", "private", "true")
	own := nsOf(t, os.Getpid())
	if own == nsOf(t, c.pid) {
		t.Fatal("the container shares the test's mount namespace")
	}
	inode, err := containermount.NamespaceInode(nsOf(t, c.pid))
	must(t, err)
	_, owner, err := containermount.RealProcFS{Root: "/proc"}.MountNSOwner(c.pid)
	must(t, err)
	threadsBefore := threads(t)
	ns := realOS(t).NS
	for i := 0; i < 50; i++ {
		errs, err := ns.AttachInNamespace(context.Background(), containermount.NamespaceRef{Inode: inode, Pids: []int{c.pid}, Owner: owner}, e.dir, nil)
		if err != nil || len(errs) != 0 {
			t.Fatalf("enter %d: %v %v", i, errs, err)
		}
		if got := nsOf(t, os.Getpid()); got != own {
			t.Fatalf("after entering the container %d times the agent's /proc/self/ns/mnt is %s, want %s", i+1, got, own)
		}
	}
	if _, ok := hostTable(t).Top(e.dir); !ok {
		t.Error("/proc/self/mountinfo no longer shows the agent's own mounts")
	}
	// Each call's thread is retired; allow the runtime a few idle threads of its own.
	testenv.WaitFor(t, 5*time.Second, "threads retired", testenv.Until(func() bool { return threads(t) <= threadsBefore+3 }))

	// A reused pid (here: a process in another namespace) is never entered.
	_, err = ns.AttachInNamespace(context.Background(), containermount.NamespaceRef{Inode: inode, Pids: []int{os.Getpid()}, Owner: owner}, e.dir, nil)
	if !errors.Is(err, containermount.ErrNamespaceGone) {
		t.Errorf("entering through a pid of another namespace: %v, want ErrNamespaceGone", err)
	}
}

func threads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			var n int
			_, err := fmt.Sscan(v, &n)
			must(t, err)
			return n
		}
	}
	t.Fatal("no Threads: in /proc/self/status")
	return 0
}
