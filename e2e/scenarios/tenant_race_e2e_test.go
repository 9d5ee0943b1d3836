//go:build e2e

package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/images"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

// Issue 32 items 1 and 2 on the real cluster: a tenant who races the agent's path lookups, and a
// tenant who makes its own user and mount namespace.

const (
	racerNS = "e2e-racer"
	racerPV = "e2e-racer-pv"
	// racerKills: how often the volume's s3fs is killed while the racers race.
	racerKills = 20
	// racerKey is the bucket directory holding the scenario's files (the volume is the bucket).
	racerKey = "racer"
	// racerBurst is how long a racer swaps after each change of its mount table: far longer than
	// the agent's work between its move beneath and its detach in one namespace.
	racerBurst = "20ms"
)

// racerContainer holds the volume at /w/x/<under> (w: an emptyDir of its own) and swaps /w/x
// with a symlink to /proc on every change of its mount table: an agent that checks the mount
// point's path and then resolves it again to act (umount2 by name) detaches /proc/<under>
// instead when a swap lands in between — runc's read-only bind of /proc/sys, or one of its masks:
// /dev/null bound over /proc/keys and /proc/timer_list, a read-only tmpfs over /proc/acpi (the
// masked paths this node's kernel has; it has no /proc/kcore).
type racerContainer struct{ name, under string }

func (r racerContainer) mountPath() string { return "/w/x/" + r.under }
func (r racerContainer) victim() string    { return "/proc/" + r.under }

// racers race independently (a namespace's table changes wake only its own racer): three aim at
// /proc/sys, three at masks.
var racers = []racerContainer{
	{"racer-sys", "sys"}, {"racer-sys2", "sys"}, {"racer-sys3", "sys"},
	{"racer-keys", "keys"}, {"racer-timers", "timer_list"}, {"racer-acpi", "acpi"},
}

// corePatternProbe rewrites kernel.core_pattern with its own value: it must fail with EROFS in a
// container; if /proc/sys were writable it would succeed and change nothing on the node.
const corePatternProbe = `v=$(cat /proc/sys/kernel/core_pattern) && printf '%s\n' "$v" > /proc/sys/kernel/core_pattern`

// hostileTenantRacing: a tenant's pod with six racers (racer-*; a static Go binary, e2e/images/
// racer) and a plain reader, all holding one read-only S3 volume without propagation, so that
// the agent must replace each container's dead mount inside its namespace. The volume's s3fs is
// killed 20 times. After every kill: the reader reads the file put into the bucket after the kill
// (restored each time); each racer still racing either reads it (restored) or is named by a
// MountRestoreInContainerFailed or ContainerMountSkipped Event (left dead, reported; a racer
// left dead stops racing: nothing changes in its namespace any more); the kill killed the volume
// (the s3fs gone, another mount at the target, the agent's dead-mount counter up), and no racer
// logged a lost mount. At the end, in every racer: each mount the runtime made (everything
// outside /w: /proc/sys read-only, every mask) is still there with its options, /proc/sys is
// read-only and rewriting kernel.core_pattern fails with EROFS.
func hostileTenantRacing(t *testing.T, e *env) {
	start := time.Now()
	ctx := context.Background()
	cs := e.c.Client
	img := racerImage(t, e)
	putInBucket(t, e, racerKey+"/marker.txt", "racer marker\n")
	bucket, err := e.s3.Bucket(s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(bucket, racerKey)) })
	fuseNamespace(t, e, racerNS, true)
	keys := config.Default().S3
	s3Volume(t, e, s3Vol{ns: racerNS, pv: racerPV, driver: e.csi.Driver, handle: s3Bucket + "-racer",
		attrs: map[string]string{keys.Parameters.Bucket: s3Bucket, keys.Parameters.Endpoint: e.s3.Endpoint, "mounter": "s3fs"}})
	deletePVAtCleanup(t, e, racerPV)
	logAgentOnFailure(t, e, racerPV, "racer")

	none := corev1.MountPropagationNone
	cts := []corev1.Container{{Name: "reader", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true, MountPropagation: &none}}}}
	vols := dataVolume()
	for i, r := range racers {
		w := fmt.Sprintf("w%d", i)
		// In memory: a rename on tmpfs takes microseconds, as fast as a tenant can swap.
		vols = append(vols, corev1.Volume{Name: w, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}})
		cts = append(cts, corev1.Container{Name: r.name, Image: img, ImagePullPolicy: corev1.PullIfNotPresent,
			Args: []string{"-dir", "/w/x", "-to", "/proc", "-burst", racerBurst},
			VolumeMounts: []corev1.VolumeMount{
				{Name: w, MountPath: "/w"},
				{Name: "data", MountPath: r.mountPath(), ReadOnly: true, MountPropagation: &none},
			}})
	}
	if _, err := cs.CoreV1().Pods(racerNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Annotations: map[string]string{
			// The injected probe would restart a container the agent left dead (30 s later) into
			// a new mount namespace; here a racer left dead is an outcome, and each racer's
			// mount table is compared from its start to the end.
			contract.AnnotationInjectProbe: "false",
		}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: cts, Volumes: vols,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the racing tenant's pod: %v", err)
	}
	pod := framework.WaitPod(t, cs, racerNS, "tenant", 2*time.Minute, "Running", framework.Running)
	if pod.Annotations[contract.AnnotationStatus] == "" {
		t.Fatalf("the webhook did not mutate the tenant's pod (no %s annotation): %v", contract.AnnotationStatus, pod.Annotations)
	}
	for _, c := range pod.Spec.Containers {
		for _, vm := range c.VolumeMounts {
			if vm.Name == "data" && (vm.MountPropagation == nil || *vm.MountPropagation != none) {
				t.Fatalf("container %s's volume mount has propagation %v, want None: with propagation the host's restore reaches the container and the agent acts nowhere inside it (nothing raced)", c.Name, vm.MountPropagation)
			}
		}
	}
	tgt := podTarget(e, string(pod.UID), racerPV)

	// Before the kills: everyone reads the volume, every racer is ready and holds the runtime's
	// mounts it aims at, and /proc/sys is read-only.
	rs := []reader{{racerNS, "tenant", "reader", "/data/" + racerKey + "/marker.txt", "racer marker\n"}}
	for _, r := range racers {
		rs = append(rs, reader{racerNS, "tenant", r.name, r.mountPath() + "/" + racerKey + "/marker.txt", "racer marker\n"})
	}
	waitReads(t, e, time.Now(), 30*time.Second, "before the kills", rs...)
	runtimeMounts := map[string][]mountinfo.Mount{}
	for _, r := range racers {
		waitFor(t, 30*time.Second, r.name+" to log `racer ready`", func() (bool, string) {
			l, err := racerLog(e, pod.Name, r.name)
			return err == nil && strings.Contains(l, "racer ready"), fmt.Sprintf("%q %v", l, err)
		})
		ms := racerRuntimeMounts(t, e, r.name, "before the kills")
		if st := mountinfo.Stack(ms, r.victim(), mountinfo.Mount.Place); len(st) == 0 {
			t.Fatalf("%s: the runtime made no mount at %s (runc's masked or read-only paths): the racer would race for nothing; mounts: %v", r.name, r.victim(), mountPoints(ms))
		}
		checkProcSysReadOnly(t, e, r.name, ms, "before the kills")
		runtimeMounts[r.name] = ms
	}
	corePattern, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}

	left := map[string]string{}   // racer → how it was left dead
	restored := map[string]int{}  // racer → kills after which it read the new file
	withEvent := map[string]int{} // racer → restored although an Event reported it failed
	var slowest time.Duration
	for i := 1; i <= racerKills; i++ {
		daemons := volumeDaemons(e, racerPV)
		if len(daemons) == 0 {
			t.Fatalf("kill %d: no s3fs serves %s (plugin s3fs %v, agent bridges %v)", i, racerPV, pluginS3fs(e.csi), ourS3fs(racerPV))
		}
		proof := witnessQuiet(t, e, tgt, daemons)
		warned := namedEvents(e, pod.UID)
		t0 := time.Now()
		for _, pid := range daemons {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill %d: kill s3fs %d: %v", i, pid, err)
			}
		}
		name := fmt.Sprintf("rescued-%d.txt", i)
		want := fmt.Sprintf("put on the S3 server's side after kill #%d\n", i)
		putInBucket(t, e, racerKey+"/"+name, want)

		// Each racing container: restored (reads the new file) or named by a new Event.
		settled := map[string]string{}
		var why []string
		ok := pollFor(45*time.Second, func() bool {
			why = why[:0]
			if settled["reader"] == "" {
				if ok, w := readFrom(e, racerNS, pod.Name, "reader", "/data/"+racerKey+"/"+name, want); ok {
					settled["reader"] = "restored after " + time.Since(t0).Round(100*time.Millisecond).String()
				} else {
					why = append(why, w)
				}
			}
			now := namedEvents(e, pod.UID)
			for _, r := range racers {
				if left[r.name] != "" || settled[r.name] != "" {
					continue
				}
				ev := newEventNaming(warned, now, r.name)
				path := r.mountPath() + "/" + racerKey + "/" + name
				// A racer mid-burst may be reading through the symlink: a few tries before an
				// Event's container counts as left dead.
				tries := 1
				if ev != "" {
					tries = 5
				}
				for try := 0; try < tries; try++ {
					if ok, w := readFrom(e, racerNS, pod.Name, r.name, path, want); ok {
						settled[r.name] = "restored after " + time.Since(t0).Round(100*time.Millisecond).String()
						restored[r.name]++
						if ev != "" {
							settled[r.name] += " (an Event reported it failed: " + ev + ")"
							withEvent[r.name]++
						}
						break
					} else if try == tries-1 {
						if ev != "" {
							settled[r.name] = "left dead: " + ev
							left[r.name] = fmt.Sprintf("at kill %d: %s", i, ev)
						} else {
							why = append(why, w+" and no Event names it")
						}
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			return len(why) == 0
		})
		if !ok {
			t.Logf("events of %s: %s", racerNS, strings.Join(events(t, e, racerNS, ""), "\n  "))
			t.Fatalf("kill %d: 45 s after the kill, not every container is restored or reported: %s", i, strings.Join(why, "; "))
		}
		slowest = max(slowest, time.Since(t0))
		evidence := proof.check(t, e, fmt.Sprintf("kill %d", i))
		var lost []string
		for _, r := range racers {
			if l, err := racerLog(e, pod.Name, r.name); err == nil {
				for _, line := range racerLost(l) {
					lost = append(lost, r.name+": "+line)
				}
			}
		}
		if len(lost) > 0 {
			t.Errorf("kill %d: racers saw mounts the runtime made go or change:\n  %s", i, strings.Join(lost, "\n  "))
		}
		var parts []string
		for _, c := range append([]string{"reader"}, racerNames()...) {
			if s := settled[c]; s != "" {
				parts = append(parts, c+" "+s)
			}
		}
		t.Logf("RESULT racing, kill %d: %s; %s", i, strings.Join(parts, "; "), evidence)
	}

	// The runtime's mounts in every racer, from its start to now, and /proc/sys read-only.
	for _, r := range racers {
		now := racerRuntimeMounts(t, e, r.name, "after the kills")
		if gone := mountsGone(runtimeMounts[r.name], now); len(gone) > 0 {
			t.Errorf("%s: mounts the runtime made are gone or changed after the kills:\n  %s", r.name, strings.Join(gone, "\n  "))
		}
		checkProcSysReadOnly(t, e, r.name, now, "after the kills")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/core_pattern"); err != nil || string(b) != string(corePattern) {
		t.Errorf("the node's kernel.core_pattern changed: %q → %q (%v)", corePattern, b, err)
	}
	var bursts, swaps int
	for _, r := range racers {
		l, err := racerLog(e, pod.Name, r.name)
		if err != nil {
			t.Errorf("%s's log: %v", r.name, err)
			continue
		}
		b, s := racerBursts(l)
		bursts, swaps = bursts+b, swaps+s
		state := fmt.Sprintf("restored %d× (%d of them despite a failure Event), raced %d bursts / %d swaps", restored[r.name], withEvent[r.name], b, s)
		if left[r.name] != "" {
			state += ", left dead " + left[r.name]
		} else {
			state += ", racing to the end"
		}
		t.Logf("RESULT racing: %s (aims at %s): %s", r.name, r.victim(), state)
	}
	if bursts == 0 {
		t.Errorf("no racer ever saw its mount table change: the agent acted in no racer's namespace, nothing was raced")
	}
	if t.Failed() { // the summary claims what the checks above proved; after a failure it would lie
		t.Logf("RESULT racing: FAILED after %d kills; racers swapped %d times in %d bursts; see the errors above", racerKills, swaps, bursts)
		return
	}
	t.Logf("RESULT racing: %d kills, slowest round %s; racers swapped %d times in %d bursts; every runtime mount kept in every racer, /proc/sys read-only, core_pattern rewrite refused (EROFS); scenario took %s",
		racerKills, slowest.Round(100*time.Millisecond), swaps, bursts, time.Since(start).Round(time.Second))
}

func racerNames() []string {
	out := make([]string, 0, len(racers))
	for _, r := range racers {
		out = append(out, r.name)
	}
	return out
}

// racerImage builds the racer (static, from the e2e module) and pushes its image.
func racerImage(t testing.TB, e *env) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(e.c.Opts.WorkDir, "bin", "racer")
	if err := images.BuildStatic(ctx, filepath.Join(testenv.RepoRoot(), "e2e"), images.RacerPkg, bin); err != nil {
		t.Fatalf("build the racer: %v", err)
	}
	img, err := images.Racer(bin)
	if err != nil {
		t.Fatalf("racer image: %v", err)
	}
	ref, err := e.c.Registry.Push(ctx, "e2e/racer", "e2e", img)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// racerLog is a racer container's log (its stdout).
func racerLog(e *env, pod, container string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return framework.Logs(ctx, e.c.Client, racerNS, pod, container)
}

// racerLost returns the racer's LOST and CHANGED lines: mounts outside its tree that went or
// changed since it started.
func racerLost(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "LOST ") || strings.HasPrefix(l, "CHANGED ") {
			out = append(out, l)
		}
	}
	return out
}

// racerBursts counts a racer's bursts and swaps from its log.
func racerBursts(log string) (bursts, swaps int) {
	for _, l := range strings.Split(log, "\n") {
		if !strings.HasPrefix(l, "burst seq=") {
			continue
		}
		bursts++
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "swaps="); ok {
				n, _ := strconv.Atoi(v)
				swaps += n
			}
		}
	}
	return bursts, swaps
}

// racerRuntimeMounts reads a racer's mount table (its own /proc/self/mountinfo) and returns
// the mounts outside /w: what the runtime made (the racer's tree is excluded: its names swap).
func racerRuntimeMounts(t testing.TB, e *env, container, when string) []mountinfo.Mount {
	t.Helper()
	out, err := execIn(e, racerNS, "tenant", container, "cat", "/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("%s: %s's mountinfo: %v", when, container, err)
	}
	var ms []mountinfo.Mount
	for _, line := range strings.Split(out, "\n") {
		m, err := mountinfo.ParseLine(line)
		if err != nil || m.MountPoint == "/w" || strings.HasPrefix(m.MountPoint, "/w/") {
			continue
		}
		ms = append(ms, m)
	}
	if len(ms) == 0 {
		t.Fatalf("%s: no mount in %s's mountinfo: %q", when, container, out)
	}
	return ms
}

func mountPoints(ms []mountinfo.Mount) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.MountPoint)
	}
	return out
}

// mountsGone lists the mounts of was missing from now (by mount ID) or shown there with another
// mount point or other per-mount options.
func mountsGone(was, now []mountinfo.Mount) []string {
	byID := map[int]mountinfo.Mount{}
	for _, m := range now {
		byID[m.ID] = m
	}
	var out []string
	for _, m := range was {
		n, ok := byID[m.ID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("mount %d at %q (%s %s, %s) is gone", m.ID, m.MountPoint, m.FSType, m.Root, strings.Join(m.Options, ",")))
		case n.MountPoint != m.MountPoint || strings.Join(n.Options, ",") != strings.Join(m.Options, ","):
			out = append(out, fmt.Sprintf("mount %d at %q (%s) is now at %q (%s)", m.ID, m.MountPoint, strings.Join(m.Options, ","), n.MountPoint, strings.Join(n.Options, ",")))
		}
	}
	return out
}

// checkProcSysReadOnly checks, in a container, that the mount serving /proc/sys is read-only in
// its table ms and that rewriting kernel.core_pattern fails with EROFS.
func checkProcSysReadOnly(t testing.TB, e *env, container string, ms []mountinfo.Mount, when string) {
	t.Helper()
	st := mountinfo.Stack(ms, "/proc/sys", mountinfo.Mount.Place)
	if len(st) == 0 || !st[len(st)-1].ReadOnly() {
		t.Errorf("%s: %s: /proc/sys is not a read-only mount: stack %s %v", when, container, describeStack(st), st)
	}
	out, err := execIn(e, racerNS, "tenant", container, "sh", "-c", corePatternProbe)
	switch {
	case err == nil:
		t.Errorf("%s: %s rewrote /proc/sys/kernel/core_pattern (%q): /proc/sys is writable in the container", when, container, out)
	case !strings.Contains(err.Error(), "Read-only file system"):
		t.Errorf("%s: %s: rewriting kernel.core_pattern failed, but not with EROFS: %v", when, container, err)
	}
}

// volumeDaemons are the s3fs processes serving pv: the plugin's (their command line names a
// path of the PV) and the agent's bridges.
func volumeDaemons(e *env, pv string) []int {
	var out []int
	for _, pid := range pluginS3fs(e.csi) {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && (strings.Contains(string(cmd), "/"+pv+"/") || strings.Contains(string(cmd), "/"+pv+"\x00")) {
			out = append(out, pid)
		}
	}
	return append(out, ourS3fs(pv)...)
}

// namedEvents are the pod's Warning Events that name containers left dead (reasons
// MountRestoreInContainerFailed and ContainerMountSkipped), by Event object name, with their
// count and message.
func namedEvents(e *env, uid types.UID) map[string]podEvent {
	list, err := e.c.Client.CoreV1().Events(racerNS).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid)})
	out := map[string]podEvent{}
	if err != nil {
		return out
	}
	for _, ev := range list.Items {
		if ev.Reason == containermount.ReasonFailed || ev.Reason == containermount.ReasonSkipped {
			out[ev.Name] = podEvent{count: max(1, ev.Count), text: ev.Reason + ": " + ev.Message}
		}
	}
	return out
}

type podEvent struct {
	count int32
	text  string
}

// newEventNaming returns an Event of now, new or repeated since before, naming container (the
// agent quotes "<container>:<mount point>").
func newEventNaming(before, now map[string]podEvent, container string) string {
	for name, ev := range now {
		if ev.count > before[name].count && strings.Contains(ev.text, `"`+container+":") {
			return ev.text
		}
	}
	return ""
}

// quietWitness is the evidence of one kill without the agent's Events: with 20 kills on one pod
// the Event recorder's spam filter (25 per object and type, then one per 5 min) drops the
// agent's restore Events, so the evidence is the killed daemons gone, another mount serving the
// target, and the agent's dead-mount counter (same agent process) up by one.
type quietWitness struct {
	target    string
	before    mountIdentity
	daemons   []procID
	agent     *corev1.Pod
	url       string
	deadFound float64
}

func witnessQuiet(t testing.TB, e *env, target string, daemons []int) *quietWitness {
	t.Helper()
	w := &quietWitness{target: target, daemons: procIDs(daemons)}
	var err error
	if w.before, err = topMountIdentity(target); err != nil {
		t.Fatalf("before the kill: the mount serving the target: %v", err)
	}
	if len(w.daemons) != len(daemons) {
		t.Fatalf("before the kill: daemons %v, running %v", daemons, w.daemons)
	}
	if a, _ := runningAgent(e); a != nil {
		w.agent, w.url = a, "http://"+net.JoinHostPort(a.Status.PodIP, "8080")+"/metrics"
		if w.deadFound, err = agentMetric(w.url, deadFoundMetric); err != nil {
			w.agent = nil
		}
	}
	return w
}

// check waits (15 s) for the evidence that the kill killed the volume and returns it.
func (w *quietWitness) check(t testing.TB, e *env, when string) string {
	t.Helper()
	var after mountIdentity
	var afterErr error
	var running []int
	counter, compared := w.deadFound, false
	var problems []string
	pollFor(15*time.Second, func() bool {
		problems = problems[:0]
		if running = stillRunning(w.daemons); len(running) > 0 {
			problems = append(problems, fmt.Sprintf("the killed daemons %v still run", running))
		}
		after, afterErr = topMountIdentity(w.target)
		switch {
		case afterErr != nil:
			problems = append(problems, "no mount at the target: "+afterErr.Error())
		case sameMount(w.before, after):
			problems = append(problems, "the same mount serves the target as before the kill: "+after.String())
		}
		compared = false
		if w.agent != nil {
			if a, _ := runningAgent(e); a != nil && a.UID == w.agent.UID && maps.Equal(restartCounts(a), restartCounts(w.agent)) {
				if v, err := agentMetric(w.url, deadFoundMetric); err == nil {
					counter, compared = v, true
					if v < w.deadFound+1 {
						problems = append(problems, fmt.Sprintf("the agent's %s went %v → %v, want +1", deadFoundMetric, w.deadFound, v))
					}
				}
			}
		}
		return len(problems) == 0
	})
	if len(problems) > 0 {
		t.Errorf("%s: no complete evidence that the kill killed the volume: %s", when, strings.Join(problems, "; "))
	}
	c := "counter not compared (agent changed)"
	if compared {
		c = fmt.Sprintf("%s %v → %v", deadFoundMetric, w.deadFound, counter)
	}
	pids := make([]int, 0, len(w.daemons))
	for _, d := range w.daemons {
		pids = append(pids, d.Pid)
	}
	return fmt.Sprintf("killed %v gone; target %s → %s; %s", pids, w.before, after, c)
}

const (
	nestedNS = "e2e-nested"
	nestedPV = "e2e-nested-pv"
	// nestedMarker is the nested shell's $0: its command line's last argument, how the host
	// finds it.
	nestedMarker = "pvrescue-e2e-nested-tenant"
	// nestedScript runs as root of the tenant's own user namespace in its own mount namespace
	// (unshare -Urm): on each /tmp/try it tries to remount the volume read-write and writes the
	// exit code and output to /tmp/try.out. /tmp is the container's root file system, the same
	// in both namespaces.
	nestedScript = `exec </dev/null
while true; do
  if [ -e /tmp/try ]; then
    rm -f /tmp/try
    { mount -o remount,bind,rw /data; echo "rc=$?"; } >/tmp/try.new 2>&1
    mv /tmp/try.new /tmp/try.out
  fi
  sleep 0.2
done`
)

// hostileTenantNestedUserNS: a container whose own process made a user and mount namespace
// (unshare -Urm; allowed because the node's kernel allows unprivileged user namespaces and the
// pod runs with seccompProfile Unconfined) holding the read-only volume. After the volume's s3fs
// is killed and restored: the container's runtime namespace is restored (reads the new file);
// the nested namespace is left as it was (same mounts at /data, still dead) with a
// ContainerMountSkipped Event naming it and not_runtime_namespace counted; `mount -o
// remount,bind,rw /data` from inside the nested namespace fails and /data stays read-only there.
func hostileTenantNestedUserNS(t *testing.T, e *env) {
	start := time.Now()
	ctx := context.Background()
	cs := e.c.Client
	checkUnprivilegedUserNS(t)
	tenantVolume(t, e, "nested", nestedNS, nestedPV, "nested")

	script := "unshare -Urm sh -c '" + nestedScript + "' " + nestedMarker + " &\nwhile true; do sleep 1; done"
	if _, err := cs.CoreV1().Pods(nestedNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Annotations: map[string]string{contract.AnnotationInjectProbe: "false"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			// unshare(CLONE_NEWUSER) without CAP_SYS_ADMIN is refused by the runtime's default
			// seccomp profile; this tenant asks for none.
			SecurityContext: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
			Containers: []corev1.Container{{Name: "tenant", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}}}},
			Volumes: dataVolume(),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the tenant's pod: %v", err)
	}
	pod := framework.WaitPod(t, cs, nestedNS, "tenant", 2*time.Minute, "Running", framework.Running)
	waitReads(t, e, time.Now(), 30*time.Second, "before the kill", reader{nestedNS, "tenant", "tenant", "/data/nested/marker.txt", "nested marker\n"})

	var nested int
	var why string
	if !pollFor(20*time.Second, func() bool { nested, why = nestedProcess(string(pod.UID)); return nested > 0 }) {
		l, _ := framework.Logs(ctx, cs, nestedNS, "tenant", "tenant")
		t.Fatalf("the tenant's nested namespace never appeared (%s); container log: %q", why, l)
	}
	nestedMnt, nestedData := nsInode(t, nested, "mnt"), hostStackIn(t, nested, "/data")
	if len(nestedData) == 0 || !isFUSE(nestedData[len(nestedData)-1].FSType) || !nestedData[len(nestedData)-1].ReadOnly() {
		t.Fatalf("the nested namespace (pid %d) does not hold the read-only volume at /data: %s", nested, describeStack(nestedData))
	}
	init := initOf(t, string(pod.UID), nested)
	if nsInode(t, nested, "user") == nsInode(t, init, "user") || nestedMnt == nsInode(t, init, "mnt") {
		t.Fatalf("pid %d (the tenant's unshare -Urm) shares the container init %d's user or mount namespace", nested, init)
	}
	beforeTry := nestedRemount(t, e, "before the kill")
	t.Logf("nested namespace: pid %d, mount namespace %d, user namespace %d (the container init %d's: %d, %d); /data %s; remount rw before the kill: %s",
		nested, nestedMnt, nsInode(t, nested, "user"), init, nsInode(t, init, "mnt"), nsInode(t, init, "user"), describeStack(nestedData), beforeTry)

	daemons := volumeDaemons(e, nestedPV)
	if len(daemons) != 1 {
		t.Fatalf("want exactly one s3fs serving %s, found %v", nestedPV, daemons)
	}
	tgt := podTarget(e, string(pod.UID), nestedPV)
	witness := witnessKill(t, e, []*corev1.Pod{pod}, []string{tgt}, daemons)
	agent, url := runningAgentURL(t, e)
	skippedSeries := fmt.Sprintf("pvrescue_container_remounts_total{reason=%q,result=%q}", "not_runtime_namespace", "failure")
	skipped0 := agentSeries(url, skippedSeries)
	if err := syscall.Kill(daemons[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	putInBucket(t, e, "nested/rescued.txt", "after the kill\n")
	at := waitReads(t, e, t0, 45*time.Second, "after the kill (the runtime's namespace)", reader{nestedNS, "tenant", "tenant", "/data/nested/rescued.txt", "after the kill\n"})
	var ev string
	waitFor(t, 30*time.Second, "a "+containermount.ReasonSkipped+" Event naming the nested mount namespace", func() (bool, string) {
		for _, s := range events(t, e, nestedNS, containermount.ReasonSkipped) {
			if strings.Contains(s, fmt.Sprintf("mount namespace %d of pid", nestedMnt)) && strings.Contains(s, containermount.ErrNotRuntimeNamespace.Error()) {
				ev = s
				return true, ""
			}
		}
		return false, fmt.Sprintf("events: %v", events(t, e, nestedNS, ""))
	})
	t.Logf("RESULT nested user namespace: the kill killed the volume: %s", witness.checkVolumeDied(t, e))

	// The nested namespace is as it was: the same mounts at /data, still the dead connection.
	if now := hostStackIn(t, nested, "/data"); mountIDs(now) != mountIDs(nestedData) {
		t.Errorf("the agent changed the nested namespace's /data: %s → %s", describeStack(nestedData), describeStack(now))
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/data/nested/rescued.txt", nested)); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("the nested namespace's /data: stat = %v, want ENOTCONN (left dead, to the probe)", err)
	}
	afterTry := nestedRemount(t, e, "after the rescue")
	if top := hostStackIn(t, nested, "/data"); len(top) == 0 || !top[len(top)-1].ReadOnly() {
		t.Errorf("after the tenant's remount: the nested namespace's /data is writable: %v", top)
	}
	if a, _ := runningAgent(e); a != nil && a.UID == agent.UID && maps.Equal(restartCounts(a), restartCounts(agent)) {
		if got := agentSeries(url, skippedSeries); got < skipped0+1 {
			t.Errorf("%s went %v → %v, want +1 (the nested namespace)", skippedSeries, skipped0, got)
		}
	}
	t.Logf("RESULT nested user namespace: runtime namespace restored after %s; nested namespace %d left dead and unchanged; Event %s; tenant's remount,bind,rw of /data: before the kill %s, after the rescue %s; scenario took %s",
		at[nestedNS+"/tenant/tenant"], nestedMnt, ev, beforeTry, afterTry, time.Since(start).Round(time.Second))
}

// checkUnprivilegedUserNS fails, with how to allow it, when the node refuses user namespaces to
// unprivileged processes (a container's root without CAP_SYS_ADMIN is one).
func checkUnprivilegedUserNS(t testing.TB) {
	t.Helper()
	for _, c := range []struct{ file, bad, fix string }{
		{"/proc/sys/user/max_user_namespaces", "0", "sysctl -w user.max_user_namespaces=10000"},
		{"/proc/sys/kernel/unprivileged_userns_clone", "0", "sysctl -w kernel.unprivileged_userns_clone=1 (Debian kernels)"},
		{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1", "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu)"},
	} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			continue // this kernel has no such switch
		}
		if strings.TrimSpace(string(b)) == c.bad {
			t.Fatalf("the node refuses unprivileged user namespaces (%s = %s): %s", c.file, c.bad, c.fix)
		}
	}
}

// nestedProcess finds the tenant's nested shell on the host: its command line's last argument
// is nestedMarker, and it is in the pod's cgroup.
func nestedProcess(podUID string) (int, string) {
	pids := procs("sh", func(pid, _ int, cmd []byte) bool {
		args := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		if len(args) == 0 || args[len(args)-1] != nestedMarker {
			return false
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		return err == nil && (strings.Contains(string(cg), podUID) || strings.Contains(string(cg), strings.ReplaceAll(podUID, "-", "_")))
	})
	if len(pids) != 1 {
		return 0, fmt.Sprintf("processes with $0 %s in the pod's cgroup: %v", nestedMarker, pids)
	}
	return pids[0], ""
}

// initOf is the oldest process of the pod's cgroup sharing nested's container, other than
// nested: the container's init as the agent picks it, for the log.
func initOf(t testing.TB, podUID string, nested int) int {
	t.Helper()
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", nested))
	if err != nil {
		t.Fatal(err)
	}
	var best int
	var bestStart uint64
	for _, pid := range procs("sh", func(pid, _ int, _ []byte) bool {
		c, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		return err == nil && pid != nested && string(c) == string(cg)
	}) {
		if st, ok := procStart(pid); ok && (best == 0 || st < bestStart) {
			best, bestStart = pid, st
		}
	}
	if best == 0 {
		t.Fatalf("no other shell in the nested process's cgroup (pod %s)", podUID)
	}
	return best
}

// nsInode is the inode of pid's namespace of kind (mnt, user).
func nsInode(t testing.TB, pid int, kind string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/%s", pid, kind), &st); err != nil {
		t.Fatalf("namespace %s of pid %d: %v", kind, pid, err)
	}
	return st.Ino
}

// hostStackIn is the stack of mounts at path in pid's mount namespace (its mountinfo read from
// the host), bottom first.
func hostStackIn(t testing.TB, pid int, path string) []mountinfo.Mount {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatalf("mountinfo of pid %d: %v", pid, err)
	}
	return mountinfo.Stack(mountinfo.ParseLenient(string(b)), path, mountinfo.Mount.Place)
}

// nestedRemount has the nested shell try `mount -o remount,bind,rw /data` and returns what it
// printed; it fails the test if the remount succeeded.
func nestedRemount(t testing.TB, e *env, when string) string {
	t.Helper()
	if _, err := execIn(e, nestedNS, "tenant", "tenant", "sh", "-c", "rm -f /tmp/try.out && touch /tmp/try"); err != nil {
		t.Fatalf("%s: ask the nested shell to remount: %v", when, err)
	}
	var out string
	waitFor(t, 15*time.Second, when+": the nested shell's remount result in /tmp/try.out", func() (bool, string) {
		o, err := execIn(e, nestedNS, "tenant", "tenant", "cat", "/tmp/try.out")
		out = strings.TrimSpace(o)
		return err == nil && strings.Contains(out, "rc="), fmt.Sprintf("%q %v", o, err)
	})
	if strings.HasSuffix(out, "rc=0") {
		t.Errorf("%s: the tenant's nested namespace remounted its read-only volume read-write: %q", when, out)
	}
	return strconv.Quote(out)
}

// runningAgentURL returns the running agent and its metrics URL.
func runningAgentURL(t testing.TB, e *env) (*corev1.Pod, string) {
	t.Helper()
	a, why := runningAgent(e)
	if a == nil {
		t.Fatal(why)
	}
	return a, "http://" + net.JoinHostPort(a.Status.PodIP, "8080") + "/metrics"
}

// agentSeries reads one sample (a labelled series as the exposition writes it); a series never
// incremented is absent and counts 0.
func agentSeries(url, series string) float64 {
	v, err := agentMetric(url, series)
	if err != nil {
		return 0
	}
	return v
}

// tenantVolume sets up a hostile-tenant scenario's volume: a marker under prefix/ in the bucket
// (removed at cleanup), the opted-in namespace ns, an s3fs PV pv of the suite's driver on that
// prefix's handle (deleted at cleanup), and the agent's log lines naming pv or logKeys shown on
// failure.
func tenantVolume(t *testing.T, e *env, prefix, ns, pv string, logKeys ...string) {
	t.Helper()
	putInBucket(t, e, prefix+"/marker.txt", prefix+" marker\n")
	bucket, err := e.s3.Bucket(s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(bucket, prefix)) })
	fuseNamespace(t, e, ns, true)
	keys := config.Default().S3
	s3Volume(t, e, s3Vol{ns: ns, pv: pv, driver: e.csi.Driver, handle: s3Bucket + "-" + prefix,
		attrs: map[string]string{keys.Parameters.Bucket: s3Bucket, keys.Parameters.Endpoint: e.s3.Endpoint, "mounter": "s3fs"}})
	deletePVAtCleanup(t, e, pv)
	logAgentOnFailure(t, e, append([]string{pv}, logKeys...)...)
}
