//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// lostFUSEMountKilled3: the driver's FUSE program is killed three times in a row while its plugin
// stays up, in both field layouts at once (yandex: the s3fs at kubelet's staging path; ctrox: the
// s3fs at the target) → restored through the driver each time, stack depth ≤ 2 at the target and
// the staging path, exactly one s3fs of the plugin and none of the agent's (no leaked process),
// no container restarts.
func lostFUSEMountKilled3(t testing.TB, e *env) {
	ls := []*fieldLayout{
		{
			name: "kill3y", driver: "ru.yandex.s3.csi", layout: csitest.LayoutYandex,
			ns: "e2e-fuse-kill3y", pv: "e2e-fuse-kill3y-pv", handle: s3Bucket + "/kill3y",
			attrs: map[string]string{"mounter": "s3fs"}, stage: true,
			files: map[string]string{"kill3y/app.txt": "kill3 yandex data\n"},
			want:  "kill3 yandex data\n", dataDir: "kill3y/", src: s3Bucket + ":/kill3y",
		},
		{
			name: "kill3c", driver: "ch.ctrox.csi.s3-driver", layout: csitest.LayoutCtrox,
			ns: "e2e-fuse-kill3c", pv: "e2e-fuse-kill3c-pv", handle: s3Bucket + "/kill3c",
			attrs: map[string]string{"bucket": s3Bucket, "prefix": "kill3c", "mounter": "s3fs"},
			files: map[string]string{"kill3c/csi-fs/app.txt": "kill3 ctrox data\n", "kill3c/app.txt": "DECOY\n"},
			want:  "kill3 ctrox data\n", dataDir: "kill3c/csi-fs/", src: s3Bucket + ":/kill3c/csi-fs",
		},
	}
	for _, l := range ls {
		createAppPod(t, e, l)
	}
	var all []reader
	restarts := map[string]map[string]map[string]int32{}
	targets := map[string]string{}
	for _, l := range ls {
		p := framework.WaitPod(t, e.c.Client, l.ns, "app", 2*time.Minute, "Running", framework.Running)
		restarts[l.name] = map[string]map[string]int32{"app": restartCounts(p)}
		targets[l.name] = podTarget(e, string(p.UID), l.pv)
		all = append(all, l.readers("app")...)
	}
	waitReads(t, e, time.Now(), 30*time.Second, "before the kills", all...)
	for i := 1; i <= 3; i++ {
		killed := map[string][]int{}
		t0 := time.Now()
		for _, l := range ls {
			pids := pluginS3fs(l.plugin)
			if len(pids) != 1 {
				t.Errorf("round %d, %s: the plugin runs %d s3fs %v before the kill, want 1 (one volume)", i, l.name, len(pids), pids)
			}
			for _, pid := range pids {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatalf("round %d, %s: kill s3fs %d: %v", i, l.name, pid, err)
				}
			}
			killed[l.name] = pids
		}
		var plugins []*stack.CSI
		rs := append([]reader(nil), all...)
		for _, l := range ls {
			want := fmt.Sprintf("put on the S3 server's side after kill #%d\n", i)
			putInBucket(t, e, fmt.Sprintf("%srescued-%d.txt", l.dataDir, i), want)
			rs = append(rs, reader{l.ns, "app", "app", fmt.Sprintf("/data/rescued-%d.txt", i), want})
			plugins = append(plugins, l.plugin)
		}
		at := rescueReads(t, e, t0, 90*time.Second, fmt.Sprintf("after s3fs kill #%d", i), plugins, rs...)
		checkKubeletMounts(t, e, fmt.Sprintf("after s3fs kill #%d", i))
		for _, l := range ls {
			var now, ours []int
			ok := pollFor(10*time.Second, func() bool {
				now, ours = pluginS3fs(l.plugin), ourS3fs(l.pv)
				return len(now) == 1 && !contains(killed[l.name], now[0]) && len(ours) == 0
			})
			if !ok {
				t.Errorf("round %d, %s: want exactly one live s3fs of the plugin and none of the agent 10 s after the restore: plugin %v (killed %v), agent %v",
					i, l.name, now, killed[l.name], ours)
			}
			checkPluginMounts(t, e, l.plugin, fmt.Sprintf("%s, round %d", l.name, i))
			tgt, glob := mountsAt(targets[l.name]), mountsAt(l.globalMount(e))
			if len(tgt) > 2 || len(glob) > 2 {
				t.Errorf("round %d, %s: stacks too deep: target %s, staging %s", i, l.name, describeStack(tgt), describeStack(glob))
			}
			rc := checkRestarts(t, e, l.ns, restarts[l.name])
			t.Logf("RESULT %s layout, s3fs kill #%d: app reads again after %s, pinned (None) %s; restarts %v; depth %d at the target %s, %d at staging %s; plugin s3fs %v → %v, agent s3fs %v",
				l.layout, i, at[l.ns+"/app/app"], at[l.ns+"/app/pinned"], rc, len(tgt), describeStack(tgt), len(glob), describeStack(glob), killed[l.name], now, ours)
		}
	}
	for _, l := range ls {
		gone := deletePodGone(t, e, l.ns, "app", 30*time.Second)
		checkNothingLeft(t, e, l.pv, l.src)
		t.Logf("RESULT %s layout: pod deleted after the kills and gone in %s, nothing left", l.layout, gone)
	}
}

// createAppPod makes the layout's objects (layoutObjects) and a pod "app" (containers app and
// pinned) without waiting for it.
func createAppPod(t testing.TB, e *env, l *fieldLayout) {
	t.Helper()
	layoutObjects(t, e, l)
	if _, err := e.c.Client.CoreV1().Pods(l.ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: appContainers(e.c.BusyboxImage), Volumes: dataVolume(),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod in %s: %v", l.ns, err)
	}
}

// pollFor polls cond every 250 ms until it holds (true) or d has passed (false).
func pollFor(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return testenv.Poll(ctx, 250*time.Millisecond, func(context.Context) (bool, error) { return cond(), nil }) == nil
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
