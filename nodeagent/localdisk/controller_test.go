package localdisk_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kuberecord "k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/nodeagenttest"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk/localdisktest"
)

// ctrlEnv drives the controller pass by pass (SyncOnce) on a fake localdisk.OS, a fake clientset (the one
// truth: the rescue writes through it) copied into a fake view before each pass, and a fake
// clock: no goroutines, no sleeping.
type ctrlEnv struct {
	t        *testing.T
	ctx      context.Context
	os       *localdisktest.FakeOS
	client   *fake.Clientset
	view     *nodeagenttest.FakeView
	clock    *clocktesting.FakeClock
	recorder *kuberecord.FakeRecorder
	reg      *prometheus.Registry
	c        *localdisk.Controller
	events   []string
	evicted  []string
}

func newCtrlEnv(t *testing.T, labelled bool, objs ...runtime.Object) *ctrlEnv {
	t.Helper()
	return newCtrlEnvWith(t, labelled, nil, objs...)
}

func newCtrlEnvWith(t *testing.T, labelled bool, tweak func(*config.Config), objs ...runtime.Object) *ctrlEnv {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}}}
	if labelled {
		node.Labels[contract.LabelFakeDevicesDefault] = contract.LabelFakeDevicesEnabled
	}
	e := &ctrlEnv{t: t, os: localdisktest.NewFakeOS(testState, "/dev"), client: fake.NewClientset(append(objs, node)...),
		clock:    clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		recorder: kuberecord.NewFakeRecorder(100), reg: prometheus.NewRegistry()}
	e.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		e.evicted = append(e.evicted, a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName())
		return true, nil, nil
	})
	cfg := config.Default()
	cfg.StateDir = testState
	if tweak != nil {
		tweak(cfg)
	}
	view := nodeagenttest.NewFakeView()
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	t.Cleanup(cancel)
	e.ctx, e.view = ctx, view
	c, err := localdisk.New(nodeagent.Deps{NodeName: "n1", Config: cfg, Client: e.client, View: view, Recorder: e.recorder,
		Registerer: e.reg, Clock: e.clock}, e.os, localdisk.Options{LoopSearchLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	return e
}

// pass copies the clientset into the view, runs one pass and collects the Events.
func (e *ctrlEnv) pass() {
	e.t.Helper()
	if err := e.view.SyncFrom(e.client.Tracker(), "n1"); err != nil {
		e.t.Fatal(err)
	}
	e.clock.Step(time.Second)
	e.c.SyncOnce(e.ctx)
	for len(e.recorder.Events) > 0 {
		e.events = append(e.events, <-e.recorder.Events)
	}
}

func (e *ctrlEnv) count(parts ...string) int {
	n := 0
	for _, ev := range e.events {
		if containsAll(ev, parts) {
			n++
		}
	}
	return n
}

func (e *ctrlEnv) wantEvent(parts ...string) {
	e.t.Helper()
	if e.count(parts...) == 0 {
		e.t.Fatalf("no event with %q; got %q", parts, e.events)
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func (e *ctrlEnv) condition() *corev1.NodeCondition {
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == contract.ConditionLocalDiskMissing {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func (e *ctrlEnv) pvAnnotation() string {
	pv, err := e.client.CoreV1().PersistentVolumes().Get(context.Background(), "pv1", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pv.Annotations[contract.AnnotationFakeDevice]
}

// dataUID is the uid of claim app/data, which pv1's claimRef names.
const dataUID = k8stypes.UID("uid-pvc-data")

// boundPV and boundPVC are bound to each other both ways, as the PV binder leaves them.
func boundPV() *corev1.PersistentVolume {
	pv := localPV("pv1", testDisk, "n1", corev1.VolumeBound, corev1.PersistentVolumeBlock)
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "app", Name: "data", UID: dataUID}
	return pv
}

func boundPVC() *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "app", UID: dataUID},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
}

// guard is the status annotation the webhook writes; informational only: podOn adds the guard
// container itself when the pod is meant to be guarded.
var guard = map[string]string{contract.AnnotationStatus: `{"localBlock":["data"]}`}

// guardInit is the guard init container as the webhook injects it for pod volume "d" (claim
// claim) mapped at /dev/data.
func guardInit(claim string) corev1.Container {
	return corev1.Container{Name: contract.GuardContainerName, Image: "helper",
		Command:       []string{contract.HelperBinaryInImage},
		Args:          []string{contract.CmdGuard, contract.FlagDevice, "/dev/data=" + claim, contract.FlagPolicy, contract.PolicyFilter},
		Env:           []corev1.EnvVar{{Name: contract.EnvInjected, Value: contract.RoleGuard}},
		VolumeDevices: []corev1.VolumeDevice{{Name: "d", DevicePath: "/dev/data"}}}
}

func with(a map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// podOn is a running pod on n1 using claim "data" as volume "d"; guarded when annotations are
// the webhook's (then it also has the guard init container the webhook injects).
func podOn(name string, annotations map[string]string, started time.Time) *corev1.Pod {
	p := bareOn(name, annotations, started)
	if annotations[contract.AnnotationStatus] != "" {
		p.Spec.InitContainers = []corev1.Container{guardInit("data")}
	}
	return p
}

// bareOn is podOn without any guard container, whatever its annotations say.
func bareOn(name string, annotations map[string]string, started time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", UID: k8stypes.UID("uid-" + name), Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: "n1", Volumes: []corev1.Volume{{Name: "d",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: started}},
	}
}

func TestControllerFakeLifecycle(t *testing.T) {
	later := time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC) // after the fake is made
	e := newCtrlEnv(t, true, boundPV(), boundPVC(),
		podOn("opted-in", with(guard, contract.AnnotationRestartOnDiskReturn, "true"), later),
		podOn("require", with(guard, contract.AnnotationFakeDevicePolicy, contract.PolicyRequire), later),
		podOn("plain", guard, later))
	e.pass()
	e.wantEvent(contract.ReasonFakeDeviceCreated, testDisk, "/dev/loop101", "read-only")
	if got := e.pvAnnotation(); got != "/dev/loop101" {
		t.Fatalf("PV annotation %q", got)
	}
	if c := e.condition(); c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "pv1") {
		t.Fatalf("condition %+v", c)
	}
	if v := gaugeValue(t, e.reg, "pvrescue_localdisk_fake_devices_active", ""); v != 1 {
		t.Fatalf("active fakes metric %v", v)
	}
	for _, name := range []string{"pvrescue_localdisk_fake_device_active", "pvrescue_localdisk_disk_missing"} {
		if v := gaugeValue(t, e.reg, name, "pv1"); v != 1 {
			t.Fatalf("%s{pv1} = %v", name, v)
		}
	}
	if v := gaugeValue(t, e.reg, "pvrescue_localdisk_fake_device_created_timestamp_seconds", "pv1"); v != float64(e.clock.Now().Unix()) {
		t.Fatalf("created timestamp %v, want %v", v, e.clock.Now().Unix())
	}

	// The real disk returns while kubelet still holds the fake.
	e.os.Locked(func() {
		e.os.Loops[0] = &localdisk.Loop{Minor: 0, BackingFile: "/var/lib/kubelet/x", BackingIsDev: true, BackingMajor: localdisk.LoopMajor, BackingMinor: 101}
		delete(e.os.Links, testDisk)
		e.os.Devices[testDisk] = true
	})
	e.pass()
	e.pass()
	e.wantEvent(contract.ReasonDiskReturned, testDisk)
	e.wantEvent(contract.ReasonRealDiskReturned, "pv1")
	if e.count("Normal "+contract.ReasonDiskReturned) != 1 {
		t.Errorf("DiskReturned %d times", e.count(contract.ReasonDiskReturned))
	}
	// Evicted: the opted-in pod and the require pod (its guard refuses the fake forever), without
	// the restart annotation on the latter.
	if strings.Join(e.evicted, ",") != "opted-in,require" {
		t.Fatalf("evicted %v, want opted-in,require once each", e.evicted)
	}
	e.os.Locked(func() {
		if e.os.Loops[101].BackingFile == "" {
			t.Error("fake detached while held")
		}
		delete(e.os.Loops, 0)
	})
	e.pass()
	e.wantEvent(contract.ReasonFakeDeviceRetired)
	if got := e.pvAnnotation(); got != "" {
		t.Fatalf("annotation %q after retire", got)
	}
	if c := e.condition(); c == nil || c.Status != corev1.ConditionFalse {
		t.Fatalf("condition %+v", c)
	}
	if hasSeries(t, e.reg, "pvrescue_localdisk_fake_device_active", "pv1") || hasSeries(t, e.reg, "pvrescue_localdisk_disk_missing", "pv1") {
		t.Errorf("per-PV series left after retire")
	}
	e.os.Locked(func() {
		if !e.os.Devices[testDisk] || len(e.os.Violations) > 0 {
			t.Errorf("device %v violations %v", e.os.Devices[testDisk], e.os.Violations)
		}
	})
}

func metricFor(t *testing.T, reg *prometheus.Registry, name, pv string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if pv == "" && len(m.GetLabel()) == 0 {
				return m
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "pv" && l.GetValue() == pv {
					return m
				}
			}
		}
	}
	return nil
}

func hasSeries(t *testing.T, reg *prometheus.Registry, name, pv string) bool {
	return metricFor(t, reg, name, pv) != nil
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name, pv string) float64 {
	t.Helper()
	m := metricFor(t, reg, name, pv)
	if m == nil {
		t.Fatalf("metric %s{pv=%q} not found", name, pv)
	}
	return m.GetGauge().GetValue()
}

func TestControllerGateOffReportsOnly(t *testing.T) {
	e := newCtrlEnv(t, false, boundPV(), boundPVC(), podOn("p", guard, time.Now()))
	e.pass()
	e.pass()
	e.pass()
	e.wantEvent(contract.ReasonLocalDiskMissing, "disabled")
	if c := e.condition(); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("condition %+v", c)
	}
	e.os.Locked(func() {
		if len(e.os.Calls) != 0 {
			t.Errorf("touched with the gate off: %v", e.os.Calls)
		}
	})
	if n := e.count(contract.ReasonLocalDiskMissing + " "); n != 1 {
		t.Errorf("%d missing-disk events over three passes, want 1: %q", n, e.events)
	}
}

// A pod carrying the webhook's status annotation (copied from a mutated pod's YAML into a
// namespace the webhook never saw) but not the guard gets no fake, and is named in an Event.
func TestControllerCopiedAnnotationIsNotAGuard(t *testing.T) {
	e := newCtrlEnv(t, true, boundPV(), boundPVC(), podOn("guarded", guard, time.Now()), bareOn("copied", guard, time.Now()))
	e.pass()
	e.wantEvent("Warning", contract.ReasonUnguardedPodOnMissingDisk, "app/copied", "pv1")
	if e.count(contract.ReasonUnguardedPodOnMissingDisk, "app/guarded") != 0 {
		t.Errorf("the guarded pod was named: %q", e.events)
	}
	e.os.Locked(func() {
		if len(e.os.Calls) != 0 {
			t.Errorf("faked for a pod with only the annotation: %v", e.os.Calls)
		}
	})
}

// A pod without the guard (admitted while the webhook was down) gets no fake: a writable-looking
// 512-byte disk would reach an application that nothing filters. The pod is named in an Event.
func TestControllerUnguardedPodGetsNoFake(t *testing.T) {
	e := newCtrlEnv(t, true, boundPV(), boundPVC(), podOn("guarded", guard, time.Now()), podOn("bare", nil, time.Now()))
	e.pass()
	e.pass()
	e.wantEvent("Warning", contract.ReasonUnguardedPodOnMissingDisk, "app/bare", "pv1")
	if n := e.count(contract.ReasonUnguardedPodOnMissingDisk); n != 1 {
		t.Errorf("%d unguarded-pod events, want 1", n)
	}
	if e.count(contract.ReasonUnguardedPodOnMissingDisk, "guarded ") != 0 {
		t.Errorf("the guarded pod was named: %q", e.events)
	}
	e.os.Locked(func() {
		if len(e.os.Calls) != 0 {
			t.Errorf("faked for an unguarded pod: %v", e.os.Calls)
		}
	})
	// The unguarded pod goes: the PV gets its fake; the pod's memory is pruned.
	if err := e.client.CoreV1().Pods("app").Delete(e.ctx, "bare", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.pass()
	e.wantEvent(contract.ReasonFakeDeviceCreated)
	if len(e.c.PodsWarned()) != 0 {
		t.Errorf("memory of a deleted pod kept: %v", e.c.PodsWarned())
	}
}

// Only PVs used by pods on this node are handled: a PV of this node that no pod uses is not
// even read.
func TestControllerIgnoresPVsWithoutPods(t *testing.T) {
	e := newCtrlEnv(t, true, boundPV())
	e.pass()
	if n := e.view.Reads("PersistentVolume"); n != 0 {
		t.Errorf("%d PV reads, want none", n)
	}
	e.os.Locked(func() {
		if len(e.os.Calls) != 0 {
			t.Errorf("touched: %v", e.os.Calls)
		}
	})
	if len(e.events) != 0 {
		t.Errorf("events %q", e.events)
	}
}

func TestControllerBadPath(t *testing.T) {
	pv := boundPV()
	pv.Spec.Local.Path = "/srv/disks/ssd0"
	e := newCtrlEnv(t, true, pv, boundPVC(), podOn("p", guard, time.Now()))
	e.pass()
	e.wantEvent("Warning", contract.ReasonInvalidLocalPath, "/srv/disks/ssd0")
	e.os.Locked(func() {
		if len(e.os.Calls) != 0 {
			t.Errorf("touched: %v", e.os.Calls)
		}
	})
}

// A kernel name is reported, never faked.
func TestControllerKernelNameReportedOnly(t *testing.T) {
	pv := boundPV()
	pv.Spec.Local.Path = "/dev/sdb"
	e := newCtrlEnv(t, true, pv, boundPVC(), podOn("p", guard, time.Now()))
	e.pass()
	e.wantEvent("Warning", contract.ReasonLocalDiskNotFakeable, "/dev/sdb", "never faked")
	e.os.Locked(func() {
		if len(e.os.Calls) != 0 {
			t.Errorf("touched: %v", e.os.Calls)
		}
	})
}

func TestControllerLoopsExhaustedWarns(t *testing.T) {
	e := newCtrlEnv(t, true, boundPV(), boundPVC(), podOn("p", guard, time.Now()))
	e.os.Locked(func() {
		for n := 101; n < 105; n++ {
			e.os.Loops[n] = &localdisk.Loop{Minor: n, BackingFile: "/srv/x"}
		}
	})
	e.pass()
	e.wantEvent("Warning", contract.ReasonFakeDeviceFailed, "no free loop")
}

func TestControllerWarnsWhenMissingTooLong(t *testing.T) {
	e := newCtrlEnvWith(t, false, func(cfg *config.Config) { cfg.LocalBlock.MissingWarningAfter.Duration = time.Minute },
		boundPV(), boundPVC(), podOn("p", guard, time.Now()))
	e.pass()
	if e.count(contract.ReasonLocalDiskMissingTooLong) != 0 {
		t.Fatalf("warned at once: %q", e.events)
	}
	e.clock.Step(2 * time.Minute)
	e.pass()
	e.pass()
	e.wantEvent("Warning", contract.ReasonLocalDiskMissingTooLong, testDisk, "replaced")
	if n := e.count(contract.ReasonLocalDiskMissingTooLong); n != 1 {
		t.Errorf("%d too-long warnings, want 1", n)
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := localdisk.NewOptions().WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, o := range map[string]localdisk.Options{
		"relative root": {PathRoots: []string{"mnt"}, LinkRoots: localdisk.DefaultLinkRoots, DevDir: "/dev", LoopSearchLimit: 1},
		"slash":         {PathRoots: []string{"/"}, LinkRoots: localdisk.DefaultLinkRoots, DevDir: "/dev", LoopSearchLimit: 1},
		"no link roots": {PathRoots: localdisk.DefaultPathRoots, DevDir: "/dev", LoopSearchLimit: 1},
		"no loops":      {PathRoots: localdisk.DefaultPathRoots, LinkRoots: localdisk.DefaultLinkRoots, DevDir: "/dev"},
	} {
		if o.Validate() == nil {
			t.Errorf("%s: accepted %+v", name, o)
		}
	}
}
