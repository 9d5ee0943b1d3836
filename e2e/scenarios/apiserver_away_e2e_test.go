//go:build e2e

package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/disks"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

const (
	// apiAwayFor is how long the API server stays stopped: longer than what kubelet's liveness
	// probe of the agent (manifests/agent.yaml: every 20 s, 3 failures) needs to restart a
	// container whose /healthz fails from the outage's start — at most 20 s to the first failed
	// probe, 40 s more to the third: 60 s, and 10 s for kubelet's kill to show in the process and
	// restart count, checked every second (100 s before: its 40 s to spare proved nothing more).
	// The /healthz and /metrics answers are checked every second
	// throughout as well, so a failing probe shows at its first failure, before kubelet acts.
	apiAwayFor = 70 * time.Second
	// apiAwayKillAfter is when, into the outage, the driver's s3fs is killed: after the agent
	// has seen the API server gone (its probe runs every 5 s).
	apiAwayKillAfter = 20 * time.Second
	awayNS           = "e2e-away"
	awayLocalNS      = "e2e-away-local"
	awayDiskMinor    = 415
	awayLocalPV      = "e2e-away-local-pv"
)

// apiServerAway: kube-apiserver stopped for apiAwayFor (70 s) → the agent's container is not restarted
// (same process throughout, restart count unchanged), its /healthz and /metrics answer all the
// while and say the API server is away; a lost disk's fake stays in place; an S3 mount whose
// s3fs is killed during the outage is readable again once the API server is back (the test
// records whether it already was during the outage); the Node condition and the metrics say
// how long the API server was away.
func apiServerAway(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client

	// An S3 volume in the ctrox layout (s3fs at the target, publish secret only).
	l := &fieldLayout{
		name: "away", driver: "ch.ctrox.csi.s3-driver", layout: csitest.LayoutCtrox,
		ns: awayNS, pv: "e2e-away-pv", handle: s3Bucket + "/away",
		attrs: map[string]string{"bucket": s3Bucket, "prefix": "away", "mounter": "s3fs"},
		files: map[string]string{"away/csi-fs/app.txt": "away app data\n"},
		want:  "away app data\n", dataDir: "away/csi-fs/", src: s3Bucket + ":/away/csi-fs",
	}
	pod := fusePodSetup(t, e, l)
	appRestarts := map[string]map[string]int32{"app": restartCounts(pod)}
	target := podTarget(e, string(pod.UID), l.pv)

	// A guarded pod on a local disk that is then lost: the agent puts its fake in place.
	disk, fakeDev := awayLostDisk(t, e)
	t.Logf("disk %s lost; the agent's fake %s stands in", disk.Link(), fakeDev)

	agent, why := runningAgent(e)
	if agent == nil {
		t.Fatal(why)
	}
	agentRestarts := restartCounts(agent)
	agentPids := agentProcs()
	if len(agentPids) != 1 {
		t.Fatalf("want one pvrescue-agent process on the host, found %v", agentPids)
	}
	metricsURL := "http://" + net.JoinHostPort(agent.Status.PodIP, "8080") + "/metrics"
	healthURL := "http://" + net.JoinHostPort(agent.Status.PodIP, "8081") + "/healthz"
	// The plugin's s3fs, found through its pod (the API server is needed for that).
	daemons := pluginS3fs(l.plugin)
	if len(daemons) != 1 {
		t.Fatalf("want the plugin's one s3fs before the outage, found %v", daemons)
	}
	if v, err := agentMetric(metricsURL, "pvrescue_agent_apiserver_reachable"); err != nil || v != 1 {
		t.Errorf("before the outage pvrescue_agent_apiserver_reachable should be 1, got %v (%v)", v, err)
	}

	if err := e.c.StopAPIServer(); err != nil {
		t.Fatalf("stop kube-apiserver: %v", err)
	}
	down := time.Now()
	// Whatever fails below, the rest of the suite (and the cleanups) need the API server.
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := e.c.StartAPIServer(context.Background()); err != nil {
				t.Errorf("cleanup: start kube-apiserver again: %v", err)
			}
		}
	})
	t.Logf("kube-apiserver stopped at %s for %s", down.UTC().Format("15:04:05"), apiAwayFor)

	// During the outage, every second: the agent's health and metrics, its process, the fake,
	// and the S3 volume as the node sees it at the pod's target.
	var (
		healthFails, metricsFails int
		sawUnreachable            time.Duration // since down, first reachable=0
		maxAway                   float64
		killedAt                  time.Time
		killed                    []int
		readableAgain             time.Duration // since the kill, first good read during the outage
		fakeMoved                 string
		agentChanged              string
	)
	for time.Since(down) < apiAwayFor {
		if ok, _ := httpGet(healthURL); !ok {
			healthFails++
		}
		if v, err := agentMetric(metricsURL, "pvrescue_agent_apiserver_reachable"); err != nil {
			metricsFails++
		} else if v == 0 && sawUnreachable == 0 {
			sawUnreachable = time.Since(down)
		}
		if v, err := agentMetric(metricsURL, "pvrescue_agent_apiserver_unreachable_seconds"); err == nil && v > maxAway {
			maxAway = v
		}
		if p := agentProcs(); len(p) != 1 || p[0] != agentPids[0] {
			agentChanged = fmt.Sprintf("pvrescue-agent processes %v at %s into the outage (was %v)", p, time.Since(down).Round(time.Second), agentPids)
		}
		if got := linkTarget(disk.Link()); got != fakeDev && fakeMoved == "" {
			fakeMoved = fmt.Sprintf("%s → %q at %s into the outage", disk.Link(), got, time.Since(down).Round(time.Second))
		}
		if killedAt.IsZero() && time.Since(down) >= apiAwayKillAfter {
			killed = daemons
			for _, pid := range killed {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatalf("kill s3fs %d: %v", pid, err)
				}
			}
			killedAt = time.Now()
			t.Logf("driver's s3fs %v killed %s into the outage", killed, time.Since(down).Round(time.Second))
		} else if !killedAt.IsZero() && readableAgain == 0 && hostReads(filepath.Join(target, "app.txt"), l.want) {
			readableAgain = time.Since(killedAt)
		}
		time.Sleep(time.Second)
	}
	stackDuring := describeStack(mountsAt(target))
	oursDuring := ourS3fs(l.pv)

	// The restore is timed from the API server's restart (its process started right after this)
	// and from its readiness (StartAPIServer returns once /readyz answers).
	restartAt := time.Now()
	if err := e.c.StartAPIServer(ctx); err != nil {
		t.Fatalf("start kube-apiserver again: %v", err)
	}
	restarted = true
	up := time.Now()
	cs = e.c.Client
	t.Logf("kube-apiserver back after %s (ready %s after its restart)", up.Sub(down).Round(time.Second), up.Sub(restartAt).Round(100*time.Millisecond))

	if healthFails > 0 {
		t.Errorf("the agent's /healthz failed %d times during the outage", healthFails)
	}
	if metricsFails > 0 {
		t.Errorf("the agent's /metrics failed %d times during the outage", metricsFails)
	}
	if sawUnreachable == 0 {
		t.Errorf("pvrescue_agent_apiserver_reachable never went to 0 during the %s outage", apiAwayFor)
	}
	if agentChanged != "" {
		t.Errorf("the agent's process changed during the outage: %s", agentChanged)
	}
	if fakeMoved != "" {
		t.Errorf("the lost disk's fake did not stay in place: %s", fakeMoved)
	}

	// Once back: the pod's target on the node reads again (the agent can read the secret the
	// replay needs), a file put on the S3 server's side included.
	var hostBack, hostBackRestart time.Duration
	waitFor(t, 4*time.Minute, "the pod's target on the node to read again after the API server came back", func() (bool, string) {
		if hostReads(filepath.Join(target, "app.txt"), l.want) {
			hostBack, hostBackRestart = time.Since(up), time.Since(restartAt)
			return true, ""
		}
		return false, "stack at the target " + describeStack(mountsAt(target))
	})
	const afterBack = "put on the S3 server's side after the outage\n"
	putInBucket(t, e, l.dataDir+"after-outage.txt", afterBack)
	waitFor(t, 30*time.Second, "the file put on the S3 server's side to read at the target", func() (bool, string) {
		return hostReads(filepath.Join(target, "after-outage.txt"), afterBack), describeStack(mountsAt(target))
	})
	checkKubeletMounts(t, e, "after the outage")
	if ours := ourS3fs(l.pv); len(ours) > 0 || onOurMount(target, l.pv) {
		t.Errorf("restored by the agent's own s3fs %v, not through the driver, although the plugin answers: %s", ours, describeStack(mountsAt(target)))
	}
	if got := linkTarget(disk.Link()); got != fakeDev {
		t.Errorf("after the outage the lost disk's link points at %q, want the agent's fake %s", got, fakeDev)
	}
	waitFor(t, time.Minute, "the agent pod to be reported Running and ready again", func() (bool, string) {
		p, why := runningAgent(e)
		if p == nil {
			return false, why
		}
		if p.UID != agent.UID {
			return false, fmt.Sprintf("a new agent pod %s (was %s)", p.Name, agent.Name)
		}
		return true, ""
	})
	now, _ := runningAgent(e)
	for c, n := range restartCounts(now) {
		if n != agentRestarts[c] {
			t.Errorf("agent container %s restarted: count %d before the outage, %d after", c, agentRestarts[c], n)
		}
	}
	// The app's containers: while the mount was dead the injected liveness probe failed and
	// kubelet (which runs without the API server) restarted them, by design; they start again in
	// kubelet's back-off once the mount is back. Logged, not asserted.
	appNow := podRestarts(t, e, l.ns, "app")

	var cond *corev1.NodeCondition
	waitFor(t, time.Minute, "the Node condition "+string(nodeagent.ConditionAPIServerUnreachable), func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, e.c.Opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for i := range n.Status.Conditions {
			if c := &n.Status.Conditions[i]; c.Type == nodeagent.ConditionAPIServerUnreachable && !c.LastTransitionTime.Time.Before(up.Add(-time.Minute)) {
				cond = c
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %v", n.Status.Conditions)
	})
	if cond.Status != corev1.ConditionFalse || !strings.Contains(cond.Message, "could not reach the API server") {
		t.Errorf("Node condition %s: status %s, message %q", cond.Type, cond.Status, cond.Message)
	}
	lastOutage, err := agentMetric(metricsURL, "pvrescue_agent_apiserver_last_outage_seconds")
	if err != nil {
		t.Errorf("read pvrescue_agent_apiserver_last_outage_seconds: %v", err)
	}
	if want := apiAwayFor.Seconds(); lastOutage < want-10 || lastOutage > want+60 {
		t.Errorf("pvrescue_agent_apiserver_last_outage_seconds = %.1f, want about %.0f (the outage)", lastOutage, want)
	}
	outages, _ := agentMetric(metricsURL, "pvrescue_agent_apiserver_outages_total")
	reachable, _ := agentMetric(metricsURL, "pvrescue_agent_apiserver_reachable")
	if reachable != 1 {
		t.Errorf("pvrescue_agent_apiserver_reachable = %v after the outage, want 1", reachable)
	}

	during := "not during the outage"
	if readableAgain > 0 {
		during = fmt.Sprintf("already during the outage, %s after the kill", readableAgain.Round(time.Second))
	}
	t.Logf("RESULT API server away %s: agent pod %s same process (pid %v), restarts %v, /healthz and /metrics answered every second (%d/%d failures); reachable=0 seen %s into the outage, unreachable_seconds up to %.0f; lost disk's fake %s stayed in place",
		up.Sub(down).Round(time.Second), agent.Name, agentPids, restartCounts(now), healthFails, metricsFails, sawUnreachable.Round(time.Second), maxAway, fakeDev)
	t.Logf("RESULT API server away: driver's s3fs %v killed %s into the outage; the node's target read again %s (stack at the end of the outage %s, agent s3fs %v); after the API server came back the target read again in %s from its readiness, %s from its restart (process start; ready %s after it); app container restarts %v before → %v after (the injected probe on the dead mount)",
		killed, killedAt.Sub(down).Round(time.Second), during, stackDuring, oursDuring, hostBack.Round(100*time.Millisecond), hostBackRestart.Round(100*time.Millisecond),
		up.Sub(restartAt).Round(100*time.Millisecond), appRestarts["app"], appNow)
	t.Logf("RESULT API server away: Node condition %s=%s %q; metrics last_outage_seconds %.1f, outages_total %.0f, reachable %.0f",
		cond.Type, cond.Status, cond.Message, lastOutage, outages, reachable)
}

// awayLostDisk makes a local block PV on a disk of its own, a guarded pod using it, then unplugs
// the disk and waits until the agent's fake (a 512-byte loop device) stands at its link. It
// returns the disk and the fake's device path; cleanup removes pod, PV and disk.
func awayLostDisk(t *testing.T, e *env) (*disks.Disk, string) {
	t.Helper()
	ctx := context.Background()
	cs := e.c.Client
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: localClass()}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create storageclass: %v", err)
	}
	d, err := disks.Make(filepath.Join(e.c.Opts.WorkDir, "disks"), "away", awayDiskMinor, diskSize)
	if err != nil {
		t.Fatalf("make disk: %v", err)
	}
	// Cleanups run last-in first-out: the disk goes after the namespace and the PV.
	t.Cleanup(func() {
		if err := d.Remove(); err != nil {
			t.Errorf("cleanup: remove disk %s: %v", d.Name, err)
		}
	})
	createLocalBlockPV(t, cs, awayLocalPV, d.Link(), e.c.Opts.NodeName, awayLocalNS, "disk")
	deletePVAtCleanup(t, e, awayLocalPV)
	fuseNamespace(t, e, awayLocalNS, true)
	if _, err := cs.CoreV1().PersistentVolumeClaims(awayLocalNS).Create(ctx, localBlockClaim(awayLocalNS, "disk", awayLocalPV), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pvc: %v", err)
	}
	if _, err := cs.CoreV1().Pods(awayLocalNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "app", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
				VolumeDevices: []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/disk1"}},
			}},
			Volumes: []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "disk"}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	p := framework.WaitPod(t, cs, awayLocalNS, "app", 3*time.Minute, "Running on the real disk", framework.Running)
	if !hasInit(p, contract.GuardContainerName) {
		t.Fatalf("no %s init container: the webhook did not guard the pod\n%s", contract.GuardContainerName, framework.DescribePod(cs, p))
	}
	if err := d.Unplug(); err != nil {
		t.Fatal(err)
	}
	var fake string
	waitFor(t, time.Minute, "the agent's fake at "+d.Link(), func() (bool, string) {
		fake = linkTarget(d.Link())
		if fake == "" || fake == d.Dev {
			return false, fmt.Sprintf("link points at %q", fake)
		}
		if n := blockSectors(fake); n != 1 {
			return false, fmt.Sprintf("%s has %d sectors, want the 1-sector fake", fake, n)
		}
		return true, ""
	})
	return d, fake
}

// linkTarget is where a symlink points ("" when it is missing).
func linkTarget(p string) string {
	s, err := os.Readlink(p)
	if err != nil {
		return ""
	}
	return s
}

// blockSectors reads /sys/class/block/<dev>/size (512-byte sectors); -1 when unreadable.
func blockSectors(dev string) int {
	b, err := os.ReadFile(filepath.Join("/sys/class/block", filepath.Base(dev), "size"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// agentProcs lists the host's pvrescue-agent processes.
func agentProcs() []int {
	return procs("pvrescue-agent", func(int, int, []byte) bool { return true })
}

// hostReads reads path on the node with a 2 s limit (a dead or hung FUSE mount must not stall
// the outage loop) and reports whether it holds want.
func hostReads(path, want string) bool {
	got := make(chan bool, 1)
	go func() {
		b, err := os.ReadFile(path)
		got <- err == nil && string(b) == want
	}()
	select {
	case ok := <-got:
		return ok
	case <-time.After(2 * time.Second):
		return false
	}
}

var agentHTTP = &http.Client{Timeout: 2 * time.Second}

func httpGet(url string) (bool, string) {
	resp, err := agentHTTP.Get(url)
	if err != nil {
		return false, err.Error()
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, string(b)
}

// agentMetric reads one unlabelled sample from the agent's /metrics.
func agentMetric(url, name string) (float64, error) {
	ok, body := httpGet(url)
	if !ok {
		return 0, fmt.Errorf("GET %s: %s", url, body)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("%s not in %s", name, url)
}
