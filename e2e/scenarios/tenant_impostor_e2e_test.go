//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/nodeagent/fusewatch"
)

// Impostor /dev/fuse (issue 51): a tenant cannot make the agent's FUSE watcher work for it.
// fusewatch walks the node's processes for /dev/fuse holders and watches each with a pidfd; a
// descriptor counts as a holder by its link (readlink of /proc/<pid>/fd/<n> == "/dev/fuse"), and
// a tenant can give that name to anything in its own mount namespace. Once the kernel has named
// a real connection in some holder's fdinfo, a descriptor whose fdinfo names none serves nothing
// mounted and makes no holder (nodeagent/fusewatch/doc.go): the tenant's processes are neither
// watched nor do their exits cause walks. Were they watched, every exit would force a walk of
// every process (one per MountSettle, 50 ms) and wake the S3 rescue.
const (
	impostorNS  = "e2e-hostile-impostor"
	impostorPV  = "e2e-hostile-impostor-pv"
	impostorNSs = 300 // the tenant's mount namespaces alive at once, each with the impostor open
	// impostorLife is how long each namespace's holder lives before it exits and its loop
	// makes a new namespace: impostorNSs/impostorLife exits (and unshares) a second.
	impostorLife = 10
	// impostorSpan is how long the agent is measured with the impostors churning (the opted-in
	// volume's daemon is killed in it).
	impostorSpan = 20 * time.Second
	// impostorWalks bounds the agent's holder walks over the span: the kill (the watched daemon's
	// exit), the restored mount (a new connection) and the orphan retries (50 ms doubling to
	// 3.2 s: 7) make about ten; a walk per impostor exit would make hundreds.
	impostorWalks = 20
	// impostorCPU bounds the agent's CPU over the span (user+system of its process, as a share of
	// one core): the span's one restore and the test's metric reads took 0.7% here; an agent
	// that watched the impostors (a walk of ~1000 processes and a rescue pass at each of their
	// exits) took 11% (its walks 117).
	impostorCPU = 0.05
	// impostorRescue bounds the opted-in volume's window (kill → the app reads a file put
	// after it); it is ~1-2.5 s on this machine without the tenant (LostFUSEMount's RESULT).
	impostorRescue = 10 * time.Second
)

// impostorScript is the tenant container's command: a regular file at /dev/fuse in the
// container, then impostorNSs loops, each making a user and mount namespace (unshare -Urm),
// bind-mounting its own regular file over /dev/fuse there and holding it open for impostorLife
// seconds, then again. Loop i starts i mod impostorLife seconds late, so the exits come evenly
// (impostorNSs/impostorLife a second), not in one burst per impostorLife.
func impostorScript() string {
	return fmt.Sprintf(`set -u
: > /dev/fuse
i=0
while [ $i -lt %d ]; do
  (
    sleep $((i %% %d))
    while true; do
      unshare -Urm sh -c 'f=/tmp/imp.$$; : > $f; mount --bind $f /dev/fuse && exec 3</dev/fuse && exec sleep %d' 2>>/tmp/err || sleep 1
    done
  ) &
  i=$((i+1))
done
wait
`, impostorNSs, impostorLife, impostorLife)
}

func hostileTenantImpostorFUSE(t *testing.T, e *env) {
	start := time.Now()
	ctx := context.Background()
	cs := e.c.Client
	checkUnprivilegedUserNS(t)
	tenantVolume(t, e, "impostor", impostorNS, impostorPV, "impostor", "fusewatch")

	app := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "app", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPath: "impostor"}}}},
			Volumes: dataVolume(),
		},
	}
	tenant := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "impostor"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			// unshare(CLONE_NEWUSER) is refused by the runtime's default seccomp profile; this
			// tenant asks for none (as HostileTenantNestedUserNS's).
			SecurityContext: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
			Containers:      []corev1.Container{{Name: "tenant", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", impostorScript()}}},
		},
	}
	for _, p := range []*corev1.Pod{app, tenant} {
		if _, err := cs.CoreV1().Pods(impostorNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
	appPod := framework.WaitPod(t, cs, impostorNS, "app", 2*time.Minute, "Running", framework.Running)
	tenantPod := framework.WaitPod(t, cs, impostorNS, "impostor", 2*time.Minute, "Running", framework.Running)
	waitReads(t, e, time.Now(), 30*time.Second, "before the kill", reader{impostorNS, "app", "app", "/data/marker.txt", "impostor marker\n"})

	// The tenant's namespaces are there: processes of its pod holding a descriptor whose link is
	// /dev/fuse and whose fdinfo names no connection, each in a mount namespace of its own.
	var imp impostors
	if !pollFor(40*time.Second, func() bool { imp = impostorHolders(string(tenantPod.UID)); return len(imp.mntNS) >= impostorNSs*9/10 }) {
		l, _ := framework.Logs(ctx, cs, impostorNS, "impostor", "tenant")
		errs, _ := execIn(e, impostorNS, "impostor", "tenant", "sh", "-c", "tail -5 /tmp/err")
		t.Fatalf("the tenant's impostor namespaces: %d holders in %d mount namespaces, want ≥ %d; container log %q, errors %q",
			imp.holders, len(imp.mntNS), impostorNSs*9/10, l, errs)
	}
	t.Logf("tenant %s/impostor: %d processes hold a regular file at /dev/fuse in %d mount namespaces of their own (%d named a connection)",
		impostorNS, imp.holders, len(imp.mntNS), imp.named)

	daemons := volumeDaemons(e, impostorPV)
	if len(daemons) != 1 {
		t.Fatalf("want exactly one s3fs serving %s, found %v", impostorPV, daemons)
	}
	agentPids := agentProcs()
	if len(agentPids) != 1 {
		t.Fatalf("want one pvrescue-agent process on the host, found %v", agentPids)
	}
	agentPid := agentPids[0]
	const walks, watched = "pvrescue_agent_fuse_holder_walks_total", "pvrescue_agent_fuse_daemons_watched"
	uid0, walks0, err := agentCount(e, walks)
	if err != nil {
		t.Fatal(err)
	}
	cpu0, t0cpu := procCPU(t, agentPid), time.Now()
	var maxWatched float64

	// The span: the impostors churn; a quarter in, the opted-in volume's daemon is killed.
	time.Sleep(impostorSpan / 4)
	tKill := time.Now()
	if err := syscall.Kill(daemons[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	const after = "put on the S3 server's side after the kill\n"
	putInBucket(t, e, "impostor/after.txt", after)
	at := rescueReads(t, e, tKill, 60*time.Second, "while the tenant's impostors churn", []*stack.CSI{e.csi},
		reader{impostorNS, "app", "app", "/data/after.txt", after})
	window := at[impostorNS+"/app/app"]
	for time.Since(t0cpu) < impostorSpan {
		if _, n, err := agentCount(e, watched); err == nil && n > maxWatched {
			maxWatched = n
		}
		time.Sleep(500 * time.Millisecond)
	}
	cpu1, span := procCPU(t, agentPid), time.Since(t0cpu)
	uid1, walks1, err := agentCount(e, walks)
	if err != nil {
		t.Fatal(err)
	}
	if uid1 != uid0 || !pidRuns(agentPid) {
		t.Fatalf("the agent restarted during the span (pod %s → %s, pid %d runs: %v): nothing measured", uid0, uid1, agentPid, pidRuns(agentPid))
	}
	end := impostorHolders(string(tenantPod.UID))
	share := (cpu1 - cpu0).Seconds() / span.Seconds()
	if end.exits(imp) < impostorNSs/2 {
		t.Errorf("the tenant's holders did not churn: %d of %d gone over %s (they should exit every %d s)", end.exits(imp), len(imp.pids), span.Round(time.Second), impostorLife)
	}
	if walks1-walks0 > impostorWalks {
		t.Errorf("the agent walked the processes for FUSE holders %.0f times in %s with the tenant's impostors churning, want ≤ %d (a walk per impostor exit?)", walks1-walks0, span.Round(time.Second), impostorWalks)
	}
	if share > impostorCPU {
		t.Errorf("the agent used %.0f%% of a core over %s with the tenant's impostors churning, want ≤ %.0f%%", 100*share, span.Round(time.Second), 100*impostorCPU)
	}
	// The watcher watches the node's real daemons only: the plugins' and bridges' s3fs.
	if real := len(fuseDaemonsOnHost()); maxWatched > float64(real)+2 {
		t.Errorf("the agent watched up to %.0f FUSE daemons, the node runs %d real ones: the tenant's impostors were taken for daemons", maxWatched, real)
	}
	if window > impostorRescue {
		t.Errorf("the opted-in volume was rescued %s after its daemon's kill with the tenant's impostors churning, want ≤ %s", window, impostorRescue)
	}
	deletePodGone(t, e, impostorNS, "impostor", 60*time.Second)
	deletePodGone(t, e, impostorNS, "app", 60*time.Second)
	t.Logf("RESULT impostor /dev/fuse: %d tenant mount namespaces with a regular file open at /dev/fuse (%d holders gone and replaced over the span); over %s the agent (pid %d) walked %.0f times (≤ %d), used %.1f%% of a core (≤ %.0f%%), watched at most %.0f daemons; the opted-in volume's s3fs %d killed → read again after %s (≤ %s); app pod %s; scenario took %s",
		len(imp.mntNS), end.exits(imp), span.Round(100*time.Millisecond), agentPid, walks1-walks0, impostorWalks, 100*share, 100*impostorCPU, maxWatched,
		daemons[0], window, impostorRescue, appPod.Name, time.Since(start).Round(time.Second))
}

// impostors are the processes of one pod holding a descriptor whose link is /dev/fuse.
type impostors struct {
	holders int
	named   int // of which fdinfo names a FUSE connection (a real /dev/fuse)
	pids    map[int]bool
	mntNS   map[uint64]bool
}

// exits counts the holders of before that no longer hold (exited).
func (now impostors) exits(before impostors) int {
	n := 0
	for pid := range before.pids {
		if !now.pids[pid] {
			n++
		}
	}
	return n
}

// impostorHolders finds the processes of pod uid (by their cgroup) with a /dev/fuse descriptor.
func impostorHolders(uid string) impostors {
	out := impostors{pids: map[int]bool{}, mntNS: map[uint64]bool{}}
	ents, _ := os.ReadDir("/proc")
	needle := []byte(strings.ReplaceAll(uid, "-", "_"))
	needle2 := []byte(uid)
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || (!bytes.Contains(cg, needle) && !bytes.Contains(cg, needle2)) {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		held, named := false, false
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err != nil || !fusewatch.FuseDeviceLink(link) {
				continue
			}
			held = true
			if info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name())); err == nil {
				if _, ok := fusewatch.FDInfoConnection(string(info)); ok {
					named = true
				}
			}
		}
		if !held {
			continue
		}
		out.holders++
		out.pids[pid] = true
		if named {
			out.named++
		}
		var st syscall.Stat_t
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/mnt", pid), &st) == nil {
			out.mntNS[st.Ino] = true
		}
	}
	return out
}

// fuseDaemonsOnHost lists the host's processes holding a /dev/fuse descriptor whose fdinfo names
// a FUSE connection: the real daemons.
func fuseDaemonsOnHost() []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err != nil || !fusewatch.FuseDeviceLink(link) {
				continue
			}
			if info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name())); err == nil {
				if _, ok := fusewatch.FDInfoConnection(string(info)); ok {
					out = append(out, pid)
					break
				}
			}
		}
	}
	return out
}

// procCPU is the CPU time (user + system, every thread) pid has used, from /proc/<pid>/stat.
func procCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("read the CPU time of pid %d: %v", pid, err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	// Fields 14 and 15 of stat (utime, stime), in clock ticks: 100 a second on Linux.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}
