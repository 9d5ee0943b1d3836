//go:build e2e

package scenarios

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// upgradeVersion is version B of TestUpgradeRollback: the tag of the images and the chart the
// upgrade publishes (SemVer, so it is the chart's version too).
const upgradeVersion = "v0.0.0-e2e-b"

// TestUpgradeRollback runs docs/operations.md's Upgrade section as written (registry replaced,
// --plain-http added for the test registry) on an install made by the README's block (version A,
// Helm 3, tls.mode=bootstrap: both with --wait). A volume of the ctrox layout is bridged (its
// plugin kept down); then `make images push` at version B and `helm upgrade … --wait` replace the
// agent pod while the volume is bridged: the new agent (image B) adopts the bridge — the same s3fs
// process, the same mount at the target — and the pod keeps reading. The plugin returns and the
// volume is handed back to the driver's own mount. Then `helm rollback --wait` brings version A's
// agent back, and a lost local disk is rescued by it. No application container restarts anywhere.
func TestUpgradeRollback(t *testing.T) {
	c := framework.UpWith(t, "upgrade", func(o *cluster.Options) { o.PullRegistry = true })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	t.Cleanup(cancel)
	repo := testenv.RepoRoot()
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	noCertManager, err := stack.ReadmeBootstrapFlag(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(filepath.Join(repo, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	registry := c.PullRegistry.Host + "/pvrescue"
	upgradeCmds, rollbackCmds, err := stack.OperationsUpgradeCommands(string(ops), registry)
	if err != nil {
		t.Fatal(err)
	}
	if upgradeCmds, err = stack.AddArgs(upgradeCmds, "helm upgrade ", []string{"--plain-http"}); err != nil {
		t.Fatal(err)
	}
	e := rescueEnv(ctx, t, c)
	imgA := readmeInstall(ctx, t, e, 3, "e2e-upgrade-app", strings.Fields(noCertManager), "")
	agentA := agentPodsRunning(ctx, t, c, imgA.Agent)
	t.Logf("version A installed: agent %s on %v", imgA.Agent, agentA)

	// A bridged volume: the ctrox layout's plugin kept down, the agent's own s3fs serves.
	l := &fieldLayout{
		name: "upgrade", driver: "ch.ctrox.csi.s3-driver", layout: csitest.LayoutCtrox,
		ns: "e2e-upgrade-bridge", pv: "e2e-upgrade-bridge-pv", handle: s3Bucket + "/upgrade",
		attrs: map[string]string{"bucket": s3Bucket, "prefix": "upgrade", "mounter": "s3fs"},
		files: map[string]string{"upgrade/csi-fs/app.txt": "upgraded app data\n"},
		want:  "upgraded app data\n", dataDir: "upgrade/csi-fs/", src: s3Bucket + ":/upgrade/csi-fs",
	}
	layoutObjects(t, e, l)
	cs := c.Client
	if _, err := cs.CoreV1().Pods(l.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: appContainers(c.BusyboxImage), Volumes: dataVolume(),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod in %s: %v", l.ns, err)
	}
	pod := framework.WaitPod(t, cs, l.ns, "app", 2*time.Minute, "Running", framework.Running)
	waitReads(t, e, time.Now(), 30*time.Second, "before the failure", l.readers("app")...)
	restarts := map[string]map[string]int32{"app": restartCounts(pod)}
	target := podTarget(e, string(pod.UID), l.pv)
	t0 := time.Now()
	if err := l.plugin.Stop(ctx); err != nil {
		t.Fatalf("stop the plugin's DaemonSet: %v", err)
	}
	started := false
	t.Cleanup(func() {
		if !started {
			_ = l.plugin.Start(context.Background())
		}
	})
	rescueReads(t, e, t0, 2*time.Minute, "through the agent's bridge while the plugin is down", nil, l.readers("app")...)
	bridge := ourS3fs(l.pv)
	if len(bridge) != 1 || !onOurMount(target, l.pv) {
		t.Fatalf("not bridged: the agent's s3fs %v, the target's stack %s", bridge, describeStack(mountsAt(target)))
	}
	bridged := demoTop(t, target, "while bridged")
	demoWaitEvents(t, e, l.ns, "app", contract.ReasonMountBridged)

	// Upgrade to B while bridged: operations.md's commands, VERSION=B for make.
	t1 := time.Now()
	helm3, err := stack.HelmCLIVersion(repo, 3)
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(repo, "bin", "k8s", testenv.KubeVersion, "kubectl")
	clis := stack.CLIs{Helm: stack.HelmCLIPath(repo, helm3), Kubectl: kubectl}
	out, err := stack.RunCommands(ctx, c, stack.CommandsRun{Repo: repo, Commands: upgradeCmds, Name: "upgrade-b", CLIs: clis,
		Env: []string{"PLATFORMS=" + readmePlatforms, "VERSION=" + upgradeVersion}})
	t.Logf("operations.md's upgrade commands at VERSION=%s, %s:\n%s", upgradeVersion, time.Since(t1).Round(100*time.Millisecond), out)
	if err != nil {
		t.Fatal(err)
	}
	imgB := registry + "/pvrescue-agent:" + upgradeVersion
	agentB := agentPodsRunning(ctx, t, c, imgB)
	if len(slices.DeleteFunc(slices.Clone(agentB), func(p string) bool { return !slices.Contains(agentA, p) })) > 0 {
		t.Errorf("the agent pods %v after the upgrade include version A's %v: the agent was not replaced", agentB, agentA)
	}
	// The new agent adopted the bridge: the same s3fs process, the same mount at the target.
	if now := ourS3fs(l.pv); !slices.Equal(now, bridge) {
		t.Errorf("the agent's s3fs for %s: %v before the upgrade, %v after: the bridge was not adopted", l.pv, bridge, now)
	}
	if now := demoTop(t, target, "after the upgrade"); now.ID != bridged.ID || now.Dev != bridged.Dev {
		t.Errorf("the target's top mount changed across the upgrade (mount %d dev %s → %d dev %s): not adopted", bridged.ID, bridged.Dev, now.ID, now.Dev)
	}
	const afterUpgrade = "put on the S3 server's side after the upgrade\n"
	putInBucket(t, e, l.dataDir+"after-upgrade.txt", afterUpgrade)
	waitReads(t, e, time.Now(), 30*time.Second, "through the adopted bridge after the upgrade",
		append(l.readers("app"), reader{l.ns, "app", "app", "/data/after-upgrade.txt", afterUpgrade})...)
	checkRestarts(t, e, l.ns, restarts)
	t.Logf("RESULT upgrade while bridged: agent %v (A) → %v (B, %s) in %s; bridge s3fs %v adopted, pod reads on",
		agentA, agentB, imgB, time.Since(t1).Round(100*time.Millisecond), bridge)

	// The plugin returns: handed back to the driver's own mount by agent B.
	if err := l.plugin.Start(ctx); err != nil {
		t.Fatalf("bring the plugin back: %v", err)
	}
	started = true
	waitHandedBack(t, target, l.pv, l.plugin)
	demoWaitEvents(t, e, l.ns, "app", contract.ReasonBridgeRetired)
	waitReads(t, e, time.Now(), 30*time.Second, "on the driver's mount again", l.readers("app")...)
	checkRestarts(t, e, l.ns, restarts)

	// Roll back to A: version A's agent again, and a local disk rescue still works.
	t2 := time.Now()
	out, err = stack.RunCommands(ctx, c, stack.CommandsRun{Repo: repo, Commands: rollbackCmds, Name: "rollback-a", CLIs: clis})
	t.Logf("operations.md's rollback command, %s:\n%s", time.Since(t2).Round(100*time.Millisecond), out)
	if err != nil {
		t.Fatal(err)
	}
	agentBack := agentPodsRunning(ctx, t, c, imgA.Agent)
	t.Logf("RESULT rollback: agent %v (B) → %v (A, %s) in %s", agentB, agentBack, imgA.Agent, time.Since(t2).Round(100*time.Millisecond))
	lostLocalDisk(t, e)
	checkRestarts(t, e, l.ns, restarts)
}

// agentPodsRunning waits until every agent pod runs image (and no pod of another image is left)
// and returns their names.
func agentPodsRunning(ctx context.Context, t *testing.T, c *cluster.Cluster, image string) []string {
	t.Helper()
	var names []string
	waitFor(t, 3*time.Minute, "the agent pods to run "+image, func() (bool, string) {
		pods, err := c.Client.CoreV1().Pods(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + stack.AgentDS})
		if err != nil {
			return false, err.Error()
		}
		names = nil
		var other []string
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue // a replaced agent's pod that ended, not yet removed
			}
			ready := p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
			for _, st := range p.Status.ContainerStatuses {
				ready = ready && st.Ready
			}
			if p.Spec.Containers[0].Image != image || !ready {
				other = append(other, p.Name+" "+p.Spec.Containers[0].Image+" "+string(p.Status.Phase))
				continue
			}
			names = append(names, p.Name)
		}
		return len(names) > 0 && len(other) == 0, "other agent pods: " + strings.Join(other, ", ")
	})
	return names
}
