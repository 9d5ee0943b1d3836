package s3mount

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// mounterWorld: pod uid-1 on PV pv-a of the yandex driver whose attributes name mounter; the
// driver's mount at the target is of fsType and dead; the driver (FakeCSI, mounting fsType) is down.
func mounterWorld(t *testing.T, mounter, fsType string) (*world, string) {
	pv := pvObj("pv-a", testDriver, false)
	pv.Spec.CSI.VolumeAttributes = map[string]string{"mounter": mounter}
	w := newWorld(t, []runtime.Object{secretObj("creds", goodSecret), storageClass(), pv, pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", false)}...)
	w.csi = &s3mounttest.FakeCSI{Node: w.node, Down: true, Result: func(node *s3mounttest.FakeNode, path string) bool {
		node.AddMount(path, fsType, mounter)
		return true
	}}
	target := w.publish("uid-1", "pv-a")
	_ = fakeOS(w.node).Mounter.Unmount(target, false)
	w.node.AddMount(target, fsType, mounter)
	w.node.KillMount(target)
	return w, target
}

// k8s-csi-s3's geesefs (its default) and rclone volumes: the driver kept down past BridgeAfter →
// our s3fs bridges them (with the modes the program shows by default); the driver back → the
// volume moves to the driver's own mount of the program's type, and the bridge is retired.
// alone: the dead driver mount is no longer below the bridge (a kernel that replaces the top
// mount in place leaves the target holding the bridge alone, as the e2e cluster showed): the
// driver's mount is accepted back by the PV's mounter type, not by the dead mount's.
func TestBridgeGeesefsAndRcloneVolumes(t *testing.T) {
	for _, tc := range []struct {
		m     string
		alone bool
	}{{"geesefs", false}, {"rclone", false}, {"geesefs", true}, {"rclone", true}} {
		m := tc.m
		t.Run(fmt.Sprintf("%s alone=%v", m, tc.alone), func(t *testing.T) {
			fsType := "fuse." + m
			w, target := mounterWorld(t, m, fsType)
			w.start()
			w.clock.Step(11 * time.Second)
			w.sync()
			if top, _ := w.node.Table().Top(target); top.Source != stack.FSName("pv-a") {
				t.Fatalf("not bridged: top %+v; events %v", top, w.events.All())
			}
			if tc.alone {
				for _, mnt := range w.node.Table().Stack(target) {
					if mnt.FSType == fsType {
						w.node.Forget(mnt.ID)
					}
				}
			}
			started := w.node.Started()
			if len(started) != 1 || !slices.Contains(started[0], "umask=0022") || !slices.Contains(started[0], "bkt:/pv-a") {
				t.Errorf("bridge s3fs %v, want one of bkt:/pv-a with umask=0022 (%s's default modes)", started, m)
			}
			w.csi.Down = false
			w.clock.Step(2 * time.Second)
			w.sync() // the driver answers: hand-back
			w.sync() // the bridge has no bind left: retired
			top, _ := w.node.Table().Top(target)
			if top.FSType != fsType || top.Source == stack.FSName("pv-a") {
				t.Errorf("after the hand-back the target's top is %s %q, want the driver's own %s mount", top.FSType, top.Source, fsType)
			}
			if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
				t.Errorf("target after the hand-back: %v", err)
			}
			if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonReplayResultWrongFilesystem, ""); n != 0 {
				t.Errorf("the driver's %s mount refused: %v", fsType, w.events.All())
			}
			assertReasons(t, w.events, map[string]int{contract.ReasonMountBridged: 1, contract.ReasonBridgeRetired: 1})
		})
	}
}

// What our s3fs cannot stand in for is reported with the reason and never bridged: a mounter the
// profile does not know, and a dead mount of a type the profile does not bridge.
func TestNoBridgeForMountersWeCannotReproduce(t *testing.T) {
	for _, tc := range []struct{ name, mounter, fsType, why string }{
		{"unknown mounter", "goofys", "fuse.goofys", "fuse.goofys"},
		{"attribute says s3fs, the dead mount is another program's", "s3fs", "fuse.goofys", "fuse.goofys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := mounterWorld(t, tc.mounter, tc.fsType)
			w.start()
			w.clock.Step(11 * time.Second)
			w.sync()
			w.settle()
			if n := len(w.node.Started()); n != 0 {
				t.Errorf("bridged a %s mount with s3fs", tc.fsType)
			}
			found := false
			for _, ev := range w.events.All() {
				found = found || strings.Contains(ev, "CannotReproduce:") && strings.Contains(ev, tc.why)
			}
			if !found {
				t.Errorf("no CannotReproduce Event naming %s; events %v", tc.why, w.events.All())
			}
		})
	}
}

// A replay names what it passed the driver: the PV's volume handle and its mounter.
func TestReplayEventNamesTheAttributes(t *testing.T) {
	w, target := mounterWorld(t, "rclone", "fuse.rclone")
	w.csi.Down = false
	w.start()
	if top, _ := w.node.Table().Top(target); top.FSType != "fuse.rclone" {
		t.Fatalf("not replayed: top %+v; events %v", top, w.events.All())
	}
	if n := w.events.Count(corev1.EventTypeNormal, contract.ReasonMountReplayed, ""); n != 1 {
		t.Fatalf("MountReplayed Events %d; events %v", n, w.events.All())
	}
	for _, ev := range w.events.All() {
		if strings.Contains(ev, contract.ReasonMountReplayed) && !strings.Contains(ev, "with volume bkt/pv-a (PV uid pv-uid-pv-a), mounter rclone") {
			t.Errorf("Event %q does not name the volume and mounter replayed", ev)
		}
	}
}
