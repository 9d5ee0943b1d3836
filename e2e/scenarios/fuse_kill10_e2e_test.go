//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// killRounds is how often the driver's s3fs is killed in a row.
const killRounds = 10

// lostFUSEMountKilled10: the driver's FUSE program is killed ten times in a row while its plugin
// stays up, in both field layouts at once (yandex: the s3fs at kubelet's staging path, bound to
// the target; ctrox: the s3fs at the target). After every kill: restored through the driver
// (exactly one live s3fs of the plugin, none of the agent's), exactly one mount at the target and
// at the staging path (the live one put beneath the dead one, the dead one detached), exactly one
// at /data inside each container — app (HostToContainer, set by the webhook), pinned (None), sub
// (subPath) — counted from the container's own mountinfo, and no container restarted. Then the
// rescued pods are deleted: with one mount at each target, the driver's top-only NodeUnpublish
// leaves none and kubelet's teardown completes without the agent's help
// (pvrescue_s3_teardown_help_total does not move); the pods are gone and nothing is left.
func lostFUSEMountKilled10(t testing.TB, e *env) {
	start := time.Now()
	ls := []*fieldLayout{
		{
			name: "kill10y", driver: "ru.yandex.s3.csi", layout: csitest.LayoutYandex,
			ns: "e2e-fuse-kill10y", pv: "e2e-fuse-kill10y-pv", handle: s3Bucket + "/kill10y",
			attrs: map[string]string{"mounter": "s3fs"}, stage: true,
			files: map[string]string{"kill10y/app.txt": "kill10 yandex data\n", "kill10y/sub/app.txt": "kill10 yandex sub\n"},
			want:  "kill10 yandex data\n", dataDir: "kill10y/", src: s3Bucket + ":/kill10y",
		},
		{
			name: "kill10c", driver: "ch.ctrox.csi.s3-driver", layout: csitest.LayoutCtrox,
			ns: "e2e-fuse-kill10c", pv: "e2e-fuse-kill10c-pv", handle: s3Bucket + "/kill10c",
			attrs: map[string]string{"bucket": s3Bucket, "prefix": "kill10c", "mounter": "s3fs"},
			files: map[string]string{
				"kill10c/csi-fs/app.txt": "kill10 ctrox data\n", "kill10c/csi-fs/sub/app.txt": "kill10 ctrox sub\n",
				"kill10c/app.txt": "DECOY\n",
			},
			want: "kill10 ctrox data\n", dataDir: "kill10c/csi-fs/", src: s3Bucket + ":/kill10c/csi-fs",
		},
	}
	subWant := map[string]string{"kill10y": "kill10 yandex sub\n", "kill10c": "kill10 ctrox sub\n"}
	for _, l := range ls {
		createAppPod(t, e, l, subContainer(e.c.BusyboxImage))
	}
	var all []reader
	restarts := map[string]map[string]map[string]int32{}
	targets := map[string]string{}
	for _, l := range ls {
		p := framework.WaitPod(t, e.c.Client, l.ns, "app", 2*time.Minute, "Running", framework.Running)
		restarts[l.name] = map[string]map[string]int32{"app": restartCounts(p)}
		targets[l.name] = podTarget(e, string(p.UID), l.pv)
		all = append(all, append(l.readers("app"), reader{l.ns, "app", "sub", "/data/app.txt", subWant[l.name]})...)
		t.Logf("%s layout: containers' mountPropagation at /data: %s", l.layout, propagations(p))
	}
	waitReads(t, e, time.Now(), 30*time.Second, "before the kills", all...)
	for _, l := range ls {
		checkDepthOne(t, e, l, targets[l.name], "before the kills")
	}
	var kills []time.Duration
	for i := 1; i <= killRounds; i++ {
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
			name := fmt.Sprintf("rescued-%d.txt", i)
			putInBucket(t, e, l.dataDir+name, want)
			putInBucket(t, e, l.dataDir+"sub/"+name, want)
			for _, c := range []string{"app", "pinned", "sub"} {
				rs = append(rs, reader{l.ns, "app", c, "/data/" + name, want})
			}
			plugins = append(plugins, l.plugin)
		}
		at := rescueReads(t, e, t0, 90*time.Second, fmt.Sprintf("after s3fs kill #%d", i), plugins, rs...)
		kills = append(kills, time.Since(t0))
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
			depth := checkDepthOne(t, e, l, targets[l.name], fmt.Sprintf("round %d", i))
			rc := checkRestarts(t, e, l.ns, restarts[l.name])
			t.Logf("RESULT %s layout, s3fs kill #%d: reads again after app %s, pinned (None) %s, sub (subPath) %s; depth %s; restarts %v; plugin s3fs %v → %v, agent s3fs %v",
				l.layout, i, at[l.ns+"/app/app"], at[l.ns+"/app/pinned"], at[l.ns+"/app/sub"], depth, rc["app"], killed[l.name], now, ours)
		}
	}
	var worst time.Duration
	for _, d := range kills {
		worst = max(worst, d)
	}
	t.Logf("RESULT killed %d×: every container of both layouts read again within %s of a kill (slowest round)", killRounds, worst.Round(100*time.Millisecond))

	// The rescued pods go without the agent's teardown help: its counter stays where it was
	// (the same agent process throughout: a restart would reset it).
	agent, helpBefore := teardownHelp(t, e)
	for _, l := range ls {
		gone := deletePodGone(t, e, l.ns, "app", 30*time.Second)
		checkNothingLeft(t, e, l.pv, l.src)
		t.Logf("RESULT %s layout: rescued %d× pod deleted and gone in %s, nothing left", l.layout, killRounds, gone)
	}
	after, helpAfter := teardownHelp(t, e)
	checkNoTeardownHelp(t, agent, after, helpBefore, helpAfter, "the rescued pods' deletion")
	t.Logf("RESULT killed %d×: pods gone without the agent's teardown help (pvrescue_s3_teardown_help_total %v → %v, agent %s restarts %v); scenario took %s",
		killRounds, helpBefore, helpAfter, after.Name, restartCounts(after), time.Since(start).Round(time.Second))
}

// subContainer reads the volume's directory "sub" through a subPath mount.
func subContainer(image string) corev1.Container {
	return corev1.Container{Name: "sub", Image: image, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPath: "sub"}}}
}

// propagations says each container's mountPropagation of the volume "data" ("<unset>" if none).
func propagations(p *corev1.Pod) string {
	var out []string
	for _, c := range p.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name != "data" {
				continue
			}
			prop := "<unset>"
			if m.MountPropagation != nil {
				prop = string(*m.MountPropagation)
			}
			if m.SubPath != "" {
				prop += " subPath " + m.SubPath
			}
			out = append(out, c.Name+" "+prop)
		}
	}
	return strings.Join(out, ", ")
}

// checkDepthOne fails unless exactly one FUSE mount sits at the pod's target, at kubelet's
// staging path (layouts that stage; none otherwise) and at /data in each container of pod "app"
// (app, pinned, sub), as the container's own mountinfo shows it. The restore may still be
// replacing in a container when the reads already succeed elsewhere: it waits up to 5 s. It
// returns the depths seen.
func checkDepthOne(t testing.TB, e *env, l *fieldLayout, target, when string) string {
	t.Helper()
	wantStage := 0
	if l.stage {
		wantStage = 1
	}
	var tgt, glob []mountinfo.Mount
	in := map[string][]mountinfo.Mount{}
	errs := map[string]error{}
	containers := []string{"app", "pinned", "sub"}
	good := func() bool {
		tgt, glob = mountsAt(target), mountsAt(l.globalMount(e))
		ok := len(tgt) == 1 && isFUSE(tgt[0].FSType) && len(glob) == wantStage
		for _, c := range containers {
			in[c], errs[c] = containerMountsAt(e, l.ns, "app", c, "/data")
			ok = ok && errs[c] == nil && len(in[c]) == 1 && isFUSE(in[c][0].FSType)
		}
		return ok
	}
	t0 := time.Now()
	ok := good() || pollFor(5*time.Second, good)
	parts := []string{fmt.Sprintf("target %d", len(tgt)), fmt.Sprintf("staging %d", len(glob))}
	for _, c := range containers {
		parts = append(parts, fmt.Sprintf("%s %d", c, len(in[c])))
	}
	depth := strings.Join(parts, ", ")
	if !ok {
		var why []string
		for _, c := range containers {
			why = append(why, fmt.Sprintf("%s %s %v", c, describeStack(in[c]), errs[c]))
		}
		t.Errorf("%s, %s: want exactly one FUSE mount at the target, %d at staging and one at /data in every container; %s: target %s, staging %s, containers: %s",
			when, l.name, wantStage, depth, describeStack(tgt), describeStack(glob), strings.Join(why, "; "))
	} else if d := time.Since(t0); d > time.Second {
		depth += fmt.Sprintf(" (settled %s after the reads)", d.Round(100*time.Millisecond))
	}
	return depth
}

// containerMountsAt lists the mounts stacked at path in a container's mount namespace, bottom
// first, from its own /proc/self/mountinfo.
func containerMountsAt(e *env, ns, pod, container, path string) ([]mountinfo.Mount, error) {
	out, err := execIn(e, ns, pod, container, "cat", "/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var ms []mountinfo.Mount
	for _, line := range strings.Split(out, "\n") {
		if m, err := mountinfo.ParseLine(line); err == nil {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no mount in %s/%s's mountinfo: %q", pod, container, out)
	}
	return mountinfo.Stack(ms, path, mountinfo.Mount.Place), nil
}

// createAppPod makes the layout's objects (layoutObjects) and a pod "app" (containers app and
// pinned, and extra) without waiting for it.
func createAppPod(t testing.TB, e *env, l *fieldLayout, extra ...corev1.Container) {
	t.Helper()
	layoutObjects(t, e, l)
	if _, err := e.c.Client.CoreV1().Pods(l.ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: append(appContainers(e.c.BusyboxImage), extra...), Volumes: dataVolume(),
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
