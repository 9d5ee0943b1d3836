package s3mount

import (
	"slices"
	"testing"
)

func TestFreshPaths(t *testing.T) {
	const k = "/var/lib/kubelet"
	if got, want := FreshPublishPath(k, "uid-1", "pv-a"), k+"/pods/uid-1/pvrescue~s3/pv-a"; got != want {
		t.Errorf("FreshPublishPath = %q, want %q", got, want)
	}
	if got, want := FreshStagePath(k, "pv-a"), k+"/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/stage"; got != want {
		t.Errorf("FreshStagePath = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		path     string
		uid, pv  string
		ok       bool
		stagePV  string
		stageOK  bool
		anyFresh bool
	}{
		{path: k + "/pods/uid-1/pvrescue~s3/pv-a", uid: "uid-1", pv: "pv-a", ok: true, anyFresh: true},
		{path: k + "/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/stage", stagePV: "pv-a", stageOK: true, anyFresh: true},
		// kubelet's own paths are never ours.
		{path: k + "/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount"},
		{path: k + "/plugins/kubernetes.io/csi/drv/0123/globalmount"},
		{path: k + "/pods/uid-1/pvrescue~s3"},
		{path: k + "/pods/uid-1/pvrescue~s3/pv-a/x"},
		{path: k + "/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/globalmount"},
		{path: k + "/plugins/kubernetes.io/csi/pvrescue~s3/pv-a"},
		{path: "/elsewhere/pods/uid-1/pvrescue~s3/pv-a"},
		{path: k + "/pods/../pods/uid-1/pvrescue~s3/pv-a", uid: "uid-1", pv: "pv-a", ok: true, anyFresh: true},
	} {
		uid, pv, ok := ParseFreshPublishPath(k, tc.path)
		if uid != tc.uid || pv != tc.pv || ok != tc.ok {
			t.Errorf("ParseFreshPublishPath(%q) = %q, %q, %v; want %q, %q, %v", tc.path, uid, pv, ok, tc.uid, tc.pv, tc.ok)
		}
		spv, sok := ParseFreshStagePath(k, tc.path)
		if spv != tc.stagePV || sok != tc.stageOK {
			t.Errorf("ParseFreshStagePath(%q) = %q, %v; want %q, %v", tc.path, spv, sok, tc.stagePV, tc.stageOK)
		}
		if got := isFreshPath(k, tc.path); got != tc.anyFresh {
			t.Errorf("isFreshPath(%q) = %v", tc.path, got)
		}
	}
}

// An agent that died in the middle of a replay leaves mounts at its fresh paths. The next one
// finds them on start: one already handed over (its device is at kubelet's path) is detached
// by the agent alone; one never handed over is undone through the driver first; the
// directories go.
func TestSweepFreshOnStart(t *testing.T) {
	w, target := replayWorld(t, true)
	stagingPath := KubeletStagingPath(testKubelet, testDriver, "bkt/pv-a")
	handedFresh := FreshPublishPath(testKubelet, "uid-1", "pv-a")
	staleStage := FreshStagePath(testKubelet, "pv-a")
	// Handed over: the driver's mount at the fresh publish path is bound at the target.
	live := w.node.AddMount(handedFresh, "fuse.s3fs", "s3fs")
	_ = fakeMounter{w.node}.Bind(handedFresh, target, false)
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
