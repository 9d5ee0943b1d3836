package s3mount

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// refusals is every way a driver's (or bridge's) result is refused, as a FakeCSI.Result.
func refusals(target string) []struct {
	name, reason string
	result       func(n *s3mounttest.FakeNode, path string) bool
} {
	return []struct {
		name, reason string
		result       func(n *s3mounttest.FakeNode, path string) bool
	}{
		{"not a mount", contract.ReasonReplayResultNotVisible, func(*s3mounttest.FakeNode, string) bool { return true }},
		{"plain dir of the node", contract.ReasonReplayResultNotVisible, func(n *s3mounttest.FakeNode, p string) bool { n.BindNodeDir(p); return true }},
		{"wrong fstype", contract.ReasonReplayResultWrongFilesystem, func(n *s3mounttest.FakeNode, p string) bool { n.AddMount(p, "tmpfs", "tmpfs"); return true }},
		{"same device", contract.ReasonReplayResultSameDevice, func(n *s3mounttest.FakeNode, p string) bool {
			_ = n.Mounter().Bind(target, p, false)
			return true
		}},
		{"not answering", contract.ReasonReplayResultNotAnswering, func(n *s3mounttest.FakeNode, p string) bool {
			n.AddMount(p, "fuse.s3fs", "s3fs")
			n.KillMount(p)
			return true
		}},
	}
}

// A replayed NodePublishVolume whose result fails the check is never bound over the target:
// the dead mount stays as it is, an Event names what the driver did, the metric counts it, and
// the driver is asked to unpublish at our fresh path, which is then removed.
func TestReplayResultRefused(t *testing.T) {
	for _, tc := range refusals(csiclient.TargetPath(testKubelet, "uid-1", "pv-a")) {
		t.Run(tc.name, func(t *testing.T) {
			w, target := replayWorld(t, false)
			w.csi.Result = tc.result
			w.node.KillMount(target)
			before := w.node.Table().Stack(target)
			w.start()
			if len(w.csi.Publish) != 1 {
				t.Fatalf("publish calls %d, want 1", len(w.csi.Publish))
			}
			if after := w.node.Table().Stack(target); !cmp.Equal(after, before) {
				t.Errorf("target stack changed:\n before %v\n after  %v", before, after)
			}
			if n := w.events.Count(corev1.EventTypeWarning, tc.reason, ""); n != 1 {
				t.Errorf("%d %s Events, want 1 (events %+v)", n, tc.reason, w.events.All())
			}
			if got := value(t, w.r.Metrics().ResultChecks.WithLabelValues(tc.reason)); got != 1 {
				t.Errorf("result_checks{%s} = %v, want 1", tc.reason, got)
			}
			fresh := csiclient.FreshPublishPath(testKubelet, "uid-1", "pv-a")
			if _, unpub := w.csi.Calls(); !slices.Equal(unpub, []string{fresh}) {
				t.Errorf("NodeUnpublishVolume at %v, want [%s]", unpub, fresh)
			}
			if w.node.Table().IsMountPoint(fresh) {
				t.Errorf("fresh path still mounted: %v", w.node.Table().Stack(fresh))
			}
			if !slices.Contains(w.node.Removed(), fresh) {
				t.Errorf("fresh directory %s not removed", fresh)
			}
			assertReasons(t, w.events, map[string]int{contract.ReasonMountReplayed: 0})
		})
	}
}

// The same check guards a restaged globalmount.
func TestRestageResultRefused(t *testing.T) {
	stagingPath := csiclient.KubeletStagingPath(testKubelet, testDriver, "bkt/pv-a")
	for _, tc := range refusals(stagingPath) {
		t.Run(tc.name, func(t *testing.T) {
			w, target := replayWorld(t, true)
			w.node.AddMount(stagingPath, "fuse.s3fs", "s3fs")
			w.node.KillMount(stagingPath)
			w.node.KillMount(target)
			w.csi.Result = tc.result
			before := w.node.Table().Stack(stagingPath)
			w.start()
			if after := w.node.Table().Stack(stagingPath); !cmp.Equal(after, before) {
				t.Errorf("staging stack changed:\n before %v\n after  %v", before, after)
			}
			if len(w.csi.Publish) != 0 {
				t.Errorf("published after a refused restage")
			}
			if n := w.events.Count(corev1.EventTypeWarning, tc.reason, ""); n != 1 {
				t.Errorf("%d %s Events, want 1", n, tc.reason)
			}
			fresh := csiclient.FreshStagePath(testKubelet, "pv-a")
			if unst, _ := w.csi.Calls(); !slices.Equal(unst, []string{fresh}) {
				t.Errorf("NodeUnstageVolume at %v, want [%s]", unst, fresh)
			}
			if w.node.Table().IsMountPoint(fresh) {
				t.Errorf("fresh stage path still mounted")
			}
		})
	}
}

// The hand-back from our bridge to the driver is checked too: a refused result leaves the
// bridge serving the target.
func TestHandBackResultRefused(t *testing.T) {
	for _, tc := range refusals(csiclient.TargetPath(testKubelet, "uid-1", "pv-a")) {
		if tc.name == "same device" {
			continue // the bridge's own device: covered by TestCheckMountRefusesOurBridgeDevice
		}
		t.Run(tc.name, func(t *testing.T) {
			w, target := replayWorld(t, false)
			w.csi.Down = true
			w.node.KillMount(target)
			w.start()
			w.clock.Step(11 * time.Second)
			w.sync()
			bridged := w.node.Table().Stack(target)
			if top := bridged[len(bridged)-1]; top.Source != stack.FSName("pv-a") {
				t.Fatalf("not bridged: %+v", top)
			}
			w.csi.Down = false
			w.csi.Result = tc.result
			w.clock.Step(2 * time.Second)
			w.sync()
			w.sync()
			if after := w.node.Table().Stack(target); !cmp.Equal(after, bridged) {
				t.Errorf("bridged stack changed:\n before %v\n after  %v", bridged, after)
			}
			if n := w.events.Count(corev1.EventTypeWarning, tc.reason, ""); n == 0 {
				t.Errorf("no %s Event", tc.reason)
			}
			if p := w.node.Processes(); len(p) != 1 || p[0].Exited() {
				t.Errorf("bridge s3fs stopped although the hand-back was refused")
			}
			assertReasons(t, w.events, map[string]int{contract.ReasonBridgeRetired: 0})
		})
	}
}

// A driver answering with a bind of our own bridge (its device) is refused as the same device.
func TestCheckMountRefusesOurBridgeDevice(t *testing.T) {
	w, target := replayWorld(t, false)
	w.csi.Down = true
	w.node.KillMount(target)
	w.start()
	w.clock.Step(11 * time.Second)
	w.sync()
	w.csi.Down = false
	w.csi.Result = func(n *s3mounttest.FakeNode, p string) bool {
		_ = n.Mounter().Bind(s3fs.Layout{StateDir: testState}.MountPoint("pv-a"), p, false)
		return true
	}
	w.clock.Step(2 * time.Second)
	w.sync()
	if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonReplayResultSameDevice, ""); n == 0 {
		t.Errorf("no %s Event", contract.ReasonReplayResultSameDevice)
	}
	assertReasons(t, w.events, map[string]int{contract.ReasonBridgeRetired: 0})
}
