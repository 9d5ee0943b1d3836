//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/disks"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/monitoring"
)

const (
	alertsNS     = "e2e-alerts"
	alertsDiskPV = "e2e-alerts-disk"
	alertsS3PV   = "e2e-alerts-s3"
	// /dev/loop410: in testenv.TestLoops, clear of the suite's disks (401..403).
	alertsDiskMinor = 410
	// alertTimeScale: two minutes of the shipped rules are a second in this test
	// (monitoring.TimeScaled): the longest wait, a fake active an hour, becomes 30 s; the shortest,
	// a mount dead 5 minutes, 2.5 s — still longer than Prometheus's 2 s evaluation interval here.
	alertTimeScale = 120
)

// The alerts a lost disk and a lost mount must raise, with the PV each is about.
var (
	diskAlerts  = []string{"PVRescueLocalDiskMissingTooLong", "PVRescueFakeDeviceActiveTooLong"}
	mountAlerts = []string{"PVRescueDeadMountNotRestored"}
)

// alertsOnFailures proves, with the real Prometheus of TestHelm, that the lost-disk and lost-mount
// alerts fire while their failure lasts and resolve after it ends.
//
// The shipped rules wait minutes (a disk missing 30 minutes, a fake active an hour, a mount dead 5
// minutes). Prometheus is reloaded with monitoring.TimeScaled(rules, alertTimeScale): the same
// expressions, labels and annotations, with every `for:` and age threshold divided by 120, so two
// minutes become a second. The failures are real:
//   - lost disk: the /dev/disk/by-id link of a local block PV in use by a guarded pod is removed
//     (the agent makes its fake there and reports the disk missing); plugged back, the agent sees
//     the real disk and drops both series.
//   - lost mount: the S3 server stops and the test CSI plugin is killed, so its s3fs dies and the
//     pod's mount goes dead, and neither the replay through the driver nor the agent's bridge can
//     restore it while S3 is down (a mount restored within seconds never alerts, by design); the
//     server and the plugin come back, the agent restores the mount, its health gauge returns to 1.
//
// e holds the cluster, its S3 server and the test CSI plugin (running).
func alertsOnFailures(ctx context.Context, t *testing.T, e *env, prom *stack.Prometheus, rules []byte) {
	c := e.c
	cs := c.Client
	framework.Namespace(t, cs, alertsNS, map[string]string{contract.LabelInject: contract.LabelInjectEnabled})
	disk := alertsLocalDisk(ctx, t, c)
	if _, err := e.s3.Bucket(s3Bucket); err != nil { // an empty bucket: only the mount's health matters here
		t.Fatal(err)
	}
	s3Objects(t, e, alertsNS, alertsS3PV)
	if _, err := cs.CoreV1().Pods(alertsNS).Create(ctx, s3Pod("s3app", c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the S3 pod: %v", err)
	}
	framework.WaitPod(t, cs, alertsNS, "disk-app", 3*time.Minute, "Running on its local disk", framework.Running)
	framework.WaitPod(t, cs, alertsNS, "s3app", 2*time.Minute, "Running on its S3 volume", framework.Running)
	healthy := fmt.Sprintf(`pvrescue_s3_mount_healthy{pv=%q,namespace=%q,pod="s3app"}`, alertsS3PV, alertsNS)
	waitFor(t, time.Minute, "Prometheus to see the S3 mount healthy", func() (bool, string) {
		v, err := prom.Query(ctx, healthy+" == 1")
		if err != nil {
			return false, err.Error()
		}
		return len(v) == 1, fmt.Sprintf("%d series", len(v))
	})

	scaled, changed, err := monitoring.TimeScaled(rules, alertTimeScale)
	if err != nil {
		t.Fatal(err)
	}
	if err := prom.SetRules(ctx, scaled); err != nil {
		t.Fatal(err)
	}
	var waits []string
	for _, ch := range changed {
		waits = append(waits, fmt.Sprintf("%s %s %s→%s", ch.Alert, ch.What, ch.From, ch.To))
	}
	t.Logf("Prometheus reloaded with the rules time-scaled by %d (same expressions): %s", alertTimeScale, strings.Join(waits, ", "))
	waitFor(t, 30*time.Second, "the scaled rules to be loaded and evaluated", func() (bool, string) {
		rs, err := prom.Rules(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range rs {
			if r.Name == mountAlerts[0] && r.Duration == 5*60.0/alertTimeScale && r.Health == "ok" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s not yet loaded with for: %gs and evaluated", mountAlerts[0], 5*60.0/alertTimeScale)
	})
	if a := activeAlerts(ctx, t, prom, alertsDiskPV, alertsS3PV); len(a) > 0 {
		t.Fatalf("alerts active before any failure: %v", a)
	}

	// The failures.
	w := watchAlerts(ctx, prom)
	defer w.Stop()
	t.Logf("unplugging %s (PV %s, in use by pod disk-app); stopping S3 and killing the CSI plugin (PV %s, pod s3app)", disk.Link(), alertsDiskPV, alertsS3PV)
	diskLost := time.Now()
	if err := disk.Unplug(); err != nil {
		t.Fatal(err)
	}
	if err := e.s3.Stop(); err != nil {
		t.Fatalf("stop S3: %v", err)
	}
	mountLost := time.Now()
	if err := e.csi.Stop(ctx); err != nil {
		t.Fatalf("stop the CSI plugin pod (kept down): %v", err)
	}

	// The mount: its alert fires while it is dead, then S3 and the plugin come back and it resolves.
	mountFired := w.wait(t, alertsS3PV, mountAlerts, false, 2*time.Minute)
	if v, err := prom.Query(ctx, healthy+" == 0"); err != nil || len(v) != 1 {
		t.Errorf("the mount alert fires but Prometheus does not see the mount dead now: %v %v", v, err)
	}
	t.Logf("alerts while the mount is dead and S3 is down: %v", activeAlerts(ctx, t, prom, alertsS3PV))
	mountBack := time.Now()
	if err := e.s3.Start(ctx); err != nil {
		t.Fatalf("start S3 again: %v", err)
	}
	if err := e.csi.Start(ctx); err != nil {
		t.Fatalf("bring the CSI plugin pod back: %v", err)
	}
	mountResolved := w.wait(t, alertsS3PV, mountAlerts, true, 3*time.Minute)
	waitFor(t, time.Minute, "Prometheus to see the restored mount healthy", func() (bool, string) {
		v, err := prom.Query(ctx, healthy+" == 1")
		return err == nil && len(v) == 1, fmt.Sprintf("%v %v", v, err)
	})

	// The disk: both alerts fire while it is missing (the fake stands in), then it comes back.
	diskFired := w.wait(t, alertsDiskPV, diskAlerts, false, 3*time.Minute)
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, alertsDiskPV, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Annotations[contract.AnnotationFakeDevice] == "" {
		t.Errorf("the disk alerts fire but PV %s carries no %s annotation", alertsDiskPV, contract.AnnotationFakeDevice)
	}
	t.Logf("alerts while the disk is missing: %v", activeAlerts(ctx, t, prom, alertsDiskPV))
	diskBack := time.Now()
	if err := disk.Plug(); err != nil {
		t.Fatal(err)
	}
	diskResolved := w.wait(t, alertsDiskPV, diskAlerts, true, 2*time.Minute)
	if v, err := prom.Query(ctx, fmt.Sprintf(`pvrescue_localdisk_disk_missing{pv=%q}`, alertsDiskPV)); err != nil || len(v) != 0 {
		t.Errorf("disk back but still reported missing: %v %v", v, err)
	}
	for _, a := range diskAlerts {
		t.Logf("RESULT alert %s (PV %s): %sfiring %s after the disk was unplugged, resolved %s after it was plugged back",
			a, alertsDiskPV, w.pendingSince(a, alertsDiskPV, diskLost), diskFired[a].Sub(diskLost).Round(100*time.Millisecond), diskResolved[a].Sub(diskBack).Round(100*time.Millisecond))
	}
	for _, a := range mountAlerts {
		t.Logf("RESULT alert %s (PV %s): %sfiring %s after the mount died (S3 down, plugin killed), resolved %s after S3 and the plugin came back",
			a, alertsS3PV, w.pendingSince(a, alertsS3PV, mountLost), mountFired[a].Sub(mountLost).Round(100*time.Millisecond), mountResolved[a].Sub(mountBack).Round(100*time.Millisecond))
	}
}

// alertsLocalDisk makes a loop "disk" linked from /dev/disk/by-id, a local block PV of the
// configured class on it, its claim, and a pod using it (the webhook injects the guard). The disk
// stays to the end: cluster teardown detaches loop devices backed by files in the work dir and
// removes the suite's by-id links.
func alertsLocalDisk(ctx context.Context, t *testing.T, c *cluster.Cluster) *disks.Disk {
	t.Helper()
	cs := c.Client
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: localClass()}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create storageclass: %v", err)
	}
	d, err := disks.Make(filepath.Join(c.Opts.WorkDir, "disks"), "alerts", alertsDiskMinor, diskSize)
	if err != nil {
		t.Fatalf("make the disk: %v", err)
	}
	createLocalBlockPV(t, cs, alertsDiskPV, d.Link(), c.Opts.NodeName, alertsNS, "disk")
	if _, err := cs.CoreV1().PersistentVolumeClaims(alertsNS).Create(ctx, localBlockClaim(alertsNS, "disk", alertsDiskPV), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pvc: %v", err)
	}
	if _, err := cs.CoreV1().Pods(alertsNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "disk-app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "app", Image: c.BusyboxImage, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
				VolumeDevices: []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/data1"}},
			}},
			Volumes: []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "disk"},
			}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the disk pod: %v", err)
	}
	return d
}

// activeAlerts lists the pending and firing alerts about the given PVs, as "name{pv} state".
func activeAlerts(ctx context.Context, t *testing.T, prom *stack.Prometheus, pvs ...string) []string {
	t.Helper()
	as, err := prom.Alerts(ctx)
	if err != nil {
		t.Fatalf("read alerts: %v", err)
	}
	var out []string
	for _, a := range as {
		for _, pv := range pvs {
			if a.Labels["pv"] == pv {
				out = append(out, fmt.Sprintf("%s{pv=%s} %s", a.Labels["alertname"], pv, a.State))
			}
		}
	}
	sort.Strings(out)
	return out
}

// alertWatch polls /api/v1/alerts every 500 ms in the background and records, per alert name and
// PV, when it was first seen pending, firing, and gone after firing — so the times printed do not
// depend on when the test got round to looking.
type alertWatch struct {
	mu   sync.Mutex
	seen map[string]*alertTimes // by alertname/pv
	err  error
	stop context.CancelFunc
	done chan struct{}
}

type alertTimes struct{ pending, firing, gone time.Time }

func watchAlerts(ctx context.Context, prom *stack.Prometheus) *alertWatch {
	ctx, stop := context.WithCancel(ctx)
	w := &alertWatch{seen: map[string]*alertTimes{}, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			as, err := prom.Alerts(ctx)
			now := time.Now()
			w.mu.Lock()
			w.err = err
			if err == nil {
				active := map[string]bool{}
				for _, a := range as {
					k := a.Labels["alertname"] + "/" + a.Labels["pv"]
					active[k] = true
					at := w.seen[k]
					if at == nil {
						at = &alertTimes{}
						w.seen[k] = at
					}
					if a.State == "pending" && at.pending.IsZero() {
						at.pending = now
					}
					if a.State == "firing" && at.firing.IsZero() {
						at.firing = now
					}
				}
				for k, at := range w.seen {
					if !active[k] && !at.firing.IsZero() && at.gone.IsZero() {
						at.gone = now
					}
				}
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *alertWatch) Stop() { w.stop(); <-w.done }

// wait waits until every named alert about pv has fired (resolved false) or has fired and is gone
// again (resolved true), and returns the times it was first seen so.
func (w *alertWatch) wait(t *testing.T, pv string, names []string, resolved bool, timeout time.Duration) map[string]time.Time {
	t.Helper()
	what := fmt.Sprintf("alerts %v about PV %s to fire", names, pv)
	if resolved {
		what = fmt.Sprintf("alerts %v about PV %s to resolve", names, pv)
	}
	out := map[string]time.Time{}
	waitFor(t, timeout, what, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.err != nil {
			return false, w.err.Error()
		}
		var missing []string
		for _, n := range names {
			at := w.seen[n+"/"+pv]
			switch {
			case at == nil || at.firing.IsZero():
				missing = append(missing, n+" has not fired")
			case resolved && at.gone.IsZero():
				missing = append(missing, n+" still active")
			case resolved:
				out[n] = at.gone
			default:
				out[n] = at.firing
			}
		}
		return len(missing) == 0, strings.Join(missing, ", ")
	})
	return out
}

// pendingSince is when the alert was first seen pending ("never" for alerts without `for:`, which
// fire on their first true evaluation).
func (w *alertWatch) pendingSince(name, pv string, since time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at := w.seen[name+"/"+pv]; at != nil && !at.pending.IsZero() {
		return "pending " + at.pending.Sub(since).Round(100*time.Millisecond).String() + ", "
	}
	return ""
}
