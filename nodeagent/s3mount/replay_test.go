package s3mount

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

func replayWorld(t *testing.T, stages bool, extra ...runtime.Object) (*world, string) {
	pv := pvObj("pv-a", testDriver, false)
	pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	pv.Spec.MountOptions = []string{"allow_other"}
	pv.Spec.CSI.NodeStageSecretRef = &corev1.SecretReference{Name: "stage-creds", Namespace: "default"}
	objs := append([]runtime.Object{secretObj("creds", goodSecret), secretObj("stage-creds", stageSecret),
		pv, pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", false)}, extra...)
	w := newWorld(t, objs...)
	w.csi = &s3mounttest.FakeCSI{Node: w.node, Stages: stages}
	target := w.publish("uid-1", "pv-a")
	return w, target
}

// The driver answers: kubelet's call is replayed at a fresh directory and the driver's own mount
// is moved over the dead target; no s3fs of ours runs.
func TestReplayThroughTheDriver(t *testing.T) {
	w, target := replayWorld(t, false, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec: storagev1.CSIDriverSpec{PodInfoOnMount: ptr.To(true), AttachRequired: ptr.To(false)}})
	w.remount = &fakeRemounter{}
	dead, _ := w.node.Table().Top(target)
	w.node.KillMount(target)
	w.start()

	if n := len(w.node.Started()); n != 0 {
		t.Errorf("started %d s3fs although the driver answers", n)
	}
	if len(w.csi.Publish) != 1 {
		t.Fatalf("NodePublishVolume calls: %d, want 1", len(w.csi.Publish))
	}
	req := w.csi.Publish[0]
	fresh := csiclient.FreshPublishPath(testKubelet, "uid-1", "pv-a")
	if want := testKubelet + "/pods/uid-1/pvrescue~s3/pv-a"; fresh != want {
		t.Fatalf("fresh publish path %q, want %q (inside what the plugin's upstream manifest mounts)", fresh, want)
	}
	want := &csi.NodePublishVolumeRequest{
		VolumeId: "bkt/pv-a", TargetPath: fresh,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: []string{"allow_other"}}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}},
		Secrets: goodSecret,
		VolumeContext: map[string]string{"mounter": "s3fs", csiclient.CtxPodName: "app", csiclient.CtxPodNamespace: "default", csiclient.CtxPodUID: "uid-1",
			csiclient.CtxServiceAccount: "", csiclient.CtxEphemeral: "false"},
	}
	if d := cmp.Diff(want.String(), req.String()); d != "" {
		t.Errorf("NodePublishVolume request (-want +got):\n%s", d)
	}
	if got := w.csi.Sockets; len(got) == 0 || got[0] != filepath.Join(testKubelet, "plugins", testDriver, "csi.sock") {
		t.Errorf("dialled %v", got)
	}
	mounts := w.node.Table().Stack(target)
	if got := sources(mounts); !slices.Equal(got, []string{"s3fs", "s3fs"}) || mounts[1].Dev == dead.Dev {
		t.Errorf("target stack %v, want the dead driver mount + the driver's new mount", mounts)
	}
	if w.node.Table().IsMountPoint(fresh) {
		t.Error("fresh publish directory still mounted after the hand-back")
	}
	if rm := w.node.Removed(); !slices.Contains(rm, fresh) || !slices.Contains(rm, filepath.Dir(fresh)) {
		t.Errorf("removed %v, want the fresh directory %s and its parent", rm, fresh)
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target after replay: %v", err)
	}
	if got := value(t, w.r.Metrics().Restores.WithLabelValues(MethodReplay, "success")); got != 1 {
		t.Errorf("restores{replay,success} = %v", got)
	}
	if len(w.remount.reqs) != 1 || w.remount.reqs[0].DeadDevice != dead.Dev {
		t.Errorf("remount requests %+v", w.remount.reqs)
	}
	// The restored target answers: later checks leave it alone.
	w.settle()
	if n := len(w.csi.Publish); n != 1 {
		t.Errorf("republished a live target: %d calls", n)
	}
	assertReasons(t, w.events, map[string]int{contract.ReasonMountReplayed: 1, contract.ReasonMountBridged: 0, contract.ReasonBridgeRetired: 0})
}

// A staging driver: NodeStageVolume is replayed (stage secrets) at a fresh directory whose mount
// is moved over kubelet's dead staging path; NodePublishVolume then uses kubelet's staging path.
func TestReplayStagesFirst(t *testing.T) {
	w, target := replayWorld(t, true)
	stagingPath := csiclient.KubeletStagingPath(testKubelet, testDriver, "bkt/pv-a")
	w.node.AddMount(stagingPath, "fuse.s3fs", "s3fs")
	w.node.KillMount(stagingPath)
	w.node.KillMount(target)
	w.start()
	if len(w.csi.Staged) != 1 || len(w.csi.Publish) != 1 {
		t.Fatalf("stage calls %d, publish calls %d; want 1 and 1", len(w.csi.Staged), len(w.csi.Publish))
	}
	st := w.csi.Staged[0]
	if st.GetStagingTargetPath() != testKubelet+"/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/stage" ||
		!cmp.Equal(st.GetSecrets(), stageSecret) || st.GetVolumeId() != "bkt/pv-a" {
		t.Errorf("NodeStageVolume request: %v", st)
	}
	if got := w.csi.Publish[0].GetStagingTargetPath(); got != stagingPath {
		t.Errorf("NodePublishVolume staging path %q, want kubelet's %q", got, stagingPath)
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), stagingPath, time.Second); err != nil {
		t.Errorf("kubelet's staging path after replay: %v", err)
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target after replay: %v", err)
	}
}

// The driver does not answer (restarting, rolled out, kept down): our s3fs bridges in the pass
// that finds the target dead — with s3.driverDownBridgeAfter 0, the default — or once the
// target has been dead that long (10s: the wait before issue 34).
func TestBridgeWhileTheDriverIsDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration
	}{
		{"at once (default)", 0},
		{"after driverDownBridgeAfter 10s", 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, target := replayWorld(t, false)
			w.configure = func(c *config.Config) { c.S3.DriverDownBridgeAfter.Duration = tc.wait }
			w.csi.Down = true
			w.node.KillMount(target)
			w.start()
			if tc.wait > 0 {
				w.clock.Step(tc.wait / 2)
				w.sync()
				if n := len(w.node.Started()); n != 0 {
					t.Fatalf("bridged %s into a %s wait: %d s3fs", tc.wait/2, tc.wait, n)
				}
				w.clock.Step(tc.wait/2 + time.Second)
				w.sync()
			}
			if n := len(w.node.Started()); n != 1 {
				t.Fatalf("%d s3fs started, want 1", n)
			}
			if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
				t.Errorf("target after the bridge: %v", err)
			}
			if top, _ := w.node.Table().Top(target); top.Source != stack.FSName("pv-a") {
				t.Errorf("top at the target %+v, want our bridge", top)
			}
			if got := value(t, w.r.Metrics().Restores.WithLabelValues(MethodReplay, "failure")); got < 1 {
				t.Errorf("restores{replay,failure} = %v, want >= 1", got)
			}
			// Bridged: later passes start no second s3fs while the driver stays down.
			w.settle()
			if n := len(w.node.Started()); n != 1 {
				t.Errorf("%d s3fs started after more passes with the driver down, want 1", n)
			}
			assertReasons(t, w.events, map[string]int{contract.ReasonMountBridged: 1, contract.ReasonMountReplayed: 0})
		})
	}
}

// Whether the plugin answers is asked beside the live read of the PV, not after it: the
// plugin's socket is dialled while that read is still going on, and once it said it is down,
// the pass bridges without dialling it again for a replay.
func TestDriverAskedBesideThePVRead(t *testing.T) {
	w, target := replayWorld(t, false)
	w.csi.Down = true
	var mu sync.Mutex
	var dialsAtRead []int // at each read of the PV by the pass, before the bridge started
	w.view.BeforeRead = func(kind string) {
		w.r.mu.Lock()
		inPass := w.r.inflight["pv-a"]
		w.r.mu.Unlock()
		if kind != "PersistentVolume" || !inPass || len(w.node.Started()) > 0 {
			return // discovery's reads, before the pass, and reads after the bridge
		}
		// A slow API server: the pass's read waits (at most ten seconds: a loaded machine) for
		// the plugin to be asked.
		deadline := time.Now().Add(10 * time.Second)
		for w.csi.Dials() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		dialsAtRead = append(dialsAtRead, w.csi.Dials())
		mu.Unlock()
	}
	w.node.KillMount(target)
	w.start()
	if n := len(w.node.Started()); n != 1 {
		t.Fatalf("%d s3fs started, want the bridge", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialsAtRead) == 0 || dialsAtRead[0] == 0 {
		t.Errorf("dials seen at each read of the PV before the bridge: %v; want the plugin asked while the pass read it", dialsAtRead)
	}
	if n := w.csi.Dials(); n != 1 {
		t.Errorf("the plugin was dialled %d times by the pass that bridged; want once (the probe), no replay after it said it is down", n)
	}
}

// The driver answers but its replay fails (here its result is refused): no bridge before
// s3.bridgeAfter (the driver may succeed on a retry), then our s3fs bridges.
func TestBridgeAfterTheReplayFails(t *testing.T) {
	w, target := replayWorld(t, false)
	w.csi.Result = func(n *s3mounttest.FakeNode, p string) bool { n.AddMount(p, "tmpfs", "tmpfs"); return true }
	w.node.KillMount(target)
	w.start()
	w.clock.Step(5 * time.Second)
	w.sync()
	if n := len(w.node.Started()); n != 0 {
		t.Fatalf("bridged 5s after a failed replay, before bridgeAfter (10s): %d s3fs", n)
	}
	if len(w.csi.Publish) < 2 {
		t.Errorf("replay not retried: %d NodePublishVolume calls", len(w.csi.Publish))
	}
	w.waitFor("bridged after bridgeAfter", func() bool { return len(w.node.Started()) == 1 })
	if top, _ := w.node.Table().Top(target); top.Source != stack.FSName("pv-a") {
		t.Errorf("top at the target %+v, want our bridge", top)
	}
}

// A plugin in a crash loop: each death of the driver's mount with the driver down is bridged
// at once and handed back when the driver answers, up to s3.bridgeFlapLimit (3 here) bridges
// within s3.bridgeFlapWindow (10m here); the next waits s3.bridgeAfter. Past the window, at once
// again.
func TestBridgeFlapLimit(t *testing.T) {
	w, target := replayWorld(t, false)
	w.configure = func(c *config.Config) { c.S3.BridgeFlapLimit, c.S3.BridgeFlapWindow.Duration = 3, 10*time.Minute }
	w.csi.Down = true
	w.node.KillMount(target)
	w.start()
	started := func(want int, when string) {
		t.Helper()
		if n := len(w.node.Started()); n != want {
			t.Fatalf("%s: %d s3fs started, want %d", when, n, want)
		}
	}
	handBack := func() {
		t.Helper()
		w.csi.Down = false
		w.clock.Step(2 * time.Second)
		w.sync() // swap
		w.sync() // retire
		if top, _ := w.node.Table().Top(target); func() bool { _, ours := stack.PVFromFSName(top.Source); return ours }() {
			t.Fatalf("not handed back: top %+v", top)
		}
	}
	die := func(after time.Duration) {
		w.clock.Step(after)
		w.csi.Down = true
		w.node.KillMount(target) // the driver's new mount dies with its plugin again
		w.sync()
	}
	started(1, "first death")
	for i := 2; i <= 3; i++ {
		handBack()
		die(20 * time.Second)
		started(i, fmt.Sprintf("death %d within the flap window", i))
	}
	handBack()
	die(20 * time.Second)
	started(3, "death 4 within the flap window (limit 3): the bridgeAfter wait, not at once")
	w.clock.Step(11 * time.Second)
	w.sync()
	started(4, "death 4, bridgeAfter later")
	handBack()
	die(11 * time.Minute)
	started(5, "a death after a calm flap window: at once again")
}

// Many pods of one PV: every target is bound to the bridge before the containers of any pod are
// remounted, so the last pod's target does not wait for the other pods' remounts, and the
// containers of all pods are remounted in one pass.
func TestBridgeBindsEveryTargetBeforeRemounting(t *testing.T) {
	w, target := replayWorld(t, false, podObj("app2", "uid-2", "data", false), podObj("app3", "uid-3", "data", false))
	targets := []string{target, w.publish("uid-2", "pv-a"), w.publish("uid-3", "pv-a")}
	var unbound []string
	w.remount = &fakeRemounter{before: func(nodeagent.RemountRequest) {
		for _, tg := range targets {
			if top, _ := w.node.Table().Top(tg); top.Source != stack.FSName("pv-a") && !slices.Contains(unbound, tg) {
				unbound = append(unbound, tg)
			}
		}
	}}
	w.csi.Down = true
	for _, tg := range targets {
		w.node.KillMount(tg)
	}
	w.start()
	if n := len(w.remount.reqs); n != 3 {
		t.Fatalf("remount requests %d, want one per pod (3)", n)
	}
	// One remounter pass for the three pods: the node's processes and the agent's mount table
	// are read once, not once per pod.
	if fmt.Sprint(w.remount.passes) != "[3]" {
		t.Errorf("remounter passes with %v requests, want one pass of 3", w.remount.passes)
	}
	if len(unbound) > 0 {
		t.Errorf("containers remounted while targets %v were not bound to the bridge yet", unbound)
	}
	assertReasons(t, w.events, map[string]int{contract.ReasonMountBridged: 3})
}

// A dead mount of a type the driver's profile does not bridge (neither s3fs nor a mounter bridged
// with s3fs: geesefs, rclone) is reported, never bridged.
func TestNoBridgeForAMountWeCannotReproduce(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := csiclient.TargetPath(testKubelet, "uid-1", "pv-a")
	w.publish("uid-1", "pv-a")
	_ = fakeOS(w.node).Mounter.Unmount(target, false)
	w.node.AddMount(target, "fuse.goofys", "goofys")
	w.node.KillMount(target)
	w.start()
	w.settle()
	if n := len(w.node.Started()); n != 0 {
		t.Errorf("bridged a goofys mount with s3fs")
	}
	if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonMountRestoreFailed, "CannotReproduce:"); n == 0 {
		t.Errorf("not reported; events %+v", w.events.All())
	}
}

var stageSecret = map[string]string{"accessKeyID": "AKSTAGE", "secretAccessKey": "SKSTAGE-secret"}

// The driver's FUSE process dies three times in a row (once across an agent restart): restored
// through the driver each time, and the target never holds more than the first dead mount plus
// one live one — the dead mounts we handed back are recognised by their recorded device.
func TestReplayStackStaysBounded(t *testing.T) {
	w, target := replayWorld(t, false)
	w.node.KillMount(target)
	w.start()
	for i := 0; i < 3; i++ {
		if i == 2 { // a new agent: the record of handed-back mounts is read from the state dir
			w.start()
		}
		w.node.KillMount(target)
		w.clock.Step(time.Second)
		w.sync()
		if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
			t.Fatalf("after death %d: target %v", i+1, err)
		}
		if n := len(w.node.Table().Stack(target)); n != 2 {
			t.Errorf("after death %d: %d mounts at the target, want 2", i+1, n)
		}
	}
	if n := len(w.csi.Publish); n != 4 {
		t.Errorf("NodePublishVolume calls %d, want 4", n)
	}
	if n := len(w.node.Started()); n != 0 {
		t.Errorf("started %d s3fs of ours", n)
	}
}

// Plugin kept down → the bridge restores; plugin back → the volume moves to the driver's own
// mount and the bridge is retired (its s3fs stopped), the stack still the dead mount + one live.
func TestBridgeRetiredWhenTheDriverAnswersAgain(t *testing.T) {
	w, target := replayWorld(t, false)
	w.csi.Down = true
	w.node.KillMount(target)
	w.start()
	w.clock.Step(11 * time.Second)
	w.sync()
	if top, _ := w.node.Table().Top(target); top.Source != stack.FSName("pv-a") {
		t.Fatalf("not bridged: top %+v", top)
	}
	w.csi.Down = false
	w.clock.Step(2 * time.Second)
	select { // nothing asked for a pass yet
	case <-w.r.kick:
	default:
	}
	w.sync() // the driver answers: swap
	select {
	case <-w.r.kick: // the swap asked for the pass that retires the bridge, not the next check
	default:
		t.Fatal("a target moved to the driver's mount, but no pass was asked for to retire the bridge")
	}
	w.sync() // the bridge has no bind left: retired
	mounts := w.node.Table().Stack(target)
	if got := sources(mounts); !slices.Equal(got, []string{"s3fs", "s3fs"}) {
		t.Errorf("target stack %v, want the dead driver mount + the driver's new mount", got)
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target after the swap: %v", err)
	}
	if p := w.node.Processes(); len(p) != 1 || !p[0].Exited() {
		t.Errorf("bridge s3fs not stopped after the swap")
	}
	if got := value(t, w.r.Metrics().BridgesActive); got != 0 {
		t.Errorf("bridges_active = %v, want 0", got)
	}
	if w.node.Table().IsMountPoint(s3fs.Layout{StateDir: testState}.MountPoint("pv-a")) {
		t.Error("bridge staging mount left")
	}
	assertReasons(t, w.events, map[string]int{contract.ReasonMountBridged: 1, contract.ReasonBridgeRetired: 1, contract.ReasonMountReplayed: 0})
}

// An app holds a file open on our bridge bind when the driver answers again. A plain
// unmount of the bind fails (EBUSY) for as long as the file is open; the bind is provably ours,
// so it is detached lazily and the target moves to the driver's mount at once.
func TestBridgeRetiredWhileAFileIsOpenOnIt(t *testing.T) {
	w, target := replayWorld(t, false)
	w.csi.Down = true
	w.node.KillMount(target)
	w.start()
	w.clock.Step(11 * time.Second)
	w.sync()
	if top, _ := w.node.Table().Top(target); top.Source != stack.FSName("pv-a") {
		t.Fatalf("not bridged: top %+v", top)
	}
	w.node.OpenFile(target)
	w.csi.Down = false
	w.clock.Step(2 * time.Second)
	w.sync() // the driver answers: swap
	w.sync()
	mounts := w.node.Table().Stack(target)
	if got := sources(mounts); !slices.Equal(got, []string{"s3fs", "s3fs"}) {
		t.Fatalf("target stack %v, want the dead driver mount + the driver's new mount", got)
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target after the swap: %v", err)
	}
	assertReasons(t, w.events, map[string]int{contract.ReasonMountBridged: 1, contract.ReasonBridgeRetired: 1})
	// The bridge retired, but its s3fs is never stopped while the file is open on it: it exits
	// by itself once the file is closed, and only then are its record and cgroup removed. The
	// retiring record survives an agent restart, and the new agent watches it.
	l := s3fs.Layout{StateDir: testState}
	proc := w.node.Processes()[0]
	if proc.Exited() {
		t.Fatal("bridge s3fs stopped while a file is open on it")
	}
	if _, _, ok := w.node.File(l.RetiringRecordFile("pv-a", proc.Pid())); !ok {
		t.Fatal("no retiring record for the bridge s3fs")
	}
	w.start() // an agent restart
	w.settle()
	if proc.Exited() {
		t.Fatal("bridge s3fs stopped after an agent restart while a file is open on it")
	}
	w.node.CloseFiles(proc.Dev())
	w.waitFor("retired bridge exited and forgotten after the last file closed", func() bool {
		_, _, rec := w.node.File(l.RetiringRecordFile("pv-a", proc.Pid()))
		return proc.Exited() && !rec
	})
}

// assertReasons checks the number of Normal Events on the pod by reason: tools tell the restore
// methods apart by reason alone.
func assertReasons(t *testing.T, l *s3mounttest.Events, want map[string]int) {
	t.Helper()
	for reason, n := range want {
		if got := l.Count(corev1.EventTypeNormal, reason, ""); got != n {
			t.Errorf("%s Events: %d, want %d", reason, got, n)
		}
	}
}

// Our bridge dies while the driver is still down: bridged again at once, without a second
// BridgeAfter wait.
func TestRebridgeWithoutWaitingAgain(t *testing.T) {
	w, target := replayWorld(t, false)
	w.csi.Down = true
	w.node.KillMount(target)
	w.start()
	w.clock.Step(11 * time.Second)
	w.sync()
	if n := len(w.node.Started()); n != 1 {
		t.Fatalf("first bridge: %d s3fs", n)
	}
	w.clock.Step(11 * time.Second) // past the crash-loop window
	w.node.Processes()[0].Crash()
	w.clock.Step(time.Second)
	w.sync()
	if n := len(w.node.Started()); n != 2 {
		t.Fatalf("after our bridge died: %d s3fs started, want 2 (no second wait)", n)
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target: %v", err)
	}
	if n := len(w.node.Table().Stack(target)); n != 2 {
		t.Errorf("stack %d, want 2", n)
	}
}

// The plugin is dialled where it registered with kubelet; without a registration, at
// <kubelet>/plugins/<driver>/csi.sock.
func TestReplayDialsTheRegisteredEndpoint(t *testing.T) {
	for _, c := range []struct {
		name     string
		registry csiclient.Registry
		want     string
	}{
		{"registered", s3mounttest.FakeRegistry{testDriver: "/csi/elsewhere.sock"}, "/csi/elsewhere.sock"},
		{"not registered", s3mounttest.FakeRegistry{}, csiclient.PluginSocket(testKubelet, testDriver)},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, target := replayWorld(t, false)
			w.registry = c.registry
			w.node.KillMount(target)
			w.start()
			if len(w.csi.Sockets) == 0 || w.csi.Sockets[0] != c.want {
				t.Errorf("dialled %q, want %q", w.csi.Sockets, c.want)
			}
			if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
				t.Errorf("target: %v", err)
			}
		})
	}
}
