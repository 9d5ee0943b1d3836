package s3mount

import (
	"slices"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
)

// An agent that died in the middle of a replay leaves mounts at its fresh paths. The next one
// finds them on start: one already handed over (its device is at kubelet's path) is detached
// by the agent alone; one never handed over is undone through the driver first; the
// directories go.
func TestSweepFreshOnStart(t *testing.T) {
	w, target := replayWorld(t, true)
	stagingPath := csiclient.KubeletStagingPath(testKubelet, testDriver, "bkt/pv-a")
	handedFresh := csiclient.FreshPublishPath(testKubelet, "uid-1", "pv-a")
	staleStage := csiclient.FreshStagePath(testKubelet, "pv-a")
	// Handed over: the driver's mount at the fresh publish path is bound at the target.
	live := w.node.AddMount(handedFresh, "fuse.s3fs", "s3fs")
	_ = w.node.Mounter().Bind(handedFresh, target, false)
	// Never handed over: a staging mount at the fresh stage path, none at kubelet's.
	w.node.AddMount(stagingPath, "fuse.s3fs", "s3fs")
	w.node.AddMount(staleStage, "fuse.s3fs", "s3fs")
	w.node.SetFile(testKubelet+"/pods/uid-2/pvrescue~s3/pv-b", nil) // an empty left-over directory
	w.start()

	for _, p := range []string{handedFresh, staleStage} {
		if w.node.Table().IsMountPoint(p) {
			t.Errorf("%s still mounted after the start", p)
		}
	}
	unstaged, unpublished := w.csi.Calls()
	if !slices.Equal(unstaged, []string{staleStage}) {
		t.Errorf("NodeUnstageVolume at %v, want only the never handed-over %s", unstaged, staleStage)
	}
	if len(unpublished) != 0 {
		t.Errorf("NodeUnpublishVolume at %v: the handed-over mount serves the target and must not go through the driver", unpublished)
	}
	if top, _ := w.node.Table().Top(target); top.Dev != live.Dev {
		t.Errorf("target's top %+v, want the handed-over mount %s", top, live.Dev)
	}
	rm := w.node.Removed()
	for _, p := range []string{handedFresh, staleStage, testKubelet + "/pods/uid-2/pvrescue~s3/pv-b"} {
		if !slices.Contains(rm, p) {
			t.Errorf("%s not removed (removed %v)", p, rm)
		}
	}
}
