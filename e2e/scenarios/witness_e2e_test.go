//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Evidence that a kill killed a volume, which does not race the agent's rescue.
//
// The agent is woken by a FUSE daemon's exit and puts the live mount beneath the dead one within
// tens of milliseconds, then detaches the dead one: a stat right after the kill may already
// succeed, and only one mount may stand at the target afterwards. So "the stat after the kill
// failed, or two mounts stand there" is no proof of anything. What survives any rescue speed,
// checked once the rescue is over:
//   - every killed daemon is gone (its pid no longer names the same process);
//   - a different mount now serves the target: the top mount's unique mount ID
//     (statx STATX_MNT_ID_UNIQUE, Linux ≥ 6.8) differs from the one before the kill;
//   - the agent recorded the rescue: a MountReplayed or MountBridged Event on the pod (it writes
//     one only for a target it found dead), and pvrescue_s3_dead_mounts_found_total went up by at
//     least one per witnessed target when the same agent process ran throughout.

// mountIdentity says which mount serves a path: the kernel's identity of the top mount there.
type mountIdentity struct {
	// ID is the top mount's ID from statx. Unique tells which one: STATX_MNT_ID_UNIQUE (64 bits,
	// never reused while the system runs) or, on kernels before 6.8, the plain mount ID, which
	// the kernel hands out again as soon as a mount is freed (the lowest free number): a new
	// mount at the same path can carry the dead one's plain ID, so equal plain IDs do not mean
	// the same mount.
	ID     uint64
	Unique bool
	// From /proc/self/mountinfo (the top of the stack at the path): the plain mount ID, the
	// device (major:minor; a FUSE connection's own), type and source.
	PlainID      int
	Dev          string
	FSType       string
	Source       string
	StackedDepth int
}

func (m mountIdentity) String() string {
	kind := "unique"
	if !m.Unique {
		kind = "plain"
	}
	return fmt.Sprintf("mount %s ID %d (mountinfo ID %d) dev %s %s %s, depth %d", kind, m.ID, m.PlainID, m.Dev, m.FSType, m.Source, m.StackedDepth)
}

// sameMount reports whether a and b are the same mount. Unique IDs decide alone. Without them
// (Linux < 6.8) plain ID and device are compared: both are reused (a tmpfs mounted again at one
// path got the same plain ID and device on 6.18, see TestMountIdentityOnThisKernel), so there
// "same" may be a new mount; the fallback can only fail a good rescue, never pass a missing one.
func sameMount(a, b mountIdentity) bool {
	if a.Unique && b.Unique {
		return a.ID == b.ID
	}
	return a.PlainID == b.PlainID && a.Dev == b.Dev
}

// topMountIdentity is the identity of the mount serving path. statx is asked for the mount ID
// only, with AT_STATX_DONT_SYNC: the kernel fills it from the path walk and asks no FUSE daemon,
// so a dead or hung mount does not block or fail it.
func topMountIdentity(path string) (mountIdentity, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return mountIdentity{}, fmt.Errorf("statx %s: %w", path, err)
	}
	id := mountIdentity{ID: stx.Mnt_id}
	switch {
	case stx.Mask&unix.STATX_MNT_ID_UNIQUE != 0:
		id.Unique = true
	case stx.Mask&unix.STATX_MNT_ID == 0:
		return mountIdentity{}, fmt.Errorf("statx %s: no mount ID in the result (mask %#x)", path, stx.Mask)
	}
	st := mountsAt(path)
	if len(st) == 0 {
		return mountIdentity{}, fmt.Errorf("%s: not a mount point in /proc/self/mountinfo", path)
	}
	top := st[len(st)-1]
	id.PlainID, id.Dev, id.FSType, id.Source, id.StackedDepth = top.ID, top.Dev, top.FSType, top.Source, len(st)
	if !id.Unique && uint64(max(top.ID, 0)) != id.ID {
		return mountIdentity{}, fmt.Errorf("%s: statx mount ID %d is not the top of the stack in mountinfo (%d): it changed meanwhile", path, id.ID, top.ID)
	}
	return id, nil
}

// procID names a process across pid reuse: pid and start time (clock ticks after boot).
type procID struct {
	Pid   int
	Start uint64
}

// procStart reads a live process's start time; ok is false when pid names no live process (gone,
// or a zombie: dead, not yet reaped).
func procStart(pid int) (start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid …: comm may hold anything, so split after the last ')'. State is
	// field 3, starttime field 22 of proc_pid_stat(5).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, err == nil
}

func procIDs(pids []int) []procID {
	out := make([]procID, 0, len(pids))
	for _, p := range pids {
		if st, ok := procStart(p); ok {
			out = append(out, procID{p, st})
		}
	}
	return out
}

// stillRunning lists the processes of ps that still run (same pid, same start time).
func stillRunning(ps []procID) []int {
	var out []int
	for _, p := range ps {
		if st, ok := procStart(p.Pid); ok && st == p.Start {
			out = append(out, p.Pid)
		}
	}
	return out
}

// restoreEventReasons are the agent's Events for a dead target it mounted again (never for a live
// one; BridgeRetired, a hand-back without a death, is not among them).
var restoreEventReasons = []string{contract.ReasonMountReplayed, contract.ReasonMountBridged}

// restoreEvents counts the agent's restore Events on the pod (an aggregated Event counts its
// repetitions) and lists them.
func restoreEvents(e *env, ns string, uid types.UID) (int, []string, error) {
	list, err := e.c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid)})
	if err != nil {
		return 0, nil, err
	}
	n, out := 0, []string(nil)
	for _, ev := range list.Items {
		for _, r := range restoreEventReasons {
			if ev.Reason == r {
				n += max(1, int(ev.Count))
				out = append(out, fmt.Sprintf("%s ×%d: %s", ev.Reason, max(1, ev.Count), ev.Message))
			}
		}
	}
	return n, out, nil
}

// targetWitness is one pod's target as seen before the kill.
type targetWitness struct {
	ns, pod string
	uid     types.UID
	path    string
	before  mountIdentity
	events  int
}

// deathWitness holds what was seen before a kill, to tell afterwards whether the kill killed the
// volumes at the witnessed targets (see the top of this file).
type deathWitness struct {
	targets []*targetWitness
	daemons []procID
	// The agent and its dead-mount counter before the kill ("" URL: not readable then).
	agent     *corev1.Pod
	metricURL string
	deadFound float64
}

const deadFoundMetric = "pvrescue_s3_dead_mounts_found_total"

// witnessKill records, right before a kill, the identity of the mount serving each pod's target
// (pods: the running pod objects, targets: their targets in the same order), the daemons about to
// be killed (host pids), the agent's restore Events on each pod and its dead-mount counter. It
// fails the test when a target is not a live mount or a daemon is not running.
func witnessKill(t testing.TB, e *env, pods []*corev1.Pod, targets []string, daemons []int) *deathWitness {
	t.Helper()
	w := &deathWitness{daemons: procIDs(daemons)}
	if len(w.daemons) != len(daemons) || len(daemons) == 0 {
		t.Fatalf("before the kill: want the daemons to kill running, %v given, %v found running", daemons, w.daemons)
	}
	for i, p := range pods {
		id, err := topMountIdentity(targets[i])
		if err != nil {
			t.Fatalf("before the kill: the mount serving %s/%s: %v", p.Namespace, p.Name, err)
		}
		n, _, err := restoreEvents(e, p.Namespace, p.UID)
		if err != nil {
			t.Fatalf("before the kill: Events of %s/%s: %v", p.Namespace, p.Name, err)
		}
		w.targets = append(w.targets, &targetWitness{ns: p.Namespace, pod: p.Name, uid: p.UID, path: targets[i], before: id, events: n})
	}
	if a, why := runningAgent(e); a == nil {
		t.Logf("before the kill: %s (the dead-mount counter is not compared)", why)
	} else {
		w.agent, w.metricURL = a, "http://"+net.JoinHostPort(a.Status.PodIP, "8080")+"/metrics"
		v, err := agentMetric(w.metricURL, deadFoundMetric)
		if err != nil {
			t.Fatalf("before the kill: the agent's %s: %v", deadFoundMetric, err)
		}
		w.deadFound = v
	}
	return w
}

// deathSeen is what was seen after the rescue, for deathProblems.
type deathSeen struct {
	running   []int           // witnessed daemons still running
	after     []mountIdentity // per witnessed target
	afterErr  []error
	events    []int // restore Events per witnessed target
	sameAgent bool  // the same agent process ran throughout (its counter comparable)
	deadFound float64
}

// deathProblems says what is missing from the evidence that the kill killed every witnessed
// target's volume and the agent restored it; none means the evidence is complete.
func (w *deathWitness) deathProblems(s deathSeen) []string {
	var out []string
	if len(s.running) > 0 {
		out = append(out, fmt.Sprintf("the killed daemons %v still run", s.running))
	}
	for i, tw := range w.targets {
		who := fmt.Sprintf("%s/%s at %s", tw.ns, tw.pod, tw.path)
		switch {
		case s.afterErr[i] != nil:
			out = append(out, fmt.Sprintf("%s: no mount to compare after the rescue: %v", who, s.afterErr[i]))
		case sameMount(tw.before, s.after[i]):
			out = append(out, fmt.Sprintf("%s: the same mount serves the target as before the kill (%s): the kill did not kill it, or nothing replaced it", who, s.after[i]))
		}
		if s.events[i] <= tw.events {
			out = append(out, fmt.Sprintf("%s: no new %v Event of the agent (%d before the kill, %d now): it did not record restoring a dead mount", who, restoreEventReasons, tw.events, s.events[i]))
		}
	}
	if s.sameAgent && s.deadFound < w.deadFound+float64(len(w.targets)) {
		out = append(out, fmt.Sprintf("the agent's %s went %v → %v, want +%d at least (one per witnessed target)", deadFoundMetric, w.deadFound, s.deadFound, len(w.targets)))
	}
	return out
}

// checkVolumeDied checks, after the rescue (the reads of data put into the bucket after the kill
// have succeeded), that the kill killed every witnessed volume: the daemons are gone, another
// mount serves each target, the agent recorded each restore. It waits up to 30 s for what the
// agent reports asynchronously (Events, its counter) and returns a summary for the RESULT line.
func (w *deathWitness) checkVolumeDied(t testing.TB, e *env) string {
	t.Helper()
	var s deathSeen
	var evs [][]string
	look := func() []string {
		s = deathSeen{running: stillRunning(w.daemons)}
		evs = evs[:0]
		for _, tw := range w.targets {
			id, err := topMountIdentity(tw.path)
			s.after, s.afterErr = append(s.after, id), append(s.afterErr, err)
			n, list, err := restoreEvents(e, tw.ns, tw.uid)
			if err != nil {
				list = append(list, err.Error())
			}
			s.events, evs = append(s.events, n), append(evs, list)
		}
		if w.agent != nil {
			if a, _ := runningAgent(e); a != nil && a.UID == w.agent.UID && maps.Equal(restartCounts(a), restartCounts(w.agent)) {
				v, err := agentMetric(w.metricURL, deadFoundMetric)
				s.sameAgent, s.deadFound = err == nil, v
			}
		}
		return w.deathProblems(s)
	}
	var problems []string
	pollFor(30*time.Second, func() bool { problems = look(); return len(problems) == 0 })
	if len(problems) > 0 {
		t.Errorf("no complete evidence that the kill killed the volume (checked after the rescue, so a fast rescue cannot hide it): %s; restore Events: %v",
			strings.Join(problems, "; "), evs)
	}
	var parts []string
	for i, tw := range w.targets {
		parts = append(parts, fmt.Sprintf("%s/%s: %s → %s, restore Events %d → %d", tw.ns, tw.pod, tw.before, s.after[i], tw.events, s.events[i]))
	}
	counter := "not compared (the agent changed or was unreadable)"
	if s.sameAgent {
		counter = fmt.Sprintf("%v → %v", w.deadFound, s.deadFound)
	}
	pids := make([]int, 0, len(w.daemons))
	for _, d := range w.daemons {
		pids = append(pids, d.Pid)
	}
	return fmt.Sprintf("killed daemons %v gone: %t; %s; %s %s", pids, len(s.running) == 0, strings.Join(parts, "; "), deadFoundMetric, counter)
}
