//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// writerScript waits for /tmp/start (the container's own disk), then holds one file descriptor
// open on /data/writer.log and appends a line a second through it until /tmp/stop appears; then
// closes it (s3fs uploads the file at that close). Each write is reported on stdout.
const writerScript = `while [ ! -e /tmp/start ]; do sleep 0.2; done
exec 3>>/data/writer.log || { echo OPEN-FAILED; exec sleep 2147483647; }
i=0
while [ ! -e /tmp/stop ]; do
  i=$((i+1))
  if echo "line-$i" >&3; then echo "wrote line-$i"; else echo "WRITE-FAILED line-$i"; fi
  sleep 1
done
if exec 3>&-; then echo "closed after line-$i"; else echo "CLOSE-FAILED after line-$i"; fi
exec sleep 2147483647
`

var wroteLine = regexp.MustCompile(`(?m)^wrote line-(\d+)$`)

// lostFUSEMountOpenFile: a writer holds a file open on the agent's bridge (ctrox layout, plugin
// kept down), appending a line a second; the plugin comes back and the agent hands the volume
// back to the driver while the file is still open; the writer goes on through the same
// descriptor, then closes it → no write failed, and every line is in the object on the S3
// server's side; the bridge's s3fs is gone once the file is closed.
func lostFUSEMountOpenFile(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	l := &fieldLayout{
		name: "openfile", driver: "ch.ctrox.csi.s3-driver", layout: csitest.LayoutCtrox,
		ns: "e2e-fuse-openfile", pv: "e2e-fuse-openfile-pv", handle: s3Bucket + "/openfile",
		attrs: map[string]string{"bucket": s3Bucket, "prefix": "openfile", "mounter": "s3fs"},
		files: map[string]string{"openfile/csi-fs/app.txt": "open file app data\n"},
		want:  "open file app data\n", dataDir: "openfile/csi-fs/", src: s3Bucket + ":/openfile/csi-fs",
	}
	layoutObjects(t, e, l)
	containers := append(appContainers(e.c.BusyboxImage)[:1], corev1.Container{
		Name: "writer", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", writerScript},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
	})
	if _, err := cs.CoreV1().Pods(l.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: containers, Volumes: dataVolume(),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod in %s: %v", l.ns, err)
	}
	pod := framework.WaitPod(t, cs, l.ns, "app", 2*time.Minute, "Running", framework.Running)
	app := l.readers("app")[:1]
	waitReads(t, e, time.Now(), 30*time.Second, "before the failure", app...)
	restarts := map[string]map[string]int32{"app": restartCounts(pod)}
	target := podTarget(e, string(pod.UID), l.pv)
	bridgeAfter := config.Default().S3.BridgeAfter.Duration

	t0 := time.Now()
	if err := l.plugin.Stop(ctx); err != nil {
		t.Fatalf("stop the plugin's DaemonSet: %v", err)
	}
	// A failure while the plugin is down must not leave the pod's teardown without its driver.
	t.Cleanup(func() { _ = l.plugin.Start(context.Background()) })
	rescueReads(t, e, t0, bridgeAfter+90*time.Second, "through the agent's bridge while the plugin is down", nil, app...)
	if !onOurMount(target, l.pv) {
		t.Fatalf("the app reads again with the plugin down, but the top at the target is not the agent's bridge: %s", describeStack(mountsAt(target)))
	}
	bridges := ourS3fs(l.pv)
	bridged := time.Since(t0).Round(100 * time.Millisecond)

	if _, err := execIn(e, l.ns, "app", "writer", "touch", "/tmp/start"); err != nil {
		t.Fatalf("start the writer: %v", err)
	}
	lines := func() (int, string) {
		out, err := framework.Logs(ctx, cs, l.ns, "app", "writer")
		if err != nil {
			return 0, err.Error()
		}
		n := 0
		for _, m := range wroteLine.FindAllStringSubmatch(out, -1) {
			n, _ = strconv.Atoi(m[1])
		}
		return n, out
	}
	waitFor(t, 30*time.Second, "the writer to append 3 lines through the bridge", func() (bool, string) {
		n, out := lines()
		return n >= 3 && !strings.Contains(out, "FAILED"), lastLines(out, 3)
	})

	t1 := time.Now()
	if err := l.plugin.Start(ctx); err != nil {
		t.Fatalf("bring the plugin's pod back: %v", err)
	}
	waitHandedBack(t, target, l.pv, l.plugin)
	back := time.Since(t1).Round(100 * time.Millisecond)
	atBack, _ := lines()
	waitFor(t, 30*time.Second, "the writer to append 5 more lines through its open descriptor after the hand-back", func() (bool, string) {
		n, out := lines()
		return n >= atBack+5 || strings.Contains(out, "FAILED"), lastLines(out, 3)
	})
	if _, err := execIn(e, l.ns, "app", "writer", "touch", "/tmp/stop"); err != nil {
		t.Fatalf("stop the writer: %v", err)
	}
	var out string
	waitFor(t, 30*time.Second, "the writer to close its file", func() (bool, string) {
		_, out = lines()
		return strings.Contains(out, "closed after") || strings.Contains(out, "CLOSE-FAILED"), lastLines(out, 3)
	})
	n, _ := lines()
	if strings.Contains(out, "FAILED") {
		t.Errorf("the writer's descriptor broke across the hand-back (%d lines written, hand-back after line %d):\n%s", n, atBack, failedLines(out))
	}
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	key := l.dataDir + "writer.log"
	var got string
	ok := pollFor(30*time.Second, func() bool {
		got = bucketObject(e, key)
		return got == want.String()
	})
	if !ok {
		t.Errorf("the object %s on the S3 server's side does not hold the writer's %d lines (hand-back after line %d): missing %v; object:\n%s",
			key, n, atBack, missingLines(got, n), got)
	}
	var left []int
	gone := pollFor(30*time.Second, func() bool { left = ourS3fs(l.pv); return len(left) == 0 })
	if !gone {
		t.Errorf("the bridge's s3fs %v still runs 30 s after the writer closed its file", left)
	}
	checkTopFUSE(t, target, "after the hand-back")
	checkKubeletMounts(t, e, "after the hand-back")
	checkPluginMounts(t, e, l.plugin, "after the hand-back")
	rc := checkRestarts(t, e, l.ns, restarts)
	t.Logf("RESULT open file across the hand-back: bridged after %s (agent s3fs %v); plugin back → hand-back after %s at line %d; %d lines written, object complete %v; bridge s3fs gone after close %v; restarts %v",
		bridged, bridges, back, atBack, n, ok, gone, rc)

	goneIn := deletePodGone(t, e, l.ns, "app", 30*time.Second)
	checkNothingLeft(t, e, l.pv, l.src)
	t.Logf("RESULT open file: pod deleted and gone in %s, nothing left", goneIn)
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

func failedLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "FAILED") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// missingLines lists the numbers of line-1..line-n not in got.
func missingLines(got string, n int) []int {
	have := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		have[l] = true
	}
	var miss []int
	for i := 1; i <= n; i++ {
		if !have[fmt.Sprintf("line-%d", i)] {
			miss = append(miss, i)
		}
	}
	return miss
}
