//go:build node

package s3mount_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// publishViaPlugin does what kubelet does: vol_data.json, then NodePublishVolume on the plugin.
func (e *nodeEnv) publishViaPlugin(podUID, pv string) string {
	e.t.Helper()
	target := csiclient.TargetPath(e.kubelet, podUID, pv)
	must(e.t, os.MkdirAll(target, 0o750))
	vd, _ := json.Marshal(map[string]string{"specVolID": pv, "volumeHandle": bucket + "/" + pv,
		"driverName": driver, "nodeName": nodeName})
	must(e.t, os.WriteFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), vd, 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := csiclient.GRPCDialer{}.Dial(ctx, csiclient.PluginSocket(e.kubelet, driver))
	must(e.t, err)
	defer func() { _ = node.Close() }() // a test client: nothing to report on close
	must(e.t, node.NodePublish(ctx, &csi.NodePublishVolumeRequest{VolumeId: bucket + "/" + pv, TargetPath: target,
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}},
		Secrets: map[string]string{"accessKeyID": ak, "secretAccessKey": sk, "endpoint": e.endpoint}}))
	return target
}

// The driver's FUSE process is killed three times: each time the agent replays NodePublishVolume
// on the real (in-process) plugin and hands the driver's new mount over the dead target; the
// container reads and writes again, the stack stays at 2, no s3fs of ours runs, and the mount
// outlives the agent.
func TestNodeReplayThroughDriver(t *testing.T) {
	e := newNodeEnv(t)
	plugin, err := csitest.Start(csitest.Options{Socket: csiclient.PluginSocket(e.kubelet, driver), StateDir: filepath.Join(e.dir, "plugin")})
	must(t, err)
	t.Cleanup(func() { plugin.KillMounts(); plugin.Stop() })
	e.volume("pv-r", nil, false)
	pod := e.pod("app-r", "pv-r")
	target := e.publishViaPlugin(string(pod.UID), "pv-r")
	must(t, os.WriteFile(filepath.Join(target, "before.txt"), []byte("written before\n"), 0o644))
	ctr := e.container("r", target)
	r, stop := e.agent(30 * time.Second)

	var samples []time.Duration
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		served := topMountID(target)
		plugin.KillMounts()
		waitFor(t, 30*time.Second, "target restored through the driver: another mount answers there", func() bool { return restoredSince(target, served) })
		samples = append(samples, time.Since(t0))
		if n := len(stackAt(target)); n > 2 {
			t.Errorf("after death %d: %d mounts at the target, want <= 2", i+1, n)
		}
		if top := topFSType(target); top != "fuse.s3fs" {
			t.Errorf("after death %d: top mount type %q", i+1, top)
		}
		containerReads(t, ctr, fmt.Sprintf("cat before.txt && echo r-%d > r-%d.txt && cat r-%d.txt", i, i, i),
			fmt.Sprintf("written before\nr-%d", i), fmt.Sprintf("container view after restore %d", i+1))
		if n := len(plugin.Pids()); n != 1 {
			t.Errorf("after death %d: plugin runs %d s3fs, want 1", i+1, n)
		}
		if n := len(s3fsPidsUnder(e.dir)); n != 1 {
			t.Errorf("after death %d: %d s3fs under the test dir, want 1 (the driver's; none of ours)", i+1, n)
		}
	}
	if got := counterValue(t, r.Metrics().Restores.WithLabelValues(s3mount.MethodReplay, "success")); got != 3 {
		t.Errorf("restores{replay,success} = %v, want 3", got)
	}
	if n := plugin.CallCount("NodePublishVolume"); n != 4 {
		t.Errorf("NodePublishVolume calls %d, want 4 (kubelet's + 3 replays)", n)
	}
	sorted := append([]time.Duration(nil), samples...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("replay: s3fs killed -> target answers again: p50 %s, min %s, max %s over %d samples (check interval 200ms)",
		sorted[len(sorted)/2].Round(time.Millisecond), sorted[0].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), len(sorted))

	// The mount is the driver's: it outlives our agent.
	stop()
	if out, err := ctr("cat r-2.txt"); err != nil || out != "r-2" {
		t.Errorf("after the agent stopped: %q, %v", out, err)
	}

	// Teardown: the pod is deleted; kubelet calls NodeUnpublishVolume, which (as the field
	// drivers do) unmounts the top mount only. Each replayed mount went beneath the dead one,
	// which was then detached: the target holds one mount, so the driver's unpublish leaves
	// none and kubelet finishes its teardown without the agent's help.
	e.agent(30 * time.Second)
	e.stopContainers()
	must(t, e.client.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, *metav1.NewDeleteOptions(0)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// kubelet retries a failed NodeUnpublishVolume; so does this test.
	var lastErr error
	waitFor(t, 10*time.Second, "NodeUnpublishVolume succeeds", func() bool {
		lastErr = unpublish(ctx, csiclient.PluginSocket(e.kubelet, driver), target)
		if lastErr != nil {
			t.Logf("NodeUnpublishVolume: %v (retrying)", lastErr)
		}
		return lastErr == nil
	})
	if s := stackAt(target); len(s) != 0 {
		t.Errorf("target holds %d mounts right after the driver's unpublish, want none: %+v", len(s), s)
	}
}

// unpublish calls NodeUnpublishVolume as kubelet does.
func unpublish(ctx context.Context, socket, target string) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // a test client: nothing to report on close
	_, err = csi.NewNodeClient(conn).NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: bucket + "/pv-r", TargetPath: target})
	return err
}
