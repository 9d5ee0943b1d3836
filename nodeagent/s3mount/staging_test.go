package s3mount

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// A staging driver whose staging s3fs died three times in a row (plugin up): each time
// NodeStageVolume is replayed and the result goes over kubelet's dead staging path (no mkdir on
// it), the pods' targets are replayed too, no s3fs of ours starts, and kubelet's staging path
// stays at the driver's dead mount plus one live mount.
func TestRestageRepeatedlyKeepsStagingBounded(t *testing.T) {
	w, target := replayWorld(t, true)
	stagingPath := csiclient.KubeletStagingPath(testKubelet, testDriver, "bkt/pv-a")
	w.node.AddMount(stagingPath, "fuse.s3fs", "s3fs")
	w.start()
	for i := 0; i < 3; i++ {
		if i == 2 {
			w.start() // a new agent reads the record of handed-back mounts from the state dir
		}
		w.node.KillMount(stagingPath)
		w.node.KillMount(target)
		w.clock.Step(time.Second)
		w.sync()
		for _, p := range []string{stagingPath, target} {
			if err := fakeOS(w.node).Statfs.Statfs(context.Background(), p, time.Second); err != nil {
				t.Fatalf("after death %d: %s: %v", i+1, p, err)
			}
			if n := len(w.node.Table().Stack(p)); n != 2 {
				t.Errorf("after death %d: %d mounts at %s, want 2", i+1, n, p)
			}
		}
	}
	if n, m := len(w.csi.Staged), len(w.csi.Publish); n != 3 || m != 3 {
		t.Errorf("NodeStageVolume %d, NodePublishVolume %d calls; want 3 and 3", n, m)
	}
	if n := len(w.node.Started()); n != 0 {
		t.Errorf("started %d s3fs of ours although the driver answered", n)
	}
}

// Driver down → bridge; driver back → kubelet's dead staging path is staged again and the
// bridged target moves to the driver's mount, once: later checks publish nothing more (the loop
// once seen: publishing from a staging path still served by our bridge, forever).
func TestRetireWithStagingDriverHappensOnce(t *testing.T) {
	w, target := replayWorld(t, true)
	stagingPath := csiclient.KubeletStagingPath(testKubelet, testDriver, "bkt/pv-a")
	w.node.AddMount(stagingPath, "fuse.s3fs", "s3fs")
	w.node.KillMount(stagingPath)
	w.node.KillMount(target)
	w.csi.Down = true
	w.start()
	w.clock.Step(11 * time.Second)
	w.sync()
	if top, _ := w.node.Table().Top(target); top.Source != stack.FSName("pv-a") {
		t.Fatalf("not bridged: top %+v", top)
	}
	w.csi.Down = false
	w.settle()
	w.settle()
	if n, m := len(w.csi.Staged), len(w.csi.Publish); n != 1 || m != 1 {
		t.Errorf("NodeStageVolume %d, NodePublishVolume %d calls after the driver came back; want 1 and 1", n, m)
	}
	if got := sources(w.node.Table().Stack(target)); !slices.Equal(got, []string{"s3fs", "s3fs"}) {
		t.Errorf("target stack %v, want the dead driver mount + the driver's new mount", got)
	}
	if p := w.node.Processes(); len(p) != 1 || !p[0].Exited() {
		t.Error("bridge not stopped after the retire")
	}
	assertReasons(t, w.events, map[string]int{contract.ReasonMountBridged: 1, contract.ReasonBridgeRetired: 1})
}

// A target whose only mount is a bind of our bridge: the retire puts the driver's mount on top
// (never exposing the bare directory). The bridge no longer serves any top mount and retires,
// but its s3fs is not stopped: the bind under the driver's mount may still be held (a container
// without HostToContainer propagation holds its own copy); it exits once that bind goes with the
// pod's target.
func TestRetireOfATargetHoldingOnlyOurBridge(t *testing.T) {
	w, target := replayWorld(t, false)
	w.csi.Down = true
	w.node.KillMount(target)
	w.start()
	w.clock.Step(11 * time.Second)
	w.sync()
	// Make the target hold only our bridge: the driver's dead mount was never under it.
	tab := w.node.Table()
	mounts := tab.Stack(target)
	if len(mounts) != 2 {
		t.Fatalf("bridged stack %d, want 2", len(mounts))
	}
	w.node.Forget(mounts[0].ID)
	w.csi.Down = false
	w.settle()
	if got := sources(w.node.Table().Stack(target)); !slices.Equal(got, []string{stack.FSName("pv-a"), "s3fs"}) {
		t.Errorf("target stack %v, want our bind + the driver's mount on top", got)
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target: %v", err)
	}
	p := w.node.Processes()
	if len(p) != 1 || p[0].Exited() {
		t.Fatal("bridge s3fs stopped while a bind of it is still mounted")
	}
	if n := len(w.csi.Publish); n != 1 {
		t.Errorf("NodePublishVolume calls %d, want 1 (no loop)", n)
	}
	if got := value(t, w.r.Metrics().BridgesActive); got != 0 {
		t.Errorf("bridges_active = %v, want 0 (retired)", got)
	}
	// Kubelet tears the pod down: the driver's mount goes, then our bind (a gone pod's target):
	// the bridge's filesystem is mounted nowhere any more and its s3fs exits.
	_ = w.node.Mounter().Unmount(target, false)
	w.view.DeletePod("default", "app")
	w.waitFor("retired bridge exited after the pod's target was emptied", func() bool {
		_, _, rec := w.node.File(s3fs.Layout{StateDir: testState}.RetiringRecordFile("pv-a", p[0].Pid()))
		return p[0].Exited() && !rec
	})
	// kubelet's teardown is over (the driver's unpublish took the driver's mount, which we had
	// put there, and succeeded): the agent finishes it, kubelet will not come back.
	volDir := filepath.Dir(target)
	if n := len(w.node.Table().Stack(target)); n != 0 {
		t.Errorf("target stack %d after the teardown, want 0", n)
	}
	if _, _, ok := w.node.File(filepath.Join(volDir, csiclient.VolDataFile)); ok {
		t.Error("vol_data.json left after kubelet's teardown: kubelet's orphan cleanup would refuse the pod's directory for ever")
	}
	checkTeardownHelp(t, w, 1, 1)
}
