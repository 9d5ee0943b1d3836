//go:build node

package s3mount_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

// A staging driver (STAGE_UNSTAGE: s3fs at kubelet's globalmount, binds to the targets) that
// serves at a path of its own and registered with kubelet through a registration socket. Its
// staging s3fs is killed three times: each time the agent finds the plugin through GetInfo,
// replays NodeStageVolume at a fresh directory and moves the result over kubelet's dead
// globalmount (no mkdir on it), replays NodePublishVolume, and starts no s3fs of its own; the
// globalmount and the target hold at most the dead mount plus a live one (one mount where the
// kernel mounts beneath).
// (A short name: kubelet paths under t.TempDir() must fit a unix socket path, 108 bytes.)
func TestNodeStagingReplay(t *testing.T) {
	e := newNodeEnv(t)
	plugin, staging, target := e.stagedPod("pv-st", "app-st", nil)
	must(t, os.WriteFile(filepath.Join(target, "before.txt"), []byte("written before\n"), 0o644))

	r, _ := e.agent(30 * time.Second)
	for i := 0; i < 3; i++ {
		// The device a container (mountPropagation None) holds: the target's live mount now.
		held, _ := mountTable().Top(target)
		asks := e.remount.asks()
		served := topMountID(target)
		plugin.KillMounts()
		waitFor(t, 30*time.Second, "target readable again, another mount serving it", func() bool {
			b, err := os.ReadFile(filepath.Join(target, "before.txt"))
			return err == nil && string(b) == "written before\n" && restoredSince(target, served)
		})
		var st unix.Statfs_t
		if err := unix.Statfs(staging, &st); err != nil {
			t.Errorf("after death %d: globalmount %v", i+1, err)
		}
		for _, p := range []string{staging, target} {
			if n := len(stackAt(p)); n > 2 {
				t.Errorf("after death %d: %d mounts at %s, want <= 2", i+1, n, p)
			}
		}
		// Every death's device, not only the first one's, goes to the container remounter.
		waitFor(t, 5*time.Second, fmt.Sprintf("death %d: container remounter asked about the dead device %s", i+1, held.Dev), func() bool { return e.remount.askedSince(asks, held.Dev) })
		if n := len(plugin.Pids()); n != 1 {
			t.Errorf("after death %d: plugin runs %d s3fs, want 1", i+1, n)
		}
		// Our bridges mount under <state>/s3/staging (the driver's replayed s3fs runs at
		// <kubelet>/plugins/kubernetes.io/csi/pvrescue~s3/..., our fresh directory, and is the driver's).
		if pids := s3fsPidsUnder(s3fs.Layout{StateDir: e.state}.MountRoot()); len(pids) != 0 {
			t.Errorf("after death %d: s3fs of ours %v, want none (the driver answered)", i+1, pids)
		}
	}
	if n := plugin.CallCount("NodeStageVolume"); n != 4 {
		t.Errorf("NodeStageVolume calls %d, want 4 (kubelet's + 3 replays)", n)
	}
	// The target reads again the moment the restaged mount propagates onto it; the agent
	// records the restore right after.
	waitFor(t, 5*time.Second, "3 replays recorded (metric and MountReplayed Events)", func() bool {
		return counterValue(t, r.Metrics().Restores.WithLabelValues(s3mount.MethodReplay, "success")) == 3 &&
			e.rec.Count(corev1.EventTypeNormal, contract.ReasonMountReplayed, "") == 3
	})
	if n := e.rec.Count(corev1.EventTypeNormal, contract.ReasonMountBridged, ""); n != 0 {
		t.Errorf("%d MountBridged Events, want 0", n)
	}
}

// stagedPod starts the test plugin as a staging driver (yandex layout) serving at a path of its
// own, registered through a registration socket, and mounts PV pv for a new pod podName as
// kubelet does: vol_data.json, NodeStageVolume at globalmount, NodePublishVolume at the target.
// prepare, when set, runs on the empty target before anything is mounted on it.
func (e *nodeEnv) stagedPod(pv, podName string, prepare func(target string)) (plugin *csitest.Plugin, staging, target string) {
	t := e.t
	t.Helper()
	endpoint := filepath.Join(e.dir, "elsewhere", "csi.sock")
	plugin, err := csitest.Start(csitest.Options{Socket: endpoint, StateDir: filepath.Join(e.dir, "plugin"), Layout: csitest.LayoutYandex,
		RegistrationSocket: filepath.Join(csiclient.RegistrationDir(e.kubelet), driver+"-reg.sock"), Driver: driver})
	must(t, err)
	t.Cleanup(func() { plugin.KillMounts(); plugin.Stop() })
	e.stagedVolume(pv)
	pod := e.pod(podName, pv)
	staging = csiclient.KubeletStagingPath(e.kubelet, driver, bucket+"/"+pv)
	target = csiclient.TargetPath(e.kubelet, string(pod.UID), pv)

	must(t, os.MkdirAll(staging, 0o750))
	must(t, os.MkdirAll(target, 0o750))
	if prepare != nil {
		prepare(target)
	}
	vd, _ := json.Marshal(map[string]string{"specVolID": pv, "volumeHandle": bucket + "/" + pv, "driverName": driver, "nodeName": nodeName})
	must(t, os.WriteFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), vd, 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := csiclient.GRPCDialer{}.Dial(ctx, endpoint)
	must(t, err)
	defer func() { _ = node.Close() }() // a test client: nothing to report on close
	capability := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}}
	secrets := map[string]string{"accessKeyID": ak, "secretAccessKey": sk, "endpoint": e.endpoint}
	must(t, node.NodeStage(ctx, &csi.NodeStageVolumeRequest{VolumeId: bucket + "/" + pv, StagingTargetPath: staging,
		VolumeCapability: capability, Secrets: secrets}))
	must(t, node.NodePublish(ctx, &csi.NodePublishVolumeRequest{VolumeId: bucket + "/" + pv, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: capability, Secrets: secrets}))
	return plugin, staging, target
}

// stagedVolume creates a PV (handle bkt/<name>) with stage and publish secret refs, and its claim.
func (e *nodeEnv) stagedVolume(name string) {
	e.t.Helper()
	ref := &corev1.SecretReference{Name: "s3-creds", Namespace: ns}
	e.claimedVolume(name, &corev1.CSIPersistentVolumeSource{NodeStageSecretRef: ref, NodePublishSecretRef: ref,
		VolumeAttributes: map[string]string{"mounter": "s3fs"}})
}
