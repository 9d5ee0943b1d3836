package s3mount

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Injection attempts through a Secret's endpoint or region, or a bucket that reads as a flag,
// are refused with an Event: no s3fs is started and no passwd file is written.
func TestInjectionRefusedWithEventNothingStarted(t *testing.T) {
	tests := []struct {
		name   string
		secret map[string]string
		attrs  map[string]string
	}{
		{name: "comma options in the Secret's endpoint", secret: map[string]string{"accessKeyID": "AK1", "secretAccessKey": "SK1",
			"endpoint": "http://s3.local:9000,passwd_file=/etc/shadow"}},
		{name: "comma options in the Secret's region", secret: map[string]string{"accessKeyID": "AK1", "secretAccessKey": "SK1",
			"region": "eu,use_cache=/"}},
		{name: "bucket attribute -o...", secret: goodSecret, attrs: map[string]string{"bucket": "-opasswd_file=/etc/shadow"}},
		{name: "options attribute smuggling a file", secret: goodSecret, attrs: map[string]string{"options": "-o retries=1,use_cache=/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pv := pvObj("pv-a", testDriver, false)
			for k, v := range tt.attrs {
				pv.Spec.CSI.VolumeAttributes[k] = v
			}
			w := newWorld(t, secretObj("creds", tt.secret), pv, pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", false))
			target := w.publish("uid-1", "pv-a")
			w.node.KillMount(target)
			w.start()
			w.settle()
			if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonMountRestoreFailed, "UnsafeVolumeAttributes:"); n == 0 {
				t.Errorf("no UnsafeVolumeAttributes event; events: %+v", w.events.All())
			}
			if n := len(w.node.Started()); n != 0 {
				t.Errorf("started %d processes: %v", n, w.node.Started())
			}
			if _, _, ok := w.node.File(s3fs.Layout{StateDir: testState}.PasswdFile("pv-a")); ok {
				t.Error("passwd file written for a refused volume")
			}
			if n := len(w.node.Table().Stack(target)); n != 1 {
				t.Errorf("target stack %d, want the dead driver mount only", n)
			}
		})
	}
}

// Credentials come only from the PV: a StorageClass naming a node-publish secret (which exists)
// is never read, and a PV without a reference is reported.
func TestCredentialsOnlyFromThePV(t *testing.T) {
	pv := pvObj("pv-a", testDriver, false)
	pv.Spec.CSI.NodePublishSecretRef = nil
	w := newWorld(t, secretObj("sc-creds", goodSecret), storageClass(), pv, pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", false))
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.settle()
	if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonMountRestoreFailed, "NoSecretRef:"); n == 0 {
		t.Errorf("PV without a secret reference not reported; events: %+v", w.events.All())
	}
	if n := w.view.Reads("StorageClass") + w.view.Reads("Secret"); n != 0 {
		t.Errorf("read %d StorageClasses/Secrets for a PV without a secret reference", n)
	}
	if n := len(w.node.Started()); n != 0 {
		t.Errorf("started %d processes", n)
	}
}

// The FUSE program killed three times in a row: restored each time, the target never holds more
// than the driver's dead mount plus one live mount, and no process of ours is left running but
// the current one.
func TestBoundedStackAcrossRepeatedDeaths(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	for i := 0; i < 3; i++ {
		procs := w.node.Processes()
		procs[len(procs)-1].Crash()
		w.waitFor("restored after death", func() bool {
			return len(w.node.Processes()) == len(procs)+1 && fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second) == nil
		})
		if got := sources(w.node.Table().Stack(target)); !slices.Equal(got, []string{"s3fs", stack.FSName("pv-a")}) {
			t.Errorf("after death %d: stack %v, want the driver's dead mount + one bind", i+1, got)
		}
		running := 0
		for _, p := range w.node.Processes() {
			if !p.Exited() {
				running++
			}
		}
		if running != 1 {
			t.Errorf("after death %d: %d s3fs running, want 1", i+1, running)
		}
	}
	if got := value(t, w.r.Metrics().Restores.WithLabelValues(MethodBridge, "success")); got != 4 {
		t.Errorf("restores{bridge,success} = %v, want 4", got)
	}
	if got := value(t, w.r.Metrics().BridgesActive); got != 1 {
		t.Errorf("bridges_active = %v, want 1", got)
	}
}

// A hung mount (statfs times out, the daemon holds the connection) is never replaced, however
// long it lasts: no second s3fs, no replay, nothing stacked; MountHung once, the metrics, the
// Node condition after s3.hungConditionAfter; when the daemon answers again, all clear.
func TestHungIsNotDead(t *testing.T) {
	w, target := replayWorld(t, false)
	before := w.node.Table().Stack(target)
	w.node.Hang(target)
	w.start()
	for range 20 { // 5 minutes
		w.clock.Step(15 * time.Second)
		w.sync()
	}
	if n := len(w.node.Started()); n != 0 {
		t.Errorf("started %d s3fs for a hung mount", n)
	}
	if n := len(w.csi.Publish) + len(w.csi.Staged); n != 0 {
		t.Errorf("replayed %d calls over a hung mount", n)
	}
	if after := w.node.Table().Stack(target); !cmp.Equal(after, before) {
		t.Errorf("target stack changed under a hung mount:\n before %v\n after  %v", before, after)
	}
	if got := value(t, w.r.Metrics().DeadFound); got != 0 {
		t.Errorf("dead_mounts_found = %v for a hung mount", got)
	}
	if got := value(t, w.r.Metrics().HungFound); got != 1 {
		t.Errorf("hung_mounts_found = %v, want 1", got)
	}
	if got := value(t, w.r.Metrics().MountsHung); got != 1 {
		t.Errorf("mounts_hung = %v, want 1", got)
	}
	if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonMountHung, ""); n != 1 {
		t.Errorf("%d MountHung Events, want 1", n)
	}
	if len(w.node.Aborted()) != 0 {
		t.Errorf("aborted %v with s3.abortHungAfter off", w.node.Aborted())
	}
	assertReasons(t, w.events, map[string]int{contract.ReasonMountReplayed: 0, contract.ReasonMountBridged: 0, contract.ReasonMountRestoreFailed: 0})
	if st := hungCondition(t, w); st != corev1.ConditionTrue {
		t.Errorf("Node condition %s = %q after 5 minutes hung, want True", contract.ConditionS3MountHung, st)
	}
	w.node.Resume(target)
	w.sync()
	if got := value(t, w.r.Metrics().MountsHung); got != 0 {
		t.Errorf("mounts_hung = %v after the daemon answers again", got)
	}
	if st := hungCondition(t, w); st != corev1.ConditionFalse {
		t.Errorf("Node condition %s = %q after the daemon answers again, want False", contract.ConditionS3MountHung, st)
	}
	if after := w.node.Table().Stack(target); !cmp.Equal(after, before) {
		t.Errorf("target stack changed after the daemon answered again: %v", after)
	}
}

// With s3.abortHungAfter the hung connection is aborted through fusectl once it has been hung
// that long, and only then is the (now dead) mount restored through the driver.
func TestAbortHungAfter(t *testing.T) {
	w, target := replayWorld(t, false)
	w.configure = func(c *config.Config) { c.S3.AbortHungAfter.Duration = time.Minute }
	hung, _ := w.node.Table().Top(target)
	w.node.Hang(target)
	w.start()
	for range 3 { // 45 s < 1 min
		w.clock.Step(15 * time.Second)
		w.sync()
	}
	if len(w.node.Aborted()) != 0 || len(w.csi.Publish) != 0 {
		t.Fatalf("before abortHungAfter: aborted %v, %d publish calls", w.node.Aborted(), len(w.csi.Publish))
	}
	w.clock.Step(20 * time.Second)
	w.sync() // aborts
	w.sync() // dead now: replayed
	if got := w.node.Aborted(); !slices.Equal(got, []string{hung.Dev}) {
		t.Errorf("aborted %v, want [%s]", got, hung.Dev)
	}
	if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonMountHungAborted, ""); n != 1 {
		t.Errorf("%d MountHungAborted Events, want 1", n)
	}
	if len(w.csi.Publish) != 1 {
		t.Fatalf("publish calls after the abort: %d, want 1", len(w.csi.Publish))
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target after the abort and replay: %v", err)
	}
	if got := value(t, w.r.Metrics().HungAborts.WithLabelValues("success")); got != 1 {
		t.Errorf("hung_aborts{success} = %v", got)
	}
}

// hungCondition is the status of S3MountHung in the last status patch of the Node ("": none).
func hungCondition(t *testing.T, w *world) corev1.ConditionStatus {
	t.Helper()
	var st corev1.ConditionStatus
	for _, a := range w.client.Actions() {
		pa, ok := a.(k8stesting.PatchAction)
		if !ok || a.GetSubresource() != "status" {
			continue
		}
		var p struct {
			Status struct{ Conditions []corev1.NodeCondition } `json:"status"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &p); err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == contract.ConditionS3MountHung {
				st = c.Status
			}
		}
	}
	return st
}

// Teardown removes only what is provably ours, never the last mount at a target before kubelet's
// teardown (a driver's plain-umount NodeUnpublish needs it), and a dead S3-driver mount only after
// kubelet's teardown took the mount we put on it.
func TestTeardownTouchesOnlyWhatItMay(t *testing.T) {
	t.Run("terminating pod with running containers keeps its mounts", func(t *testing.T) {
		w := newWorld(t, standard(false)...)
		target := w.publish("uid-1", "pv-a")
		w.node.KillMount(target)
		w.start()
		p := podObj("app", "uid-1", "data", false)
		now := metav1.Now()
		p.DeletionTimestamp = &now
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		w.view.Set(p)
		w.settle()
		if n := len(w.node.Table().Stack(target)); n != 2 {
			t.Errorf("stack %d while containers still run, want 2", n)
		}
	})
	t.Run("gone pod with a live driver mount", func(t *testing.T) {
		w := newWorld(t, standard(false)...)
		target := w.publish("uid-1", "pv-a")
		w.start()
		w.view.DeletePod("default", "app")
		w.settle()
		if n := len(w.node.Table().Stack(target)); n != 1 {
			t.Errorf("live driver mount of a gone pod touched: %d mounts", n)
		}
	})
	t.Run("gone pod, dead mount of a driver that is not S3", func(t *testing.T) {
		w := newWorld(t)
		target := csiclient.TargetPath(testKubelet, "uid-9", "pv-x")
		vd, _ := json.Marshal(csiclient.VolData{SpecVolID: "pv-x", DriverName: "ebs.csi.aws.com"})
		w.node.SetFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), vd)
		w.node.AddMount(target, "fuse.other", "other")
		w.node.KillMount(target)
		w.start()
		w.settle()
		if n := len(w.node.Table().Stack(target)); n != 1 {
			t.Errorf("dead mount of a non-S3 driver removed: %d mounts left", n)
		}
	})
	t.Run("gone pod whose target only has the dead driver mount, nothing of ours was there", func(t *testing.T) {
		w := newWorld(t)
		target := csiclient.TargetPath(testKubelet, "uid-9", "pv-x")
		vd, _ := json.Marshal(csiclient.VolData{SpecVolID: "pv-x", DriverName: testDriver})
		w.node.SetFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), vd)
		w.node.AddMount(target, "fuse.s3fs", "s3fs")
		w.node.KillMount(target)
		w.start()
		w.settle()
		if !leftForTheDriver(w, target) {
			t.Errorf("dead S3 driver mount of a gone pod touched before kubelet's teardown: stack %v", sources(w.node.Table().Stack(target)))
		}
		strictUnpublish(t, w, target)
		checkTeardownHelp(t, w, 0, 0)
	})
}

// After a restore the container remounter is asked to move the pod's containers from the dead
// driver mount to the target, and the health series follows the target and goes with the pod.
func TestRemounterAndHealthSeries(t *testing.T) {
	w := newWorld(t, standard(false)...)
	w.remount = &fakeRemounter{}
	target := w.publish("uid-1", "pv-a")
	dead, _ := w.node.Table().Top(target)
	w.node.KillMount(target)
	w.start()
	w.remount.mu.Lock()
	reqs := slices.Clone(w.remount.reqs)
	w.remount.mu.Unlock()
	if len(reqs) != 1 || reqs[0].DeadDevice != dead.Dev || reqs[0].DeadRoot != "/" || reqs[0].LivePath != target || reqs[0].Pod.Name != "app" {
		t.Fatalf("remount requests %+v, want one for dev %s at %s", reqs, dead.Dev, target)
	}
	if n := w.events.Count(corev1.EventTypeNormal, contract.ReasonContainersRemounted, ""); n != 1 {
		t.Errorf("ContainersRemounted events: %d", n)
	}
	w.sync()
	if got := value(t, w.r.Metrics().MountHealthy.WithLabelValues("pv-a", "default", "app")); got != 1 {
		t.Errorf("mount_healthy = %v after restore, want 1", got)
	}
	w.view.DeletePod("default", "app")
	w.sync()
	if n := series(w.r.Metrics().MountHealthy); n != 0 {
		t.Errorf("%d mount_healthy series left after the pod went away", n)
	}
	w.r.mu.Lock()
	left := len(w.r.deadSince) + len(w.r.hungSince) + len(w.r.healthy) + len(w.r.retry)
	w.r.mu.Unlock()
	if left != 0 {
		t.Errorf("%d state entries left after the pod went away", left)
	}
}

var _ = runtime.Object(nil)

// value reads one counter or gauge.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var total float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		total += pb.GetCounter().GetValue() + pb.GetGauge().GetValue()
	}
	return total
}

// series counts the series a collector exports.
func series(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}
