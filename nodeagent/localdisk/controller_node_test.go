//go:build node

package localdisk_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
)

type clusterEnv struct {
	*nodeEnv
	client kubernetes.Interface
	cfg    *config.Config
	ctx    context.Context
	// reg holds the metrics of the agent startAgent started last.
	reg *prometheus.Registry
}

func setupCluster(t *testing.T) *clusterEnv {
	t.Helper()
	e := &clusterEnv{nodeEnv: setupNode(t)}
	_, rc := testenv.APIServer(t)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	e.client = client
	e.ctx = logr.NewContext(context.Background(), testr.NewWithOptions(t, testr.Options{Verbosity: 0}))
	e.cfg = config.Default()
	e.cfg.StateDir = e.state
	e.cfg.LocalBlock.FirstLoopMinor = nodeFirstLoop
	// The default 10 s resync: detection within it proves the fsnotify path works.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{
		"kubernetes.io/hostname": "node-1", contract.LabelFakeDevicesDefault: contract.LabelFakeDevicesEnabled}}}
	if _, err := client.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *clusterEnv) createPV(t *testing.T, name, path, claim string) {
	t.Helper()
	pv := localPV(name, path, "node-1", corev1.VolumeBound, corev1.PersistentVolumeBlock)
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: mustQty("1Gi")}
	pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	// The rescue handles PVs used by (guarded) pods on its node: a claim bound to the PV both
	// ways, as the PV binder leaves them (no controllers run here), and a holder pod.
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "app"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: name, AccessModes: pv.Spec.AccessModes,
			Resources: corev1.VolumeResourceRequirements{Requests: pv.Spec.Capacity}}}
	createdPVC, err := e.client.CoreV1().PersistentVolumeClaims("app").Create(e.ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createdPVC.Status.Phase = corev1.ClaimBound
	if createdPVC, err = e.client.CoreV1().PersistentVolumeClaims("app").UpdateStatus(e.ctx, createdPVC, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "app", Name: claim, UID: createdPVC.UID}
	created, err := e.client.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.createPod(t, "holder-"+name, claim, map[string]string{contract.AnnotationStatus: "{}"})
	created.Status.Phase = corev1.VolumeBound
	if _, err := e.client.CoreV1().PersistentVolumes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createPod creates a running pod using claim; with the webhook's status annotation it also has
// the guard init container the webhook injects (the annotation alone guards nothing).
func (e *clusterEnv) createPod(t *testing.T, name, claim string, annotations map[string]string) {
	t.Helper()
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: "node-1", AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "c", Image: "busybox",
				VolumeDevices: []corev1.VolumeDevice{{Name: "d", DevicePath: "/dev/data"}}}},
			Volumes: []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
	}
	if annotations[contract.AnnotationStatus] != "" {
		pod.Spec.InitContainers = []corev1.Container{guardInit(claim)}
	}
	created, err := e.client.CoreV1().Pods("app").Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Phase = corev1.PodRunning
	created.Status.StartTime = &metav1.Time{Time: time.Now()}
	if _, err := e.client.CoreV1().Pods("app").UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startAgent runs a controller with the real host until the returned stop is called.
func (e *clusterEnv) startAgent(t *testing.T) (stop func()) {
	t.Helper()
	recorder, stopEvents := nodeagent.NewRecorder(e.client, "node-1", nodeagent.RecorderOptions{})
	ctx, cancel := context.WithCancel(e.ctx)
	view, err := nodeagent.NewKubeView(e.client, "node-1", clock.RealClock{}, nodeagent.ViewOptions{TTL: time.Millisecond, NotFoundTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}
	e.reg = prometheus.NewRegistry()
	c, err := localdisk.New(nodeagent.Deps{NodeName: "node-1", Config: e.cfg, Client: e.client, View: view, Recorder: recorder,
		Registerer: e.reg, Clock: clock.RealClock{}}, localdisk.NewRealOS(e.state),
		localdisk.Options{PathRoots: []string{e.byID}, LinkRoots: []string{e.byID}, LoopSearchLimit: 20})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		view.Shutdown()
		stopEvents()
	}
	t.Cleanup(stop)
	return stop
}

// passes is the running agent's count of ended passes (pvrescue_localdisk_sync_duration_seconds,
// observed at the end of each).
func (e *clusterEnv) passes(t *testing.T) uint64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "pvrescue_localdisk_sync_duration_seconds" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func (e *clusterEnv) events(t *testing.T, obj string) []string {
	t.Helper()
	list, err := e.client.CoreV1().Events("").List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + obj})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Type+" "+ev.Reason+" "+ev.Message)
	}
	return out
}

func (e *clusterEnv) waitEvent(t *testing.T, obj, reason string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("event %s on %s", reason, obj), testenv.Until(func() bool {
		for _, ev := range e.events(t, obj) {
			if strings.Contains(ev, " "+reason+" ") {
				return true
			}
		}
		return false
	}))
}

// replaceLink puts a link at path the way udev does (temporary name, rename over).
func replaceLink(t *testing.T, target, path string) {
	t.Helper()
	tmp := path + ".udev-tmp"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func ourLinkTarget(path string) string {
	t, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	if _, err := localdisk.ParseLoopLinkTarget("/dev", t); err != nil {
		return ""
	}
	return t
}

func TestNodeAgentWithAPIServer(t *testing.T) {
	e := setupCluster(t)
	// A foreign loop at the first number: the agent must skip it.
	foreign := filepath.Join(t.TempDir(), "foreign.img")
	foreignLoop(t, nodeFirstLoop, foreign)
	want := fmt.Sprintf("/dev/loop%d", nodeFirstLoop+1)

	// pv-real's path is a block device node, pv-foreign's a link to something else: never touched.
	realDev := filepath.Join(e.byID, "real-disk")
	if err := unix.Mknod(realDev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
		t.Fatal(err)
	}
	foreignLink := filepath.Join(e.byID, "foreign-link")
	if err := os.Symlink("real-disk", foreignLink); err != nil {
		t.Fatal(err)
	}
	var beforeReal syscall.Stat_t
	if err := syscall.Lstat(realDev, &beforeReal); err != nil {
		t.Fatal(err)
	}
	// pv1's disk is present at first (a udev-style link to the "real" disk).
	replaceLink(t, "real-nvme0n1", e.devPath)
	e.createPV(t, "pv1", e.devPath, "data")
	e.createPV(t, "pv-real", realDev, "other")
	e.createPV(t, "pv-foreign", foreignLink, "other2")

	stop := e.startAgent(t)
	testenv.WaitFor(t, 10*time.Second, "condition False", testenv.Until(func() bool {
		c := e.nodeCondition(t)
		return c != nil && c.Status == corev1.ConditionFalse
	}))

	var samples []time.Duration
	for i := 0; i < 7; i++ {
		// The disk disappears.
		t0 := time.Now()
		if err := os.Remove(e.devPath); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 9*time.Second, "fake link", func() error {
			got, err := os.Readlink(e.devPath)
			if err != nil {
				return fmt.Errorf("round %d: no link yet, want %q: %w; loops: %s", i, want, err, loopStates())
			}
			if got != want {
				return fmt.Errorf("round %d: link %q, want %q; loops: %s", i, got, want, loopStates())
			}
			return nil
		})
		samples = append(samples, time.Since(t0))
		if i == 0 {
			e.waitEvent(t, "pv1", contract.ReasonFakeDeviceCreated)
			testenv.WaitFor(t, 10*time.Second, "PV annotation", testenv.Until(func() bool { return e.pvAnnotation(t, "pv1") == want }))
			testenv.WaitFor(t, 10*time.Second, "condition True", testenv.Until(func() bool {
				c := e.nodeCondition(t)
				return c != nil && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "pv1")
			}))
			if got := deviceSize(t, e.devPath); got != 512 {
				t.Fatalf("fake size %d", got)
			}
			// Restart: a new agent re-adopts the fake without re-creating it.
			var before syscall.Stat_t
			_ = syscall.Lstat(e.devPath, &before)
			stop()
			stop = e.startAgent(t)
			// Checked once the new agent ended a whole pass (its first), not after a guess at
			// how long that takes.
			testenv.WaitFor(t, 15*time.Second, "the new agent's first pass", testenv.Until(func() bool { return e.passes(t) >= 1 }))
			time.Sleep(time.Second) // an Event that pass recorded is sent by the broadcaster's goroutine
			var after syscall.Stat_t
			if err := syscall.Lstat(e.devPath, &after); err != nil || after.Ino != before.Ino || ourLinkTarget(e.devPath) != want {
				t.Fatalf("restart changed the fake link (%v)", err)
			}
			n := 0
			for _, ev := range e.events(t, "pv1") {
				if strings.Contains(ev, contract.ReasonFakeDeviceCreated) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d FakeDeviceCreated events after restart, want 1", n)
			}
			e.createPod(t, "on-fake", "data", map[string]string{contract.AnnotationRestartOnDiskReturn: "true", contract.AnnotationStatus: "{}"})
			e.createPod(t, "on-fake-plain", "data", map[string]string{contract.AnnotationStatus: "{}"})
			// kubelet's device lock on the fake, as seen on a real node.
			lockNode := filepath.Join(t.TempDir(), "pod-uid")
			if err := unix.Mknod(lockNode, unix.S_IFBLK|0o600, int(unix.Mkdev(7, nodeFirstLoop+1))); err != nil {
				t.Fatal(err)
			}
			foreignLoop(t, nodeFirstLoop+2, lockNode)
			// The disk returns while the lock is held.
			replaceLink(t, "real-nvme0n1", e.devPath)
			e.waitEvent(t, "pv1", contract.ReasonDiskReturned)
			e.waitEvent(t, "on-fake-plain", contract.ReasonRealDiskReturned)
			testenv.WaitFor(t, 10*time.Second, "eviction", testenv.Until(func() bool {
				p, err := e.client.CoreV1().Pods("app").Get(e.ctx, "on-fake", metav1.GetOptions{})
				return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
			}))
			time.Sleep(200 * time.Millisecond)
			if sysBacking(nodeFirstLoop+1) == "" {
				t.Fatal("fake detached while kubelet's lock holds it")
			}
			detachUnder(t, filepath.Dir(lockNode))
			// The lock's release makes no filesystem event: the periodic resync retires it.
		} else {
			replaceLink(t, "real-nvme0n1", e.devPath)
		}
		testenv.WaitFor(t, 15*time.Second, "fake retired", testenv.Until(func() bool { return sysBacking(nodeFirstLoop+1) == "" }))
		if l, _ := os.Readlink(e.devPath); l != "real-nvme0n1" {
			t.Fatalf("real disk link changed: %q", l)
		}
	}
	e.waitEvent(t, "pv1", contract.ReasonFakeDeviceRetired)
	testenv.WaitFor(t, 10*time.Second, "annotation removed", testenv.Until(func() bool { return e.pvAnnotation(t, "pv1") == "" }))
	testenv.WaitFor(t, 10*time.Second, "condition False", testenv.Until(func() bool {
		c := e.nodeCondition(t)
		return c != nil && c.Status == corev1.ConditionFalse
	}))

	sorted := append([]time.Duration(nil), samples...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("detection-to-fake latency (path removed -> fake link visible), %d samples: %v; p50 %v, max %v",
		len(samples), samples, sorted[len(sorted)/2], sorted[len(sorted)-1])

	if sysBacking(nodeFirstLoop) != foreign {
		t.Fatal("foreign loop touched")
	}
	var afterReal syscall.Stat_t
	if err := syscall.Lstat(realDev, &afterReal); err != nil || afterReal.Ino != beforeReal.Ino || afterReal.Rdev != beforeReal.Rdev {
		t.Fatalf("real device node changed (%v)", err)
	}
	if l, _ := os.Readlink(foreignLink); l != "real-disk" {
		t.Fatalf("foreign link changed: %q", l)
	}
	for _, pv := range []string{"pv-real", "pv-foreign"} {
		if a := e.pvAnnotation(t, pv); a != "" {
			t.Fatalf("%s annotated %q", pv, a)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(e.state, localdisk.SubDir)); len(ents) != 0 {
		t.Fatalf("state files left: %v", ents)
	}
}

// Bad input through the API: relative path, path outside the prefix, a directory; and the gate.
func TestNodeAgentBadInputAndGate(t *testing.T) {
	e := setupCluster(t)
	dir := filepath.Join(e.byID, "a-dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.createPV(t, "pv-dir", dir, "c1")
	e.createPV(t, "pv-outside", "/var/tmp/not-a-device", "c2")
	e.createPV(t, "pv-relative", "disk/by-id/x", "c3")
	// Gate off first: the missing path is only reported.
	node, _ := e.client.CoreV1().Nodes().Get(e.ctx, "node-1", metav1.GetOptions{})
	delete(node.Labels, contract.LabelFakeDevicesDefault)
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createPV(t, "pv1", e.devPath, "data")
	e.startAgent(t)
	for _, pv := range []string{"pv-dir", "pv-outside", "pv-relative"} {
		e.waitEvent(t, pv, contract.ReasonInvalidLocalPath)
	}
	e.waitEvent(t, "pv1", contract.ReasonLocalDiskMissing)
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Lstat(e.devPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("fake made with the gate off: %v", err)
	}
	// Gate on: the fake appears.
	node, _ = e.client.CoreV1().Nodes().Get(e.ctx, "node-1", metav1.GetOptions{})
	node.Labels[contract.LabelFakeDevicesDefault] = contract.LabelFakeDevicesEnabled
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "fake after labelling", testenv.Until(func() bool { return ourLinkTarget(e.devPath) != "" }))
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("directory touched: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.state, localdisk.SubDir)); len(ents) != 2 { // pv1.json, pv1.img
		t.Fatalf("state files: %v", ents)
	}
}

func (e *clusterEnv) nodeCondition(t *testing.T) *corev1.NodeCondition {
	n, err := e.client.CoreV1().Nodes().Get(e.ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == contract.ConditionLocalDiskMissing {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func (e *clusterEnv) pvAnnotation(t *testing.T, name string) string {
	pv, err := e.client.CoreV1().PersistentVolumes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pv.Annotations[contract.AnnotationFakeDevice]
}
