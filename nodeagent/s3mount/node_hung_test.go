//go:build node

package s3mount

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/nodeagenttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// hungNode is a real s3fs ("the driver's") at a pod's target under a shared kubelet directory,
// and a restorer on the real OS reading the pod, PV and secret from a FakeView.
type hungNode struct {
	t      *testing.T
	r      *Restorer
	ctx    context.Context
	events *s3mounttest.Events
	client *fake.Clientset
	target string
	driver *testenv.S3fsMount
	dir    string
}

func newHungNode(t *testing.T, abortAfter time.Duration) *hungNode {
	testenv.RequireRoot(t)
	srv := testenv.S3(t, "bkt")
	if err := os.MkdirAll(filepath.Join(srv.Dir, "bkt", "pv-a"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubelet := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(kubelet, 0o755); err != nil {
		t.Fatal(err)
	}
	// kubelet makes its root directory a shared mount; do the same for the temporary one.
	if err := unix.Mount(kubelet, kubelet, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", kubelet, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	testenv.Sweep(t, dir)
	target := csiclient.TargetPath(kubelet, "uid-1", "pv-a")
	vd, _ := json.Marshal(csiclient.VolData{SpecVolID: "pv-a", VolumeHandle: "bkt/pv-a", DriverName: testDriver, NodeName: testNode})
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), vd, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	drv, err := testenv.StartS3fs(ctx, srv.S3Config, testenv.S3fsSpec{Source: "bkt:/pv-a", MountPoint: target,
		PasswdFile: filepath.Join(dir, "driver.passwd"), Options: []string{"allow_other"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Kill(); _ = testenv.LazyUnmount(target) })

	view := nodeagenttest.NewFakeView()
	view.Set(secretObj("creds", map[string]string{"accessKeyID": srv.AccessKey, "secretAccessKey": srv.SecretKey, "endpoint": srv.Endpoint()}),
		pvObj("pv-a", testDriver, false), pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", false))
	cfg := config.Default()
	cfg.KubeletDir, cfg.StateDir = kubelet, filepath.Join(dir, "state")
	cfg.S3.StatfsTimeout.Duration = 300 * time.Millisecond
	cfg.S3.HungConditionAfter.Duration = time.Second
	cfg.S3.BridgeAfter.Duration = 0
	cfg.S3.AbortHungAfter.Duration = abortAfter
	h := &hungNode{t: t, events: s3mounttest.NewEvents(), target: target, driver: drv, dir: dir,
		client: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}})}
	r, err := New(nodeagent.Deps{NodeName: testNode, Config: cfg, Client: h.client, View: view, Recorder: h.events.Recorder,
		Registerer: prometheus.NewRegistry(), Clock: clock.RealClock{}}, NewOS(), Options{BridgeCgroup: "", BridgeNetNS: "", KillGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	h.ctx = logr.NewContext(t.Context(), testr.New(t))
	if err := r.Prepare(h.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range testenv.S3fsPIDs(cfg.StateDir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		r.Wait()
	})
	return h
}

// passes runs checks for d, one every 200 ms.
func (h *hungNode) passes(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if err := h.r.Sync(h.ctx); err != nil {
			h.t.Fatal(err)
		}
	}
	h.r.Wait()
}

func (h *hungNode) ours() []int { return testenv.S3fsPIDs(filepath.Join(h.dir, "state")) }

// A real s3fs stopped (SIGSTOP) is hung, not dead: no second s3fs, the mount table at the
// target unchanged, MountHung and the Node condition; SIGCONT: healthy again, nothing stacked.
func TestNodeHungS3fsIsNotReplaced(t *testing.T) {
	h := newHungNode(t, 0)
	before := mountTableNow(t).Stack(h.target)
	if err := h.driver.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = h.driver.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	h.passes(4 * time.Second)
	if pids := h.ours(); len(pids) != 0 {
		t.Errorf("s3fs of ours started for a hung mount: %v", pids)
	}
	if after := mountTableNow(t).Stack(h.target); !cmp.Equal(after, before) {
		t.Errorf("target stack changed under a hung mount:\n before %v\n after  %v", before, after)
	}
	if n := h.events.Count(corev1.EventTypeWarning, contract.ReasonMountHung, ""); n != 1 {
		t.Errorf("%d MountHung Events, want 1", n)
	}
	if got := value(t, h.r.metrics.MountsHung); got != 1 {
		t.Errorf("mounts_hung = %v, want 1", got)
	}
	if st := nodeHungCondition(t, h.client); st != corev1.ConditionTrue {
		t.Errorf("Node condition S3MountHung = %q, want True", st)
	}
	if err := h.driver.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	testenv.WaitFor(t, 10*time.Second, "target answers after SIGCONT", testenv.Until(func() bool {
		var st unix.Statfs_t
		return unix.Statfs(h.target, &st) == nil
	}))
	h.passes(time.Second)
	if got := value(t, h.r.metrics.MountsHung); got != 0 {
		t.Errorf("mounts_hung = %v after SIGCONT", got)
	}
	if st := nodeHungCondition(t, h.client); st != corev1.ConditionFalse {
		t.Errorf("Node condition S3MountHung = %q after SIGCONT, want False", st)
	}
	if after := mountTableNow(t).Stack(h.target); !cmp.Equal(after, before) {
		t.Errorf("target stack changed after SIGCONT: %v", after)
	}
	if pids := h.ours(); len(pids) != 0 {
		t.Errorf("s3fs of ours running after SIGCONT: %v", pids)
	}
}

// With s3.abortHungAfter the stopped s3fs's FUSE connection is aborted (fusectl mounted when
// missing), and only then is the now dead mount restored (here by our bridge: no driver).
func TestNodeAbortHungAfter(t *testing.T) {
	h := newHungNode(t, 2*time.Second)
	if err := h.driver.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.driver.Cmd.Process.Signal(syscall.SIGCONT) }()
	hung, _ := mountTableNow(t).Top(h.target)
	h.passes(1500 * time.Millisecond)
	if pids := h.ours(); len(pids) != 0 {
		t.Fatalf("restored before abortHungAfter: %v", pids)
	}
	h.passes(4 * time.Second)
	if n := h.events.Count(corev1.EventTypeWarning, contract.ReasonMountHungAborted, ""); n != 1 {
		t.Errorf("%d MountHungAborted Events, want 1", n)
	}
	if got := value(t, h.r.metrics.HungAborts.WithLabelValues("success")); got != 1 {
		t.Errorf("hung_aborts{success} = %v, want 1", got)
	}
	conn, _ := stack.FUSEConnection(hung.Dev)
	if _, err := os.Stat(filepath.Join(stack.FusectlDir, conn)); err == nil {
		t.Logf("aborted connection %s still listed in fusectl (its mount is still there, dead)", conn)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(h.target, &st); err != nil {
		t.Errorf("target after the abort and restore: %v", err)
	}
	if pids := h.ours(); len(pids) != 1 {
		t.Errorf("s3fs of ours after the abort: %v, want 1", pids)
	}
	mounts := mountTableNow(t).Stack(h.target)
	if len(mounts) != 2 || mounts[0].Dev != hung.Dev {
		t.Errorf("target stack %v, want the aborted driver mount + our bridge", mounts)
	}
	if n := h.events.Count(corev1.EventTypeNormal, contract.ReasonMountBridged, ""); n != 1 {
		t.Errorf("%d MountBridged Events, want 1", n)
	}
	if !slices.ContainsFunc(mountTableNow(t), func(m stack.Mount) bool { return m.FSType == "fusectl" }) {
		t.Logf("fusectl not in our mount table after the abort")
	}
}

func nodeHungCondition(t *testing.T, c *fake.Clientset) corev1.ConditionStatus {
	w := &world{client: c}
	return hungCondition(t, w)
}
