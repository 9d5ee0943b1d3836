//go:build e2e

package scenarios

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/e2e/csis3"
)

// lostFUSEMountKilled3: the driver's FUSE program (s3fs at kubelet's staging path, yandex layout)
// is killed three times in a row while the plugin stays up → restored each time through the
// driver, stack depth ≤ 2 at the target and at the staging path, exactly one s3fs of the plugin
// and none of ours (no leaked process), no container restarts.
func lostFUSEMountKilled3(t *testing.T, e *env) {
	l := &fieldLayout{
		name: "kill3", driver: "ru.yandex.s3.csi", layout: csis3.LayoutYandex,
		ns: "e2e-fuse-kill3", pv: "e2e-fuse-kill3-pv", handle: s3Bucket + "/kill3",
		attrs: map[string]string{"mounter": "s3fs"}, stage: true,
		files: map[string]string{"kill3/app.txt": "kill3 app data\n"},
		want:  "kill3 app data\n",
	}
	pod := fusePodSetup(t, e, l)
	restarts := map[string]map[string]int32{"app": restartCounts(pod)}
	target, global := podTarget(e, string(pod.UID), l.pv), l.globalMount(e)
	for i := 1; i <= 3; i++ {
		pids := pluginS3fs(l.plugin.Pid())
		if len(pids) != 1 {
			t.Fatalf("round %d: the plugin runs %d s3fs (%v), want 1 for the one staged volume", i, len(pids), pids)
		}
		t0 := time.Now()
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatalf("round %d: kill s3fs %d: %v", i, pids[0], err)
		}
		at := waitReads(t, e, t0, 90*time.Second, fmt.Sprintf("after s3fs kill #%d", i), l.readers("app")...)
		tgt, glob := mountsAt(target), mountsAt(global)
		if len(tgt) > 2 || len(glob) > 2 {
			t.Errorf("round %d: stacks too deep: target %s, staging %s", i, describeStack(tgt), describeStack(glob))
		}
		var now []int
		waitFor(t, 10*time.Second, fmt.Sprintf("round %d: exactly one live s3fs of the plugin and none of the agent", i), func() (bool, string) {
			now = pluginS3fs(l.plugin.Pid())
			ours := ourS3fs(l.pv)
			return len(now) == 1 && now[0] != pids[0] && len(ours) == 0, fmt.Sprintf("plugin s3fs %v (killed %d), agent s3fs %v", now, pids[0], ours)
		})
		checkRestarts(t, e, l.ns, restarts)
		t.Logf("RESULT s3fs kill #%d: app reads again after %s, pinned (None) %s; depth %d at the target %s, %d at staging %s; plugin s3fs %d → %v, no agent s3fs",
			i, at[l.ns+"/app/app"], at[l.ns+"/app/pinned"], len(tgt), describeStack(tgt), len(glob), describeStack(glob), pids[0], now)
	}
}
