//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

// Busy bridge (issue 32 item 4): a bridge whose statfs times out is busy, not dead; an agent
// restart must adopt it as it is — same s3fs process, nothing killed or unmounted — or every pod
// on the PV reads ENOTCONN and what s3fs had not uploaded yet is lost.
//
// How statfs is slowed. The S3 traffic of the volume (plugin and bridge alike: the claim's
// secret names the endpoint) goes through stallProxy, a TCP proxy in the test process in front
// of versitygw. Stalling it makes s3fs busy the way a slow S3 does: the writers' creates and
// uploads wait inside s3fs, with their data in its cache, not on the server. That alone does not
// slow statfs with this s3fs: it runs on libfuse 2.9, whose loop starts one more worker thread
// whenever none is idle, and s3fs answers statfs without calling S3 — the test measures and logs
// that latency. So, as TestNodeHungBridgeIsNotDead does, the bridge's s3fs is then stopped
// (SIGSTOP): statfs of its mount waits until it runs again, far past the agent's
// s3.statfsTimeout, exactly what the agent sees of a daemon whose workers are all taken.

const (
	busyWriters  = 16       // parallel writers, each in its own directory (creates in one directory serialize in the VFS)
	busyFileSize = 64 << 10 // bytes of the shared body in each file, plus a "w<i> f<k>\n" trailer
	busyMaxFiles = 400      // per writer: a bound, never reached in a passing run
	// busyLine is what the body repeats (busybox `yes`, cut by `head -c`).
	busyLine = "pvrescue busy bridge: known bytes 0123456789abcdef\n"
	// busyStallLimit releases the proxy by itself if the test never does: below s3fs's curl
	// timeouts (readwrite_timeout 120 s), so a stall that ran over is reported, not a lost upload.
	busyStallLimit = 100 * time.Second
	// busyAbortHungAfter is the agent's s3.abortHungAfter once the bridge is busy (at least
	// s3.statfsTimeout, 2 s, as the configuration requires).
	busyAbortHungAfter = 3 * time.Second
)

// busyBody is the body every written file starts with (what the writers' `yes | head -c` makes).
var busyBody = func() []byte {
	b := bytes.Repeat([]byte(busyLine), busyFileSize/len(busyLine)+1)
	return b[:busyFileSize]
}()

// busyFile is the exact content writer i puts into its k-th file.
func busyFile(i, k int) []byte {
	return append(append([]byte{}, busyBody...), fmt.Sprintf("w%d f%d\n", i, k)...)
}

// busyWriterScript is the writers container's command: it waits for /ctl/go, then runs
// busyWriters writers in parallel, each writing /data/writes/w<i>/f1, f2, … (body plus trailer)
// until /ctl/stop exists; after each file it records its count in /ctl/count.<i>, at the end in
// /ctl/done.<i>, each written aside and renamed into place: a plain "echo > file" leaves the
// file empty for a moment, and the test read one so. Everything a writer prints (a failed
// create or write: the shell's own message, e.g. "Transport endpoint is not connected") goes
// to /ctl/err.<i>. /ctl is an emptyDir: the test reads it while the volume does not answer.
func busyWriterScript() string {
	return fmt.Sprintf(`set -u
yes '%s' | head -c %d > /ctl/body 2>/dev/null
while [ ! -e /ctl/go ]; do sleep 1; done
mkdir -p /data/writes
i=1
while [ $i -le %d ]; do
  (
    d=/data/writes/w$i
    mkdir -p $d || echo "w$i: mkdir $d failed"
    k=0
    while [ ! -e /ctl/stop ] && [ $k -lt %d ]; do
      k=$((k+1))
      echo "w$i f$k" | cat /ctl/body - > $d/f$k || echo "w$i f$k: write failed"
      echo $k > /ctl/.count.$i && mv -f /ctl/.count.$i /ctl/count.$i
    done
    echo $k > /ctl/.done.$i && mv -f /ctl/.done.$i /ctl/done.$i
  ) >> /ctl/err.$i 2>&1 &
  i=$((i+1))
done
wait
exec sleep 2147483647
`, strings.TrimSuffix(busyLine, "\n"), busyFileSize, busyWriters, busyMaxFiles)
}

// busyPod is the application: "app" (reads app.txt) and "writers", both on the claim.
func busyPod(image string) *corev1.Pod {
	loop := []string{"sh", "-c", "while true; do sleep 1; done"}
	data := corev1.VolumeMount{Name: "data", MountPath: "/data"}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{
				{Name: "app", Image: image, Command: loop, VolumeMounts: []corev1.VolumeMount{data}},
				{Name: "writers", Image: image, Command: []string{"sh", "-c", busyWriterScript()},
					VolumeMounts: []corev1.VolumeMount{data, {Name: "ctl", MountPath: "/ctl"}}},
			},
			Volumes: append(dataVolume(), corev1.Volume{Name: "ctl", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}),
		},
	}
}

// writersState is what the writers recorded in /ctl: per writer (1-based) the files finished,
// whether it ended, and what it printed (errors).
type writersState struct {
	count, done map[int]int
	errs        map[int]string
}

func (s writersState) total() (files int) {
	for _, n := range s.count {
		files += n
	}
	return files
}

// minCount is the smallest finished-file count over all writers (0 when one has none yet).
func (s writersState) minCount() int {
	m := -1
	for i := 1; i <= busyWriters; i++ {
		if n := s.count[i]; m < 0 || n < m {
			m = n
		}
	}
	return m
}

// readWriters reads /ctl in the writers container (an emptyDir: never the volume).
func readWriters(e *env, ns string) (writersState, error) {
	const script = `for f in /ctl/count.* /ctl/done.* /ctl/err.*; do [ -f "$f" ] || continue; printf '%s\t' "${f#/ctl/}"; head -c 400 "$f" | tr '\n' '|'; echo; done`
	out, err := execIn(e, ns, "app", "writers", "sh", "-c", script)
	s := writersState{count: map[int]int{}, done: map[int]int{}, errs: map[int]string{}}
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(out, "\n") {
		name, val, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		kind, idx, _ := strings.Cut(name, ".")
		i, err := strconv.Atoi(idx)
		if err != nil {
			continue
		}
		switch kind {
		case "count", "done":
			n, err := strconv.Atoi(strings.TrimSuffix(val, "|"))
			if err != nil {
				return s, fmt.Errorf("/ctl/%s: %q", name, val)
			}
			if kind == "count" {
				s.count[i] = n
			} else {
				s.done[i] = n
			}
		case "err":
			if val != "" {
				s.errs[i] = val
			}
		}
	}
	return s, nil
}

// busyBridge: the ctrox layout's plugin is kept down and the agent bridges the volume; 16
// writers in the pod write known files; S3 stalls (stallProxy) and the bridge's s3fs is stopped,
// so statfs of the bridge times out; the agent pod is deleted → the new agent adopts the bridge
// as busy (its log), the same s3fs process (pid and start time) serves on, the target's mount
// stack is unchanged; S3 and s3fs resume → no writer saw an error, every file the writers
// finished is on the S3 server's side byte for byte; the plugin comes back and gets the volume.
func busyBridge(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	statfsTimeout := config.Default().S3.StatfsTimeout.Duration
	px := startStallProxy(t, e.c.NodeIP, e.s3.Addr)
	l := &fieldLayout{
		name: "busy", driver: "ch.ctrox.csi.s3-driver", layout: csitest.LayoutCtrox,
		ns: "e2e-fuse-busy", pv: "e2e-fuse-busy-pv", handle: s3Bucket + "/busy",
		attrs: map[string]string{"bucket": s3Bucket, "prefix": "busy", "mounter": "s3fs"},
		files: map[string]string{"busy/csi-fs/app.txt": "busy bridge app data\n"},
		want:  "busy bridge app data\n", dataDir: "busy/csi-fs/", src: s3Bucket + ":/busy/csi-fs",
	}
	layoutObjects(t, e, l)
	// Both the plugin's s3fs and the agent's bridge take the endpoint from the claim's secret.
	sec, err := cs.CoreV1().Secrets(l.ns).Get(ctx, "s3-creds", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the volume's secret: %v", err)
	}
	sec.Data[config.Default().S3.SecretKeys.Endpoint] = []byte(px.Endpoint())
	if _, err := cs.CoreV1().Secrets(l.ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("point the volume's secret at the proxy %s: %v", px.Endpoint(), err)
	}
	if _, err := cs.CoreV1().Pods(l.ns).Create(ctx, busyPod(e.c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod in %s: %v", l.ns, err)
	}
	pod := framework.WaitPod(t, cs, l.ns, "app", 2*time.Minute, "Running", framework.Running)
	appReader := reader{l.ns, "app", "app", "/data/app.txt", l.want}
	waitReads(t, e, time.Now(), 30*time.Second, "before the failure", appReader)
	restarts := map[string]map[string]int32{"app": restartCounts(pod)}
	target := podTarget(e, string(pod.UID), l.pv)
	bridgeMount := s3fs.Layout{StateDir: config.Default().StateDir}.MountPoint(l.pv)

	// The plugin stays down → the agent bridges.
	t0 := time.Now()
	if err := l.plugin.Stop(ctx); err != nil {
		t.Fatalf("stop the plugin's DaemonSet: %v", err)
	}
	t.Cleanup(func() { _ = l.plugin.Start(context.Background()) })
	rescueReads(t, e, t0, config.Default().S3.BridgeAfter.Duration+90*time.Second, "through the agent's bridge while the plugin is down", nil, appReader)
	ours := ourS3fs(l.pv)
	if len(ours) != 1 || !onOurMount(target, l.pv) {
		t.Fatalf("bridged: want one s3fs of the agent serving the top of the target; agent s3fs %v, target %s", ours, describeStack(mountsAt(target)))
	}
	pid := ours[0]
	started := procStartTime(pid)
	// The stacks by unique mount ID (a new mount may get a freed mountinfo ID and pass for the old).
	tgtIDs, bridgeIDs := mustStackIdentity(t, target), mustStackIdentity(t, bridgeMount)
	t.Logf("bridged after %s: s3fs pid %d (start %s) at %s; target %s", time.Since(t0).Round(100*time.Millisecond), pid, started, bridgeMount, describeStack(mountsAt(target)))

	// The writers run through the bridge.
	if _, err := execIn(e, l.ns, "app", "writers", "touch", "/ctl/go"); err != nil {
		t.Fatalf("start the writers: %v", err)
	}
	stopWriters := func() { _, _ = execIn(e, l.ns, "app", "writers", "touch", "/ctl/stop") }
	t.Cleanup(stopWriters)
	var ws writersState
	waitFor(t, 60*time.Second, "every writer to finish two files through the bridge", func() (bool, string) {
		if ws, err = readWriters(e, l.ns); err != nil {
			return false, err.Error()
		}
		return ws.minCount() >= 2 && len(ws.errs) == 0, fmt.Sprintf("counts %v, errors %v", ws.count, ws.errs)
	})

	// S3 stalls: s3fs is busy, the writers' files wait inside it.
	px.Stall(busyStallLimit)
	t.Cleanup(func() { px.Release() })
	waitFor(t, 15*time.Second, "s3fs's requests to wait at the stalled S3 endpoint", func() (bool, string) {
		st := px.Stats()
		return st.held >= 1, fmt.Sprintf("%+v", st)
	})
	stalledProbe := statfsAsync(bridgeMount)
	stalledAnswer := stalledProbe.describe(2 * statfsTimeout)
	t.Logf("S3 stalled: %+v; statfs of the bridge %s (libfuse 2 starts a worker per request, s3fs's statfs does not call S3)", px.Stats(), stalledAnswer)

	// The bridge's s3fs stops answering: statfs of its mount waits past the agent's timeout.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP the bridge's s3fs %d: %v", pid, err)
	}
	continued := false
	cont := func() {
		if !continued {
			continued = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT the bridge's s3fs %d: %v", pid, err)
			}
		}
	}
	t.Cleanup(cont)
	tStop := time.Now()
	waitFor(t, 5*time.Second, "the bridge's s3fs to be stopped", func() (bool, string) {
		s := procState(pid)
		return s == "T", "state " + s
	})
	atStop, err := readWriters(e, l.ns)
	if err != nil {
		t.Fatalf("read the writers' state: %v", err)
	}
	onServer := busyFilesOnServer(e, l)
	heldAtStop := px.Stats()
	slow := statfsAsync(bridgeMount)
	if slow.answeredWithin(2 * statfsTimeout) {
		t.Fatalf("s3fs %d is stopped but statfs of its mount answered in %s (%v)", pid, slow.took, slow.err)
	}
	t.Logf("s3fs %d stopped; statfs of the bridge unanswered after %s (agent's s3.statfsTimeout %s); writers finished %d files, the S3 server holds %d complete; %d S3 request(s) held",
		pid, 2*statfsTimeout, statfsTimeout, atStop.total(), onServer, heldAtStop.held)

	// The new agent runs with s3.abortHungAfter set (off as shipped): it aborts the FUSE
	// connection of a mount hung that long — never its own bridge's, which is judged by its s3fs
	// (nodeagent/s3mount/hung.go). Aborting it would fail every writer with ENOTCONN and lose
	// what s3fs holds. The installed configuration is back (and the agent restarted) at the end.
	writeAgentS3Config(t, e, fmt.Sprintf("  abortHungAfter: %s\n", busyAbortHungAfter))
	restored := false
	t.Cleanup(func() {
		if !restored {
			restoreAgentConfigAtCleanup(t, e)
		}
	})

	// The agent pod is deleted; the DaemonSet's new agent adopts the busy bridge.
	old, why := runningAgent(e)
	if old == nil {
		t.Fatal(why)
	}
	tDel := time.Now()
	if err := cs.CoreV1().Pods(stack.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the agent pod %s: %v", old.Name, err)
	}
	next := waitAgentStarted(t, e, old.UID, 90*time.Second)
	startedAfter := time.Since(tDel).Round(100 * time.Millisecond)
	var ad bridgeAdoption
	waitFor(t, 60*time.Second, "the new agent "+next+" to adopt the bridge of "+l.pv+" as busy (its log)", func() (bool, string) {
		if ad, err = agentAdoption(e, next, l.pv); err != nil {
			return false, err.Error()
		}
		return len(ad.busy) > 0 && ad.adoptedPid != 0, fmt.Sprintf("busy lines %d, adopted pid %d; the agent's last log lines:\n%s", len(ad.busy), ad.adoptedPid, ad.tail)
	})
	adoptedAfter := time.Since(tDel).Round(100 * time.Millisecond)
	if ad.adoptedPid != pid || !ad.supervised {
		t.Errorf("the new agent adopted pid %d (supervised %v), want the bridge's s3fs %d supervised", ad.adoptedPid, ad.supervised, pid)
	}
	if len(ad.dropped) > 0 {
		t.Errorf("the new agent dropped the busy bridge: %s", strings.Join(ad.dropped, "\n"))
	}
	// The new agent finds the bridged target hung (statfs times out); once it has been hung
	// longer than s3.abortHungAfter, two more of its S3 passes end (one began past that point,
	// when an abort would be due) and their Events are sent. Only then is the bridge checked.
	waitFor(t, 60*time.Second, "the new agent to find the bridged target hung (pvrescue_s3_hung_mounts_found_total)", func() (bool, string) {
		_, n, err := agentCount(e, "pvrescue_s3_hung_mounts_found_total")
		return err == nil && n >= 1, fmt.Sprintf("%v %v", n, err)
	})
	hungSeen := time.Now()
	time.Sleep(busyAbortHungAfter)
	looked := waitS3Passes(t, e, 2, time.Minute)
	time.Sleep(eventSendSlack)
	abortedSum := 0.0
	aborts := metricSeries(agentMetricsBody(t, e), "pvrescue_s3_hung_aborts_total")
	for _, v := range aborts {
		abortedSum += v
	}
	if abortedSum != 0 {
		t.Errorf("the agent aborted a hung FUSE connection while the only hung mount was its own busy bridge: pvrescue_s3_hung_aborts_total %v", aborts)
	}
	hung := events(t, e, l.ns, contract.ReasonMountHung)
	if len(hung) == 0 || !strings.Contains(strings.Join(hung, "\n"), "served by pvrescue's bridge") {
		t.Errorf("no MountHung Event saying the bridge is hung and never aborted (the agent did not judge the bridged target, so the abort was never in reach): %v", hung)
	}
	if evs := events(t, e, l.ns, contract.ReasonMountHungAborted); len(evs) > 0 {
		t.Errorf("the agent says it aborted a hung mount of the busy bridge's volume: %v", evs)
	}
	heldFor := time.Since(hungSeen).Round(100 * time.Millisecond)
	t.Logf("the new agent found the bridged target hung; %s later (s3.abortHungAfter %s, two more S3 passes in %s): aborts %v, MountHung Events %v",
		heldFor, busyAbortHungAfter, looked.Round(100*time.Millisecond), abortedSum, hung)
	if s := procState(pid); s != "T" {
		t.Errorf("the busy bridge's s3fs %d is in state %q after the agent restart, want T (stopped by the test, alive, not signalled)", pid, s)
	}
	if got := ourS3fs(l.pv); len(got) != 1 || got[0] != pid {
		t.Errorf("agent s3fs after the restart %v, want only the busy bridge %d (no second writer)", got, pid)
	}
	if got, err := stackIdentity(target); got != tgtIDs {
		t.Errorf("the target's stack changed while the bridge was busy: %s → %s (%v; %s)", tgtIDs, got, err, describeStack(mountsAt(target)))
	}
	if got, err := stackIdentity(bridgeMount); got != bridgeIDs {
		t.Errorf("the bridge's mount changed while it was busy: %s → %s (%v)", bridgeIDs, got, err)
	}
	t.Logf("new agent %s running %s after the delete of %s, adopted the busy bridge %s after it: %s", next, startedAfter, old.Name, adoptedAfter, ad.busy[0])

	// s3fs and S3 resume: the writers go on and finish; nothing of theirs is lost.
	cont()
	stopped := time.Since(tStop).Round(100 * time.Millisecond)
	stall := px.Release().Round(100 * time.Millisecond)
	if px.Stats().expired {
		t.Errorf("the S3 stall ran into its safety limit (%s) before the test released it", busyStallLimit)
	}
	if !slow.wait(30 * time.Second) {
		t.Fatalf("statfs of the bridge still unanswered 30 s after SIGCONT")
	}
	if slow.err != nil {
		t.Errorf("statfs of the bridge answered %v after SIGCONT, want success", slow.err)
	}
	resumed, err := readWriters(e, l.ns)
	if err != nil {
		t.Fatalf("read the writers' state: %v", err)
	}
	// The app reads through the bridge again (an aborted connection would answer ENOTCONN).
	if ok, why := readFrom(e, l.ns, "app", "app", "/data/app.txt", l.want); !ok {
		t.Errorf("after the resume the app cannot read through the bridge: %s", why)
	}
	waitFor(t, 60*time.Second, "every writer to finish two more files after the resume", func() (bool, string) {
		if ws, err = readWriters(e, l.ns); err != nil {
			return false, err.Error()
		}
		for i := 1; i <= busyWriters; i++ {
			if ws.count[i] < resumed.count[i]+2 {
				return false, fmt.Sprintf("writer %d: %d files, %d at the resume; errors %v", i, ws.count[i], resumed.count[i], ws.errs)
			}
		}
		return true, ""
	})
	stopWriters()
	waitFor(t, 60*time.Second, "every writer to end after /ctl/stop", func() (bool, string) {
		if ws, err = readWriters(e, l.ns); err != nil {
			return false, err.Error()
		}
		return len(ws.done) == busyWriters, fmt.Sprintf("ended %v of %d", ws.done, busyWriters)
	})
	if len(ws.errs) > 0 {
		t.Errorf("writers saw errors (a busy bridge must never give ENOTCONN or fail a write):\n%s", describeErrs(ws.errs))
	}
	var files, bytesWritten int
	waitFor(t, 30*time.Second, "every file the writers finished to be on the S3 server's side, byte for byte", func() (bool, string) {
		var bad []string
		files, bytesWritten, bad = checkBusyFiles(e, l, ws.done)
		return len(bad) == 0, strings.Join(bad, "; ")
	})
	if got := ourS3fs(l.pv); len(got) != 1 || got[0] != pid || procStartTime(pid) != started {
		t.Errorf("agent s3fs after the resume %v (pid %d start %s now %s), want the same process %d", got, pid, started, procStartTime(pid), pid)
	}
	if got, err := stackIdentity(target); got != tgtIDs {
		t.Errorf("the target's stack changed: %s → %s (%v; %s)", tgtIDs, got, err, describeStack(mountsAt(target)))
	}
	rc := checkRestarts(t, e, l.ns, restarts)
	t.Logf("RESULT busy bridge: %d writers, %d files / %d bytes written and on the S3 server byte for byte (%d finished, %d on the server at the stop); S3 stalled %s, s3fs %d stopped %s, statfs of the bridge blocked %s (agent timeout %s; with S3 stalled alone: %s); agent pod deleted → new agent (s3.abortHungAfter %s) adopted the bridge as busy after %s, found it hung and left it %s (aborts %v); s3fs pid %d → %d, start time unchanged; writer errors %d; MountHung Events %d; restarts %v",
		busyWriters, files, bytesWritten, atStop.total(), onServer, stall, pid, stopped, slow.took.Round(100*time.Millisecond), statfsTimeout, stalledAnswer,
		busyAbortHungAfter, adoptedAfter, heldFor, abortedSum, pid, ourS3fs(l.pv), len(ws.errs), len(hung), rc)

	// The new agent is ready; the plugin comes back and the volume is handed back to it.
	waitFor(t, 60*time.Second, "the new agent to be ready", func() (bool, string) {
		p, why := runningAgent(e)
		return p != nil && p.UID != old.UID, why
	})
	t1 := time.Now()
	if err := l.plugin.Start(ctx); err != nil {
		t.Fatalf("bring the plugin's pod back: %v", err)
	}
	waitHandedBack(t, target, l.pv, l.plugin)
	back := time.Since(t1).Round(100 * time.Millisecond)
	const last = "/data/writes/w1/f1"
	if out, err := execIn(e, l.ns, "app", "app", "sha256sum", last); err != nil || !strings.HasPrefix(out, fmt.Sprintf("%x", sha256.Sum256(busyFile(1, 1)))) {
		t.Errorf("after the hand-back the app reads %s as %q (%v), want sha256 %x", last, out, err, sha256.Sum256(busyFile(1, 1)))
	}
	waitReads(t, e, t1, 30*time.Second, "on the driver's mount again", appReader)
	checkTopFUSE(t, target, "after the hand-back")
	checkRestarts(t, e, l.ns, restarts)
	gone := deletePodGone(t, e, l.ns, "app", 30*time.Second)
	waitBridgeExited(t, l.pv)
	checkNothingLeft(t, e, l.pv, l.src)
	t.Logf("RESULT busy bridge handed back: plugin back → volume on the driver's mount after %s; pod deleted and gone in %s, the bridge's s3fs exited, nothing left", back, gone)
	// The scenarios after this one run with the installed configuration (abortHungAfter off).
	tRestore := time.Now()
	setAgentS3Config(t, e, "")
	restored = true
	t.Logf("the installed agent configuration is back, the agent restarted in %s", time.Since(tRestore).Round(100*time.Millisecond))
}

// describeErrs renders the writers' error outputs, one writer a line.
func describeErrs(errs map[int]string) string {
	ids := make([]int, 0, len(errs))
	for i := range errs {
		ids = append(ids, i)
	}
	sort.Ints(ids)
	var b strings.Builder
	for _, i := range ids {
		fmt.Fprintf(&b, "  writer %d: %s\n", i, errs[i])
	}
	return b.String()
}

// busyDir is writer i's directory on the S3 server's side (versitygw's posix backend).
func busyDir(e *env, l *fieldLayout, i int) string {
	return filepath.Join(e.s3.Dir, s3Bucket, l.dataDir, "writes", fmt.Sprintf("w%d", i))
}

// busyFilesOnServer counts the writers' files the S3 server holds complete (exact content).
func busyFilesOnServer(e *env, l *fieldLayout) int {
	n := 0
	for i := 1; i <= busyWriters; i++ {
		ents, _ := os.ReadDir(busyDir(e, l, i))
		for _, ent := range ents {
			k, err := strconv.Atoi(strings.TrimPrefix(ent.Name(), "f"))
			if err != nil || !strings.HasPrefix(ent.Name(), "f") {
				continue
			}
			if b, err := os.ReadFile(filepath.Join(busyDir(e, l, i), ent.Name())); err == nil && bytes.Equal(b, busyFile(i, k)) {
				n++
			}
		}
	}
	return n
}

// checkBusyFiles compares, on the S3 server's side, every writer's files f1..f<done> with what
// it wrote (size and sha256), and lists any other object in the writers' directories.
func checkBusyFiles(e *env, l *fieldLayout, done map[int]int) (files, total int, bad []string) {
	for i := 1; i <= busyWriters; i++ {
		dir := busyDir(e, l, i)
		want := map[string]bool{}
		for k := 1; k <= done[i]; k++ {
			name := fmt.Sprintf("f%d", k)
			want[name] = true
			exp := busyFile(i, k)
			got, err := os.ReadFile(filepath.Join(dir, name))
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("w%d/%s: %v", i, name, err))
			case !bytes.Equal(got, exp):
				bad = append(bad, fmt.Sprintf("w%d/%s: %d bytes sha256 %x, want %d bytes sha256 %x", i, name, len(got), sha256.Sum256(got), len(exp), sha256.Sum256(exp)))
			default:
				files++
				total += len(got)
			}
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			bad = append(bad, fmt.Sprintf("w%d: %v", i, err))
			continue
		}
		for _, ent := range ents {
			if !want[ent.Name()] && !strings.HasPrefix(ent.Name(), ".") {
				bad = append(bad, fmt.Sprintf("w%d/%s: on the server, but the writer finished only %d files", i, ent.Name(), done[i]))
			}
		}
	}
	return files, total, bad
}

// procStartTime is a process's start time in clock ticks since boot (/proc/<pid>/stat field
// 22): with the pid, it names one process ("" when it is gone).
func procStartTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// procState is the state letter of pid (/proc/<pid>/stat), "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// statfsCall is one statfs made in the background: on a FUSE mount whose daemon does not
// answer it cannot be abandoned, only waited for.
type statfsCall struct {
	start time.Time
	done  chan struct{}
	took  time.Duration
	err   error
}

func statfsAsync(path string) *statfsCall {
	c := &statfsCall{start: time.Now(), done: make(chan struct{})}
	go func() {
		var st unix.Statfs_t
		c.err = unix.Statfs(path, &st)
		c.took = time.Since(c.start)
		close(c.done)
	}()
	return c
}

// answeredWithin waits until d after the call's start and reports whether it was answered by then.
func (c *statfsCall) answeredWithin(d time.Duration) bool {
	select {
	case <-c.done:
		return c.took <= d
	case <-time.After(time.Until(c.start.Add(d))):
		select {
		case <-c.done:
			return c.took <= d
		default:
			return false
		}
	}
}

// wait waits up to d from now for the answer and reports whether it came.
func (c *statfsCall) wait(d time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(d):
		return false
	}
}

// describe waits up to d after the call's start and says how the call went.
func (c *statfsCall) describe(d time.Duration) string {
	if !c.answeredWithin(d) {
		return fmt.Sprintf("unanswered after %s", d)
	}
	if c.err != nil {
		return fmt.Sprintf("failed in %s: %v", c.took.Round(time.Millisecond), c.err)
	}
	return fmt.Sprintf("answered in %s", c.took.Round(time.Millisecond))
}

// waitAgentStarted waits until an agent pod other than old has its container running (started,
// not necessarily ready: a busy bridge may keep its first pass waiting) and returns its name.
func waitAgentStarted(t testing.TB, e *env, old types.UID, timeout time.Duration) string {
	t.Helper()
	var name string
	waitFor(t, timeout, "a new agent pod's container to run", func() (bool, string) {
		pods, err := e.c.Client.CoreV1().Pods(stack.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + stack.AgentDS})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.UID == old || p.DeletionTimestamp != nil {
				continue
			}
			for _, s := range p.Status.ContainerStatuses {
				if s.Name == "agent" && s.State.Running != nil {
					name = p.Name
					return true, ""
				}
			}
		}
		return false, framework.PodTable(e.c.Client, stack.Namespace)
	})
	return name
}

// bridgeAdoption is what an agent's log says of one PV's bridge at its start (s3fs.Supervisor.Adopt).
type bridgeAdoption struct {
	busy, dropped []string // "busy, not dead; adopted, not stopped" lines; "dropping a dead bridge" lines
	adoptedPid    int      // from "re-adopted healthy bridge"
	supervised    bool
	tail          string // the log's last lines, for failure messages
}

// agentAdoption reads the agent pod's log (zap JSON lines) for pv's adoption.
func agentAdoption(e *env, pod, pv string) (bridgeAdoption, error) {
	var a bridgeAdoption
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := framework.Logs(ctx, e.c.Client, stack.Namespace, pod, "agent")
	if err != nil {
		return a, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	a.tail = strings.Join(lines[max(0, len(lines)-15):], "\n")
	for _, line := range lines {
		var m struct {
			Msg        string `json:"msg"`
			PV         string `json:"pv"`
			Pid        int    `json:"pid"`
			Supervised bool   `json:"supervised"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.PV != pv {
			continue
		}
		switch {
		case strings.Contains(m.Msg, "busy, not dead"):
			a.busy = append(a.busy, line)
		case strings.HasPrefix(m.Msg, "re-adopted"):
			a.adoptedPid, a.supervised = m.Pid, m.Supervised
		case strings.Contains(m.Msg, "dead bridge"):
			a.dropped = append(a.dropped, line)
		}
	}
	return a, nil
}

// stallProxy is a TCP proxy between S3 clients and the S3 server. Stall holds every byte a
// client sends — so every request, on new and kept-alive connections alike — until Release
// (or the limit): the server, as the clients see it, stops answering while they run on.
// Transparent otherwise (no HTTP rewriting: request signatures stay valid).
type stallProxy struct {
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup

	mu      sync.Mutex
	gate    chan struct{} // non-nil while stalled; closed by release
	since   time.Time
	st      stallStats
	conns   map[net.Conn]bool
	closing bool
}

type stallStats struct {
	conns   int  // connections accepted
	held    int  // connections waiting at the gate now
	maxHeld int  // most connections waiting at once
	heldAll int  // sends held, in all
	expired bool // a stall ended by its limit, not by Release
}

// startStallProxy listens on host (an address pods and the node both reach) and forwards to
// upstream; it closes at cleanup.
func startStallProxy(t testing.TB, host, upstream string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listen for the S3 proxy on %s: %v", host, err)
	}
	p := &stallProxy{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Endpoint is the proxy's S3 URL.
func (p *stallProxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *stallProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c)
		}()
	}
}

func (p *stallProxy) pipe(c net.Conn) {
	s, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	p.st.conns++
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.copyHeld(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = s.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// copyHeld copies src to dst, each chunk after the gate lets it through.
func (p *stallProxy) copyHeld(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) wait() {
	p.mu.Lock()
	g := p.gate
	if g == nil {
		p.mu.Unlock()
		return
	}
	p.st.held++
	p.st.heldAll++
	p.st.maxHeld = max(p.st.maxHeld, p.st.held)
	p.mu.Unlock()
	<-g
	p.mu.Lock()
	p.st.held--
	p.mu.Unlock()
}

// Stall holds all client bytes from now until Release, or until limit has passed.
func (p *stallProxy) Stall(limit time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		return
	}
	g := make(chan struct{})
	p.gate, p.since = g, time.Now()
	time.AfterFunc(limit, func() {
		if p.release(g) > 0 {
			p.mu.Lock()
			p.st.expired = true
			p.mu.Unlock()
		}
	})
}

// Release ends the stall and returns how long it lasted (0 when none was on).
func (p *stallProxy) Release() time.Duration {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	return p.release(g)
}

func (p *stallProxy) release(g chan struct{}) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g == nil || p.gate != g {
		return 0
	}
	close(g)
	p.gate = nil
	return time.Since(p.since)
}

// Stats is a snapshot of the counters.
func (p *stallProxy) Stats() stallStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}

func (p *stallProxy) close() {
	p.Release()
	_ = p.ln.Close()
	p.mu.Lock()
	p.closing = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
