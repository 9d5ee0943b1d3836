//go:build e2e

package scenarios

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// hungFor is how long the serving s3fs stays stopped: long enough for any "dead after a timeout"
// logic, for the injected probe's failure threshold, and for the agent's safety-net pass (a
// stopped daemon wakes nothing: it is noticed within s3.checkInterval plus one statfs timeout).
var hungFor = func() time.Duration {
	s3 := config.Default().S3
	return max(60*time.Second, s3.CheckInterval.Duration+s3.StatfsTimeout.Duration+15*time.Second)
}()

// lostFUSEMountHung: the s3fs serving a volume (yandex layout: at kubelet's staging path, bound
// to the pod's target) is stopped with SIGSTOP for hungFor (77 s), as a daemon blocked on S3 would be →
// no second s3fs for the volume (the driver's or the agent's), the mount stacks at the target
// and the staging path unchanged, no container restarted, an Event MountHung; SIGCONT → the app
// reads (a file put on the S3 server's side meanwhile) and writes on, nothing stacked.
func lostFUSEMountHung(t *testing.T, e *env) {
	l := &fieldLayout{
		name: "hung", driver: "ru.yandex.s3.csi", layout: csitest.LayoutYandex,
		ns: "e2e-fuse-hung", pv: "e2e-fuse-hung-pv", handle: s3Bucket + "/hung",
		attrs: map[string]string{"mounter": "s3fs"}, stage: true,
		files: map[string]string{"hung/app.txt": "hung app data\n"},
		want:  "hung app data\n", dataDir: "hung/", src: s3Bucket + ":/hung",
	}
	pod := fusePodSetup(t, e, l)
	restarts := map[string]map[string]int32{"app": restartCounts(pod)}
	target, global := podTarget(e, string(pod.UID), l.pv), l.globalMount(e)
	serving := pluginS3fs(l.plugin)
	if len(serving) != 1 {
		t.Fatalf("the plugin runs %d s3fs %v, want 1 (one volume)", len(serving), serving)
	}
	pid := serving[0]
	// The stacks by unique mount ID (a new mount may get a freed mountinfo ID and pass for the old).
	tgtBefore, globBefore := mustStackIdentity(t, target), mustStackIdentity(t, global)
	if others := otherS3fs(l, pid); len(others) > 0 {
		t.Fatalf("before the stop, other s3fs of %s run: %v", l.src, others)
	}
	hungBefore := len(hungEvents(t, e, l))

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP s3fs %d: %v", pid, err)
	}
	continued := false
	cont := func() {
		if !continued {
			continued = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT s3fs %d: %v", pid, err)
			}
		}
	}
	t.Cleanup(cont)
	t0 := time.Now()
	t.Logf("s3fs %d serving %s stopped (SIGSTOP) for %s; target %s, staging %s", pid, l.pv, hungFor, describeStack(mountsAt(target)), describeStack(mountsAt(global)))

	// Watch, without touching the hung mount (no stat, no read): processes, mount tables, Events.
	var second, stacked []string
	var hungAt time.Duration
	for time.Since(t0) < hungFor {
		if others := otherS3fs(l, pid); len(others) > 0 && len(second) < 5 {
			second = append(second, fmt.Sprintf("+%s %v", time.Since(t0).Round(time.Second), others))
		}
		tgt, tgtErr := stackIdentity(target)
		glob, globErr := stackIdentity(global)
		if (tgt != tgtBefore || glob != globBefore) && len(stacked) < 5 {
			stacked = append(stacked, fmt.Sprintf("+%s target %s %s (%v) staging %s %s (%v)", time.Since(t0).Round(time.Second),
				tgt, describeStack(mountsAt(target)), tgtErr, glob, describeStack(mountsAt(global)), globErr))
		}
		if hungAt == 0 && len(hungEvents(t, e, l)) > hungBefore {
			hungAt = time.Since(t0).Round(100 * time.Millisecond)
		}
		time.Sleep(time.Second)
	}
	if len(second) > 0 {
		t.Errorf("a second s3fs of %s started while the first was only stopped: %s", l.src, strings.Join(second, "; "))
	}
	if len(stacked) > 0 {
		t.Errorf("the mounts changed while s3fs was stopped (was target %s, staging %s): %s", tgtBefore, globBefore, strings.Join(stacked, "; "))
	}
	if hungAt == 0 {
		t.Errorf("no Event MountHung for %s within %s of the stop; events: %v", l.pv, hungFor, allEventsAbout(t, e, l))
	}
	rc := checkRestarts(t, e, l.ns, restarts)
	t.Logf("RESULT hung s3fs: %s stopped; Event MountHung after %s; second s3fs %v; stacks changed %v; restarts %v → %v",
		hungFor, hungAt, second, stacked, restarts, rc)

	cont()
	t1 := time.Now()
	const meanwhile = "put on the S3 server's side while s3fs was stopped\n"
	putInBucket(t, e, l.dataDir+"while-stopped.txt", meanwhile)
	at := waitReads(t, e, t1, 60*time.Second, "after SIGCONT", append(l.readers("app"),
		reader{l.ns, "app", "app", "/data/while-stopped.txt", meanwhile})...)
	writeReachesBucket(t, e, l.ns, "app", "app", "/data/after-cont.txt", l.dataDir+"after-cont.txt", "after SIGCONT")
	if got, err := stackIdentity(target); got != tgtBefore {
		t.Errorf("after SIGCONT the target's stack changed: %s → %s (%v; %s)", tgtBefore, got, err, describeStack(mountsAt(target)))
	}
	if got, err := stackIdentity(global); got != globBefore {
		t.Errorf("after SIGCONT the staging path's stack changed: %s → %s (%v; %s)", globBefore, got, err, describeStack(mountsAt(global)))
	}
	if others := otherS3fs(l, pid); len(others) > 0 {
		t.Errorf("after SIGCONT other s3fs of %s run: %v", l.src, others)
	}
	checkKubeletMounts(t, e, "after SIGCONT")
	rc = checkRestarts(t, e, l.ns, restarts)
	t.Logf("RESULT hung s3fs resumed: app reads after %s, pinned %s; stacks target %s staging %s; restarts %v",
		at[l.ns+"/app/app"], at[l.ns+"/app/pinned"], describeStack(mountsAt(target)), describeStack(mountsAt(global)), rc)

	gone := deletePodGone(t, e, l.ns, "app", 30*time.Second)
	checkNothingLeft(t, e, l.pv, l.src)
	t.Logf("RESULT hung s3fs: pod deleted and gone in %s, nothing left", gone)
}

// otherS3fs lists the s3fs processes of the layout's volume other than pid: the driver's (same
// source) and the agent's (its fsname).
func otherS3fs(l *fieldLayout, pid int) []int {
	var out []int
	for _, p := range append(s3fsOf(l.src), ourS3fs(l.pv)...) {
		if p != pid && !contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// mountIDs is the stack's mountinfo IDs, bottom first ("[12 40]"). The kernel hands a freed ID
// out again: to tell whether the mounts at a path are still the same ones, compare
// stackIdentity.
func mountIDs(ms []mountinfo.Mount) string {
	ids := make([]int, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return fmt.Sprint(ids)
}

// hungEvents are the MountHung Events about the layout's pods or PV.
func hungEvents(t testing.TB, e *env, l *fieldLayout) []string {
	var out []string
	for _, ev := range events(t, e, "", "MountHung") {
		if strings.HasPrefix(ev, l.ns+"/") || strings.Contains(ev, l.pv) {
			out = append(out, ev)
		}
	}
	return out
}

// allEventsAbout lists every Event in the layout's namespace (for failure messages).
func allEventsAbout(t testing.TB, e *env, l *fieldLayout) []string {
	return events(t, e, l.ns, "")
}
