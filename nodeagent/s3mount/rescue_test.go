package s3mount

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/nodeagenttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

const (
	testNode    = "n1"
	testDriver  = "ru.yandex.s3.csi"
	testKubelet = "/var/lib/kubelet"
	testState   = "/var/lib/pvrescue"
)

// world is one unit-test node: API objects in a FakeView, a FakeNode, a fake clock and a
// restorer driven one Sync at a time (no sleeping, no background loop).
type world struct {
	t       *testing.T
	node    *s3mounttest.FakeNode
	view    *nodeagenttest.FakeView
	clock   *clocktesting.FakeClock
	events  *s3mounttest.Events
	remount *fakeRemounter
	csi     *s3mounttest.FakeCSI
	r       *Restorer
	ctx     context.Context
	// bridgeCgroup is Options.BridgeCgroup of the restorers start makes.
	bridgeCgroup string
	// bridgeNetNS is Options.BridgeNetNS.
	bridgeNetNS string
	registry    csiclient.Registry
	// configure, when set, changes the configuration before the restorer starts.
	configure func(*config.Config)
	// replacer is OS.Replacer of the restorers start makes (nil: stacked, as on an old kernel).
	replacer stack.Replacer
	// cache, when set, is the restorers' view in front of view (a cache that can be stale).
	cache  nodeagent.ClusterView
	client *fake.Clientset
}

func newWorld(t *testing.T, objs ...runtime.Object) *world {
	t.Helper()
	w := &world{t: t, node: s3mounttest.NewFakeNode(), view: nodeagenttest.NewFakeView(), events: s3mounttest.NewEvents(),
		clock: clocktesting.NewFakeClock(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))}
	for _, o := range objs {
		w.view.Set(o)
	}
	return w
}

func (w *world) deps() nodeagent.Deps {
	cfg := config.Default()
	cfg.KubeletDir, cfg.StateDir = testKubelet, testState
	if w.configure != nil {
		w.configure(cfg)
	}
	if w.client == nil {
		w.client = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}})
	}
	d := nodeagent.Deps{NodeName: testNode, Config: cfg, Client: w.client, View: w.view,
		Recorder: w.events.Recorder, Registerer: prometheus.NewRegistry(), Clock: w.clock}
	if w.cache != nil {
		d.View = w.cache
	}
	if w.remount != nil {
		d.Remounter = w.remount
	}
	return d
}

func (w *world) start() {
	w.t.Helper()
	os := fakeOS(w.node)
	if w.csi != nil {
		os.CSI = w.csi
	}
	os.Registry = w.registry
	os.Replacer = w.replacer
	r, err := New(w.deps(), os, Options{BackoffInitial: 2 * time.Second, BackoffMax: 10 * time.Second, KillGrace: time.Millisecond,
		BridgeCgroup: w.bridgeCgroup, BridgeNetNS: w.bridgeNetNS})
	if err != nil {
		w.t.Fatal(err)
	}
	w.r = r
	w.ctx = logr.NewContext(context.Background(), testr.New(w.t))
	if err := r.Prepare(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	w.sync()
}

// sync runs one check and waits for the restores it started.
func (w *world) sync() {
	w.t.Helper()
	if err := w.r.Sync(w.ctx); err != nil {
		w.t.Fatalf("Sync: %v", err)
	}
	w.r.Wait()
}

// settle runs a few checks with time passing (past any backoff).
func (w *world) settle() {
	for range 3 {
		w.clock.Step(15 * time.Second)
		w.sync()
	}
}

// waitFor runs checks, stepping the fake clock past the backoff between them, until cond holds.
func (w *world) waitFor(what string, cond func() bool) {
	w.t.Helper()
	for range 20 {
		if cond() {
			return
		}
		// Processes exit in the fake as they do on a node: asynchronously to the pass that
		// made them exit; give their watchers (onExit) a moment to run.
		time.Sleep(5 * time.Millisecond)
		w.clock.Step(15 * time.Second)
		w.sync()
	}
	if !cond() {
		w.t.Fatalf("not reached after 20 checks: %s", what)
	}
}

// publish mounts the driver's s3fs at the pod's target and writes vol_data.json, as kubelet does.
func (w *world) publish(podUID, pv string) string {
	target := csiclient.TargetPath(testKubelet, podUID, pv)
	vd, _ := json.Marshal(csiclient.VolData{SpecVolID: pv, VolumeHandle: "bkt/" + pv, DriverName: testDriver, NodeName: testNode})
	w.node.SetFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), vd)
	w.node.AddMount(target, "fuse.s3fs", "s3fs")
	return target
}

func secretObj(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

var goodSecret = map[string]string{"accessKeyID": "AKUNIT", "secretAccessKey": "SKUNIT-secret", "endpoint": "http://s3.local:9000"}

// storageClass names a node-publish secret that does not exist: the rescue must never use it.
func storageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "s3"}, Provisioner: testDriver,
		Parameters: map[string]string{"csi.storage.k8s.io/node-publish-secret-name": "sc-creds",
			"csi.storage.k8s.io/node-publish-secret-namespace": "default"}}
}

// pvObj is a PV bound to the claim "data" of namespace default (pvcObj("data", name)).
func pvObj(name, driver string, readOnly bool) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("pv-uid-" + name)},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName: "s3",
			ClaimRef:         &corev1.ObjectReference{Namespace: "default", Name: "data", UID: pvcUID("data")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: "bkt/" + name, ReadOnly: readOnly,
				VolumeAttributes:     map[string]string{"mounter": "s3fs"},
				NodePublishSecretRef: &corev1.SecretReference{Name: "creds", Namespace: "default"}}},
		},
	}
}

// pvcObj is a claim of namespace default, Bound to pv.
func pvcObj(name, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: pvcUID(name)},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
}

func pvcUID(name string) types.UID { return types.UID("pvc-uid-" + name) }

func podObj(name, uid, claim string, readOnly bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec: corev1.PodSpec{NodeName: testNode, Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// standard is one pod using one S3 PV with good credentials.
func standard(readOnly bool) []runtime.Object {
	return []runtime.Object{secretObj("creds", goodSecret), storageClass(), pvObj("pv-a", testDriver, false),
		pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", readOnly)}
}

func sources(mounts []stack.Mount) []string {
	var out []string
	for _, m := range mounts {
		out = append(out, m.Source)
	}
	return out
}

func counter(t *testing.T, c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var total float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		total += pb.GetCounter().GetValue() + float64(pb.GetHistogram().GetSampleCount())
	}
	return total
}

func TestRestorerLeavesHealthyTargetAlone(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.start()
	w.settle()
	if got := sources(w.node.Table().Stack(target)); !slices.Equal(got, []string{"s3fs"}) {
		t.Errorf("healthy target stack = %v, want only the driver mount", got)
	}
	if n := len(w.node.Started()); n != 0 {
		t.Errorf("started %d processes for a healthy mount", n)
	}
	if ev := w.events.All(); len(ev) != 0 {
		t.Errorf("events for a healthy mount: %v", ev)
	}
}

func TestRestorerRestoresDeadTarget(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bind on the dead target", func() bool { return len(w.node.Table().Stack(target)) == 2 })

	mounts := w.node.Table().Stack(target)
	if got := sources(mounts); !slices.Equal(got, []string{"s3fs", stack.FSName("pv-a")}) {
		t.Fatalf("target stack = %v", got)
	}
	if mounts[1].ReadOnly() {
		t.Error("read-write volume bound read-only")
	}
	staging := s3fs.Layout{StateDir: testState}.MountPoint("pv-a")
	if len(w.node.Table().Stack(staging)) != 1 || mounts[1].Dev != w.node.Table().Stack(staging)[0].Dev {
		t.Errorf("bind is not of the staging mount: %+v", w.node.Table().Stack(staging))
	}
	pw, mode, ok := w.node.File(s3fs.Layout{StateDir: testState}.PasswdFile("pv-a"))
	if !ok || string(pw) != "AKUNIT:SKUNIT-secret\n" || mode != 0o600 {
		t.Errorf("passwd file %q mode %v present %v", pw, mode, ok)
	}
	if top, _ := w.node.Table().Top(s3fs.Layout{StateDir: testState}.CredsDir()); top.FSType != "tmpfs" {
		t.Errorf("creds dir not on tmpfs: %+v", top)
	}
	started := w.node.Started()
	if len(started) != 1 || !slices.Contains(started[0], "url=http://s3.local:9000") || started[0][1] != "bkt:/pv-a" || started[0][2] != staging {
		t.Errorf("s3fs command lines: %v", started)
	}
	w.waitFor("MountBridged event", func() bool {
		return w.events.Count(corev1.EventTypeNormal, contract.ReasonMountBridged, "") == 1
	})
	if got := counter(t, w.r.Metrics().DeadFound); got != 1 {
		t.Errorf("dead mounts found = %v, want 1", got)
	}
	if got := counter(t, w.r.Metrics().TimeToRestore); got != 1 {
		t.Errorf("time-to-restore samples = %v, want 1", got)
	}

	// The staging s3fs dies: supervision notices, mounts again, binds again on top.
	w.node.Processes()[0].Crash()
	w.waitFor("second bind after staging death", func() bool {
		return len(w.node.Started()) == 2 && len(w.node.Table().Stack(target)) == 2 && fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second) == nil
	})
	if n := len(w.node.Table().Stack(staging)); n != 1 {
		t.Errorf("staging mounts = %d, want 1 (dead one removed)", n)
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target after second restore: %v", err)
	}
	w.settle()
	if n := len(w.node.Table().Stack(target)); n != 2 {
		t.Errorf("restorer kept stacking onto a healthy target (or left its dead bind): %d mounts", n)
	}
	for _, e := range w.events.All() {
		if strings.Contains(e, "SKUNIT") {
			t.Errorf("event leaks the secret: %+v", e)
		}
	}
}

func TestRestorerReadOnly(t *testing.T) {
	for name, objs := range map[string][]runtime.Object{
		"pod claim readOnly": standard(true),
		"PV readOnly": {secretObj("creds", goodSecret), storageClass(), pvObj("pv-a", testDriver, true),
			pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", false)},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, objs...)
			target := w.publish("uid-1", "pv-a")
			w.node.KillMount(target)
			w.start()
			w.waitFor("bind", func() bool { return len(w.node.Table().Stack(target)) == 2 })
			if top, _ := w.node.Table().Top(target); !top.ReadOnly() {
				t.Errorf("read-only volume bound read-write: %+v", top)
			}
		})
	}
	t.Run("dead mount was read-only", func(t *testing.T) {
		w := newWorld(t, standard(false)...)
		target := csiclient.TargetPath(testKubelet, "uid-1", "pv-a")
		w.publish("uid-1", "pv-a")
		// Replace the driver mount by a read-only one.
		_ = fakeOS(w.node).Mounter.Unmount(target, false)
		w.node.AddMount(target, "fuse.s3fs", "s3fs", "ro")
		w.node.KillMount(target)
		w.start()
		w.waitFor("bind", func() bool { return len(w.node.Table().Stack(target)) == 2 })
		if top, _ := w.node.Table().Top(target); !top.ReadOnly() {
			t.Errorf("bind over a read-only mount is read-write: %+v", top)
		}
	})
}

func TestRestorerBadInput(t *testing.T) {
	tests := []struct {
		name   string
		secret map[string]string
		fail   string
		reason string
	}{
		{name: "missing secret", reason: "SecretNotFound"},
		{name: "missing keys", secret: map[string]string{"endpoint": "http://x"}, reason: "SecretKeyMissing"},
		{name: "wrong keys", secret: goodSecret, fail: "invalid credentials(host=http://s3.local:9000)", reason: "S3fsFailed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []runtime.Object{storageClass(), pvObj("pv-a", testDriver, false), pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", false)}
			if tt.secret != nil {
				objs = append(objs, secretObj("creds", tt.secret))
			}
			w := newWorld(t, objs...)
			if tt.fail != "" {
				w.node.S3fsFailure = func([]string, []byte) string { return tt.fail }
			}
			target := w.publish("uid-1", "pv-a")
			dead, _ := w.node.Table().Top(target)
			w.node.KillMount(target)
			w.start()
			w.waitFor("retried failure events", func() bool {
				return w.events.Count(corev1.EventTypeWarning, contract.ReasonMountRestoreFailed, tt.reason+":") >= 3
			})
			if mounts := w.node.Table().Stack(target); len(mounts) != 1 || mounts[0].ID != dead.ID {
				t.Errorf("target touched: %+v", mounts)
			}
			staging := s3fs.Layout{StateDir: testState}.MountPoint("pv-a")
			if n := len(w.node.Table().Stack(staging)); n != 0 {
				t.Errorf("%d mounts left at staging", n)
			}
			if _, _, ok := w.node.File(s3fs.Layout{StateDir: testState}.PasswdFile("pv-a")); ok {
				t.Error("passwd file left after failure")
			}
			if got := counter(t, w.r.Metrics().Failures.WithLabelValues(tt.reason)); got < 3 {
				t.Errorf("failures{%s} = %v", tt.reason, got)
			}
		})
	}
}

func TestRestorerSkipsWhatIsNotItsBusiness(t *testing.T) {
	t.Run("not published yet", func(t *testing.T) {
		w := newWorld(t, standard(false)...)
		target := csiclient.TargetPath(testKubelet, "uid-1", "pv-a")
		vd, _ := json.Marshal(csiclient.VolData{SpecVolID: "pv-a"})
		w.node.SetFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), vd)
		w.start()
		w.settle()
		if w.node.Table().IsMountPoint(target) || len(w.node.Started()) != 0 {
			t.Error("mounted at a target kubelet has not published")
		}
	})
	t.Run("vol_data.json names another volume", func(t *testing.T) {
		w := newWorld(t, standard(false)...)
		target := w.publish("uid-1", "pv-a")
		vd, _ := json.Marshal(csiclient.VolData{SpecVolID: "pv-other"})
		w.node.SetFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), vd)
		w.node.KillMount(target)
		w.start()
		w.settle()
		if n := len(w.node.Table().Stack(target)); n != 1 || len(w.node.Started()) != 0 {
			t.Errorf("touched a target whose vol_data.json does not match: %d mounts", n)
		}
	})
	t.Run("not an S3 driver", func(t *testing.T) {
		w := newWorld(t, secretObj("creds", goodSecret), storageClass(), pvObj("pv-a", "ebs.csi.aws.com", false),
			pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", false))
		target := w.publish("uid-1", "pv-a")
		w.node.KillMount(target)
		w.start()
		w.settle()
		if n := len(w.node.Table().Stack(target)); n != 1 || len(w.node.Started()) != 0 {
			t.Errorf("touched a non-S3 volume: %d mounts", n)
		}
	})
	t.Run("pod on another node", func(t *testing.T) {
		p := podObj("app", "uid-1", "data", false)
		p.Spec.NodeName = "other"
		w := newWorld(t, secretObj("creds", goodSecret), storageClass(), pvObj("pv-a", testDriver, false), pvcObj("data", "pv-a"), p)
		target := w.publish("uid-1", "pv-a")
		w.node.KillMount(target)
		w.start()
		w.settle()
		if len(w.node.Started()) != 0 {
			t.Error("restored a volume of another node's pod")
		}
	})
}

func TestRestorerCleansUpAfterPodDeletion(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bind", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	w.view.DeletePod("default", "app")
	l := s3fs.Layout{StateDir: testState}
	w.waitFor("bind removed, staging stopped", func() bool {
		_, _, pw := w.node.File(l.PasswdFile("pv-a"))
		// Our bind is gone; the dead driver mount under it stays for the driver's NodeUnpublish.
		return leftForTheDriver(w, target) &&
			len(w.node.Table().Stack(l.MountPoint("pv-a"))) == 0 && !pw && w.node.Processes()[0].Exited()
	})
}

func TestRestorerTerminalPodIsGone(t *testing.T) {
	objs := standard(false)
	w := newWorld(t, objs...)
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bind", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	p := podObj("app", "uid-1", "data", false)
	p.Status.Phase = corev1.PodSucceeded
	w.view.Set(p)
	w.waitFor("our bind removed, the dead driver mount left for the driver", func() bool { return leftForTheDriver(w, target) })
	strictUnpublish(t, w, target)
}

func TestRestorerAdoptsOnStart(t *testing.T) {
	l := s3fs.Layout{StateDir: testState}
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	// An earlier agent left a healthy staging mount bound onto the target.
	w.node.AddMount(l.MountPoint("pv-a"), "fuse", stack.FSName("pv-a"))
	if err := fakeOS(w.node).Mounter.Bind(l.MountPoint("pv-a"), target, false); err != nil {
		t.Fatal(err)
	}
	// ... and a dead staging mount of a volume that no longer has pods.
	w.node.AddMount(l.MountPoint("pv-old"), "fuse", stack.FSName("pv-old"))
	w.node.KillMount(l.MountPoint("pv-old"))
	w.start()
	w.settle()
	if n := len(w.node.Started()); n != 0 {
		t.Errorf("started %d s3fs, want 0 (healthy staging re-adopted)", n)
	}
	if n := len(w.node.Table().Stack(target)); n != 2 {
		t.Errorf("target stack %d, want 2 (no duplicate bind)", n)
	}
	if n := len(w.node.Table().Stack(l.MountPoint("pv-a"))); n != 1 {
		t.Errorf("staging pv-a mounts %d, want 1", n)
	}
	if w.node.Table().IsMountPoint(l.MountPoint("pv-old")) {
		t.Error("dead staging mount of an unused volume left mounted")
	}
	// The adopted mount dies: found by the periodic check (no process to supervise) and restored.
	w.node.KillMount(l.MountPoint("pv-a"))
	w.waitFor("restore after adopted staging died", func() bool {
		return len(w.node.Started()) == 1 && fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second) == nil
	})
	if n := len(w.node.Table().Stack(target)); n != 2 {
		t.Errorf("target stack after re-restore %d, want 2 (our dead bind removed first)", n)
	}
}

func TestNewValidatesDeps(t *testing.T) {
	w := newWorld(t)
	if _, err := New(w.deps(), fakeOS(s3mounttest.NewFakeNode()), Options{}); err != nil {
		t.Fatalf("New(good) = %v", err)
	}
	for name, mutate := range map[string]func(*nodeagent.Deps, *OS, *Options){
		"no view":         func(d *nodeagent.Deps, _ *OS, _ *Options) { d.View = nil },
		"no node":         func(d *nodeagent.Deps, _ *OS, _ *Options) { d.NodeName = "" },
		"no config":       func(d *nodeagent.Deps, _ *OS, _ *Options) { d.Config = nil },
		"no events":       func(d *nodeagent.Deps, _ *OS, _ *Options) { d.Recorder = nil },
		"no clock":        func(d *nodeagent.Deps, _ *OS, _ *Options) { d.Clock = nil },
		"no OS":           func(_ *nodeagent.Deps, o *OS, _ *Options) { *o = OS{} },
		"negative":        func(_ *nodeagent.Deps, _ *OS, o *Options) { o.QuickExit = -time.Second },
		"backoff reverse": func(_ *nodeagent.Deps, _ *OS, o *Options) { o.BackoffInitial, o.BackoffMax = time.Hour, time.Second },
	} {
		d, o, opts := w.deps(), fakeOS(s3mounttest.NewFakeNode()), Options{}
		mutate(&d, &o, &opts)
		if _, err := New(d, o, opts); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

func TestRestorerKeepsStagingWhileALivePodHasItsBind(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bind", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	// Discovery loses the volume (vol_data.json gone); the pod still runs on our bind.
	if err := fakeOS(w.node).FS.Remove(filepath.Join(filepath.Dir(target), csiclient.VolDataFile)); err != nil {
		t.Fatal(err)
	}
	w.settle()
	if w.node.Processes()[0].Exited() {
		t.Fatal("stopped the s3fs a live pod's bind depends on")
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target: %v", err)
	}
}

type fakeRemounter struct {
	mu   sync.Mutex
	reqs []nodeagent.RemountRequest
	// passes is the number of requests of each RemountPods call.
	passes []int
	// before, when set, runs at each request (before it is recorded).
	before func(req nodeagent.RemountRequest)
}

func (f *fakeRemounter) RemountInContainers(_ context.Context, req nodeagent.RemountRequest) (nodeagent.RemountResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.before != nil {
		f.before(req)
	}
	f.reqs = append(f.reqs, req)
	return nodeagent.RemountResult{Fixed: []string{"app"}}, nil
}

func (f *fakeRemounter) RemountPods(ctx context.Context, reqs []nodeagent.RemountRequest) []nodeagent.RemountOutcome {
	f.mu.Lock()
	f.passes = append(f.passes, len(reqs))
	f.mu.Unlock()
	return nodeagent.RemountEach(ctx, f, reqs)
}

// Each pass is counted once at its end (pvrescue_s3_sync_duration_seconds' count): e2e absence
// checks wait on it ("two passes ended, still no bridge") instead of a fixed time.
func TestSyncCountsEachPassItEnds(t *testing.T) {
	w := newWorld(t, standard(false)...)
	w.publish("uid-1", "pv-a")
	w.start() // one pass
	if got := counter(t, w.r.Metrics().SyncSeconds); got != 1 {
		t.Fatalf("passes counted after start = %v, want 1", got)
	}
	w.settle() // three more
	if got := counter(t, w.r.Metrics().SyncSeconds); got != 4 {
		t.Errorf("passes counted after settle = %v, want 4", got)
	}
}
