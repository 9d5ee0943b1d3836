package localdisk

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kuberecord "k8s.io/client-go/tools/record"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent"
)

type ctrlEnv struct {
	t        *testing.T
	host     *FakeHost
	client   *fake.Clientset
	recorder *kuberecord.FakeRecorder
	reg      *prometheus.Registry
	events   []string
	mu       sync.Mutex
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
	e := &ctrlEnv{t: t, host: NewFakeHost(testState, "/dev"), client: fake.NewClientset(append(objs, node)...),
		recorder: kuberecord.NewFakeRecorder(100), reg: prometheus.NewRegistry()}
	e.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.evicted = append(e.evicted, a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName())
		return true, nil, nil
	})
	cfg := config.Default()
	cfg.StateDir = testState
	cfg.LocalBlock.ResyncPeriod.Duration = 20 * time.Millisecond
	if tweak != nil {
		tweak(cfg)
	}
	c, err := NewController(nodeagent.Deps{NodeName: "n1", Config: cfg, Client: e.client, Recorder: e.recorder, Registerer: e.reg},
		e.host, ControllerOptions{LoopSearchLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return e
}

// waitEvent waits for an event containing all parts.
func (e *ctrlEnv) waitEvent(parts ...string) string {
	e.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		for _, ev := range e.events {
			if containsAll(ev, parts) {
				return ev
			}
		}
		select {
		case ev := <-e.recorder.Events:
			e.events = append(e.events, ev)
		case <-deadline:
			e.t.Fatalf("no event with %q; got %q", parts, e.events)
		}
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

func (e *ctrlEnv) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *ctrlEnv) condition() *corev1.NodeCondition {
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == ConditionLocalDiskMissing {
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

func boundPV() *corev1.PersistentVolume {
	pv := localPV("pv1", testDisk, "n1", corev1.VolumeBound, corev1.PersistentVolumeBlock)
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "app", Name: "data"}
	return pv
}

func podOn(name string, annotations map[string]string, started time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", UID: k8stypes.UID("uid-" + name), Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: "n1", Volumes: []corev1.Volume{{Name: "d",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: started}},
	}
}

func TestControllerFakeLifecycle(t *testing.T) {
	// Pods started "now", i.e. after the fake the controller is about to make.
	later := time.Now().Add(time.Hour)
	e := newCtrlEnv(t, true, boundPV(),
		podOn("opted-in", map[string]string{contract.AnnotationRestartOnDiskReturn: "true"}, later),
		podOn("plain", nil, later))
	e.waitEvent(ReasonFakeDeviceCreated, testDisk, "/dev/loop101")
	e.eventually("PV annotation", func() bool { return e.pvAnnotation() == "/dev/loop101" })
	e.eventually("condition True", func() bool {
		c := e.condition()
		return c != nil && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "pv1")
	})
	if v := gaugeValue(t, e.reg, "pvrescue_localdisk_fake_devices_active"); v != 1 {
		t.Fatalf("active fakes metric %v", v)
	}

	// The real disk returns while kubelet still holds the fake.
	e.host.Locked(func() {
		e.host.Loops[0] = &Loop{Minor: 0, BackingFile: "/var/lib/kubelet/x", BackingIsDev: true, BackingMajor: LoopMajor, BackingMinor: 101}
		delete(e.host.Links, testDisk)
		e.host.Devices[testDisk] = true
	})
	e.waitEvent(ReasonDiskReturned, testDisk)
	e.waitEvent(ReasonRestartPod, "pv1")
	e.eventually("eviction of the opted-in pod", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.evicted) == 1 && e.evicted[0] == "opted-in"
	})
	e.waitEvent(ReasonEvicted)
	time.Sleep(100 * time.Millisecond) // several passes while held
	e.host.Locked(func() {
		if e.host.Loops[101].BackingFile == "" {
			t.Error("fake detached while held")
		}
		delete(e.host.Loops, 0)
	})
	e.waitEvent(ReasonFakeDeviceRetired)
	e.eventually("annotation removed", func() bool { return e.pvAnnotation() == "" })
	e.eventually("condition False", func() bool {
		c := e.condition()
		return c != nil && c.Status == corev1.ConditionFalse
	})
	e.mu.Lock()
	if len(e.evicted) != 1 {
		t.Errorf("evicted %v, want only opted-in once", e.evicted)
	}
	e.mu.Unlock()
	e.host.Locked(func() {
		if !e.host.Devices[testDisk] || len(e.host.Violations) > 0 {
			t.Errorf("device %v violations %v", e.host.Devices[testDisk], e.host.Violations)
		}
	})
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func TestControllerGateOffReportsOnly(t *testing.T) {
	e := newCtrlEnv(t, false, boundPV())
	e.waitEvent(ReasonDiskMissing, "disabled")
	e.eventually("condition True", func() bool {
		c := e.condition()
		return c != nil && c.Status == corev1.ConditionTrue
	})
	time.Sleep(60 * time.Millisecond)
	e.host.Locked(func() {
		if len(e.host.Calls) != 0 {
			t.Errorf("touched with the gate off: %v", e.host.Calls)
		}
	})
	for len(e.recorder.Events) > 0 {
		e.events = append(e.events, <-e.recorder.Events)
	}
	n := 0
	for _, ev := range e.events {
		if strings.Contains(ev, ReasonDiskMissing+" ") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d missing-disk events over several passes, want 1: %q", n, e.events)
	}
}

func TestControllerBadPath(t *testing.T) {
	pv := boundPV()
	pv.Spec.Local.Path = "/mnt/disks/ssd0"
	e := newCtrlEnv(t, true, pv)
	e.waitEvent("Warning", ReasonInvalidLocalPath, "/mnt/disks/ssd0")
	time.Sleep(60 * time.Millisecond)
	e.host.Locked(func() {
		if len(e.host.Calls) != 0 {
			t.Errorf("touched: %v", e.host.Calls)
		}
	})
}

func TestControllerLoopsExhaustedWarns(t *testing.T) {
	e := newCtrlEnv(t, true)
	e.host.Locked(func() {
		for n := 101; n < 105; n++ {
			e.host.Loops[n] = &Loop{Minor: n, BackingFile: "/srv/x"}
		}
	})
	if _, err := e.client.CoreV1().PersistentVolumes().Create(context.Background(), boundPV(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("Warning", ReasonFakeDeviceFailed, "no free loop")
}

func TestControllerWarnsWhenMissingTooLong(t *testing.T) {
	e := newCtrlEnvWith(t, false, func(cfg *config.Config) { cfg.LocalBlock.MissingWarningAfter.Duration = 50 * time.Millisecond }, boundPV())
	ev := e.waitEvent("Warning", ReasonMissingTooLong, testDisk)
	if !strings.Contains(ev, "replaced") {
		t.Errorf("warning does not explain a replaced disk: %q", ev)
	}
	time.Sleep(100 * time.Millisecond)
	for len(e.recorder.Events) > 0 {
		e.events = append(e.events, <-e.recorder.Events)
	}
	n := 0
	for _, ev := range e.events {
		if strings.Contains(ev, ReasonMissingTooLong) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d too-long warnings, want 1", n)
	}
}
