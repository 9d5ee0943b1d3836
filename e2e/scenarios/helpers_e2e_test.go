//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pvrescue/pvrescue/e2e/cluster"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

func ptr[T any](v T) *T { return &v }

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// waitFor polls cond every 250ms and fails the test after timeout with cond's last reason.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	err := testenv.Poll(ctx, 250*time.Millisecond, func(context.Context) (bool, error) {
		if ok, why := cond(); !ok {
			return false, errors.New(why)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
	}
}

// execIn runs a command in a container (bounded to 10s) and returns stdout.
func execIn(e *env, ns, pod, container string, cmd ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, stderr, err := framework.Exec(ctx, e.c.Config, e.c.Client, ns, pod, container, cmd...)
	if err != nil {
		return out, fmt.Errorf("%w (stderr %q)", err, stderr)
	}
	return out, nil
}

func restartCounts(p *corev1.Pod) map[string]int32 {
	m := map[string]int32{}
	for _, s := range p.Status.ContainerStatuses {
		m[s.Name] = s.RestartCount
	}
	return m
}

// eventsRetryFor is how long events tries a refused List again.
var eventsRetryFor = 10 * time.Second

// events lists the Events with reason ("" for any) in ns ("" for all namespaces), as
// "namespace/object type reason: message". A List the API server refuses is tried again for up to
// eventsRetryFor (10 s); then the test fails (Errorf: callable from any goroutine) and nil is returned — an error
// is never returned as an entry, which a "len(events(…)) > 0" check would take for an Event.
func events(t testing.TB, e *env, ns, reason string) []string {
	t.Helper()
	var opts metav1.ListOptions
	if reason != "" {
		opts.FieldSelector = "reason=" + reason
	}
	var evs *corev1.EventList
	var err error
	for deadline := time.Now().Add(eventsRetryFor); ; time.Sleep(time.Second) {
		if evs, err = e.c.Client.CoreV1().Events(ns).List(context.Background(), opts); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Errorf("list the Events (namespace %q, reason %q): %v", ns, reason, err)
		return nil
	}
	out := make([]string, 0, len(evs.Items))
	for _, ev := range evs.Items {
		out = append(out, fmt.Sprintf("%s/%s %s %s: %s", ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message))
	}
	return out
}

// localDiskPasses is the metric counting the local-disk rescue's passes: one observation of the
// pass's duration at its end.
const localDiskPasses = "pvrescue_localdisk_sync_duration_seconds_count"

// agentCount reads one unlabelled sample of the running agent's /metrics, with the agent pod's UID
// (a restarted agent counts from 0 again).
func agentCount(e *env, name string) (types.UID, float64, error) {
	agent, why := runningAgent(e)
	if agent == nil {
		return "", 0, errors.New(why)
	}
	v, err := agentMetric("http://"+net.JoinHostPort(agent.Status.PodIP, "8080")+"/metrics", name)
	return agent.UID, v, err
}

// waitPasses waits until the running agent ended n passes counted by metric (localDiskPasses)
// after the call — with n = 2, one whole pass began after it, so whatever held at the call was
// seen by that pass and anything that pass would record or change is done. Absence checks ("no
// fake", "no Event", "left alone") wait on it instead of a fixed time: they pass only once the
// agent has looked, however slow the machine. It returns how long it waited.
func waitPasses(t testing.TB, e *env, metric string, n int, timeout time.Duration) time.Duration {
	t.Helper()
	return waitPassesNudged(t, e, metric, n, timeout, nil)
}

// s3Passes is the metric counting the S3 rescue's passes: one observation of the pass's
// duration at the end of every Restorer.Sync.
const s3Passes = "pvrescue_s3_sync_duration_seconds_count"

// eventSendSlack is how long an absence check waits after the agent's passes for the Events they
// recorded to reach the API server: the agent sends each at once, through client-go's
// broadcaster (its queue and the API write).
const eventSendSlack = time.Second

// waitS3Passes is waitPasses for the S3 rescue (s3Passes). While nothing is under way its passes
// come only every s3.checkInterval (1 min as shipped), but any change of a pod on the node wakes it
// at once (the agent's view calls it on every pod add, update or delete): while the count lags,
// the annotation e2e.pvrescue.io/nudge on the agent's own pod is rewritten once a second. The
// passes so woken are whole passes over everything on the node; nothing they read is changed.
func waitS3Passes(t testing.TB, e *env, n int, timeout time.Duration) time.Duration {
	t.Helper()
	return waitPassesNudged(t, e, s3Passes, n, timeout, func(agent types.UID) error {
		p, why := runningAgent(e)
		if p == nil {
			return errors.New(why)
		}
		if p.UID != agent {
			return fmt.Errorf("the agent pod changed (%s → %s)", agent, p.UID)
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.pvrescue.io/nudge":%q}}}`, time.Now().Format(time.RFC3339Nano))
		_, err := e.c.Client.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	})
}

// waitPassesNudged is waitPasses; with nudge set, it is called (with the counted agent pod's
// UID) whenever the count has not moved for a second, to wake the agent.
func waitPassesNudged(t testing.TB, e *env, metric string, n int, timeout time.Duration, nudge func(types.UID) error) time.Duration {
	t.Helper()
	t0 := time.Now()
	uid, from, err := agentCount(e, metric)
	if err != nil {
		t.Fatalf("read %s: %v", metric, err)
	}
	last, moved := from, time.Now()
	var nudged int
	var nudgeErr error
	waitFor(t, timeout, fmt.Sprintf("the agent to end %d passes (%s from %.0f)", n, metric, from), func() (bool, string) {
		u, now, err := agentCount(e, metric)
		switch {
		case err != nil:
			return false, err.Error()
		case u != uid:
			return false, fmt.Sprintf("the agent pod changed (%s → %s): its passes are not the ones counted", uid, u)
		}
		if now >= from+float64(n) {
			return true, ""
		}
		if now != last {
			last, moved = now, time.Now()
		} else if nudge != nil && time.Since(moved) >= time.Second {
			moved = time.Now()
			nudged++
			nudgeErr = nudge(uid)
		}
		return false, fmt.Sprintf("%s %.0f (nudged %d times, last error %v)", metric, now, nudged, nudgeErr)
	})
	return time.Since(t0)
}

// stackIdentity names the mounts stacked at path, bottom first, by their unique mount IDs: the
// top's from statx (STATX_MNT_ID_UNIQUE, asked with AT_STATX_DONT_SYNC, so no FUSE daemon is
// asked and a hung or dead mount answers), the others by statmount(2) down the parents while they
// sit at the same mount point (Linux ≥ 6.8). Unlike mountinfo's IDs, which the kernel hands out
// again as soon as a mount is freed, a unique ID names one mount while the system runs: an equal
// identity means the same mounts, not new ones that got the old numbers.
func stackIdentity(path string) (string, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_DONT_SYNC|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return "", fmt.Errorf("statx %s: %w", path, err)
	}
	if stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return "", fmt.Errorf("statx %s: no unique mount ID (Linux < 6.8): mount IDs are reused here, nothing to compare", path)
	}
	top, err := statmountOf(stx.Mnt_id)
	if err != nil {
		return "", err
	}
	if top.point != path {
		return "", fmt.Errorf("%s is not a mount point (the mount serving it is at %s)", path, top.point)
	}
	ids := []uint64{top.id}
	for m := top; m.parent != m.id; {
		p, err := statmountOf(m.parent)
		if err != nil {
			return "", err
		}
		if p.point != path {
			break
		}
		if len(ids) > 64 {
			return "", fmt.Errorf("more than 64 mounts stacked at %s", path)
		}
		ids, m = append(ids, p.id), p
	}
	slices.Reverse(ids)
	return fmt.Sprint(ids), nil
}

// mustStackIdentity is stackIdentity, failing the test when the kernel cannot answer.
func mustStackIdentity(t testing.TB, path string) string {
	t.Helper()
	id, err := stackIdentity(path)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

type statmountFacts struct {
	id, parent uint64
	point      string
}

// statmountOf asks statmount(2) for a mount's unique ID, its parent's and its mount point
// (STATMOUNT_MNT_BASIC|STATMOUNT_MNT_POINT; struct layout of include/uapi/linux/mount.h, as
// internal/mountreplace reads it).
func statmountOf(id uint64) (statmountFacts, error) {
	const (
		mntBasic, mntPoint = 0x2, 0x10
		fixed              = 512 // sizeof(struct statmount); its strings follow
	)
	var req [24]byte // struct mnt_id_req {__u32 size, spare; __u64 mnt_id, param}
	binary.NativeEndian.PutUint32(req[0:], 24)
	binary.NativeEndian.PutUint64(req[8:], id)
	binary.NativeEndian.PutUint64(req[16:], mntBasic|mntPoint)
	buf := make([]byte, fixed+unix.PathMax+64)
	if _, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req[0])), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0); errno != 0 {
		return statmountFacts{}, fmt.Errorf("statmount %d: %w", id, errno)
	}
	size := int(binary.NativeEndian.Uint32(buf[0:]))
	if mask := binary.NativeEndian.Uint64(buf[8:]); mask&(mntBasic|mntPoint) != mntBasic|mntPoint || size < fixed || size > len(buf) {
		return statmountFacts{}, fmt.Errorf("statmount %d: answer of %d bytes with mask %#x", id, size, mask)
	}
	at := fixed + int(binary.NativeEndian.Uint32(buf[108:]))
	end := -1
	if at < size {
		end = bytes.IndexByte(buf[at:size], 0)
	}
	if end < 0 {
		return statmountFacts{}, fmt.Errorf("statmount %d: no mount point in the answer", id)
	}
	return statmountFacts{id: binary.NativeEndian.Uint64(buf[40:]), parent: binary.NativeEndian.Uint64(buf[48:]), point: string(buf[at : at+end])}, nil
}

// TestEventsFailOnARefusedList: a List the API server refuses (the sabotage: a client whose every
// Event List fails) fails the caller's test and yields no entry. The helper used to return the
// error's text as an Event, so "len(events(…)) > 0" held on an API error.
func TestEventsFailOnARefusedList(t *testing.T) {
	cs := fake.NewClientset(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "e1"},
		InvolvedObject: corev1.ObjectReference{Namespace: "ns", Name: "pod"}, Type: corev1.EventTypeNormal, Reason: "MountReplayed", Message: "m"})
	e := &env{c: &cluster.Cluster{Client: cs}}
	if got := events(t, e, "ns", ""); len(got) != 1 || got[0] != "ns/pod Normal MountReplayed: m" {
		t.Fatalf("the one Event as listed: %q", got)
	}
	cs.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("sabotaged: every Event List refused")
	})
	defer func(d time.Duration) { eventsRetryFor = d }(eventsRetryFor)
	eventsRetryFor = 0
	rec := &failedTB{TB: t}
	if got := events(rec, e, "ns", "MountReplayed"); got != nil || !rec.failed {
		t.Errorf("a refused List: events returned %q and failed the test: %v; want nil and a failure", got, rec.failed)
	}
}

// failedTB records Errorf instead of failing the test it wraps.
type failedTB struct {
	testing.TB
	failed bool
}

func (f *failedTB) Errorf(format string, args ...any) {
	f.failed = true
	f.Logf("(expected) "+format, args...)
}

// TestStackIdentityOnThisKernel (root): stackIdentity on real mounts, against the sabotage the
// plain IDs miss — the top of a stack replaced by a new mount that the kernel gives the freed
// mountinfo ID again. An untouched stack keeps its identity; the replaced one gets another, while
// mountIDs (mountinfo's IDs, what the hung and busy-bridge checks compared) may stay equal
// (logged: whether this kernel reused the ID this time).
func TestStackIdentityOnThisKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it mounts tmpfs): run the e2e layer as root, e.g. sudo make e2e")
	}
	dir := t.TempDir()
	mount := func(name string) {
		t.Helper()
		if err := unix.Mount(name, dir, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatalf("mount tmpfs at %s: %v", dir, err)
		}
	}
	t.Cleanup(func() {
		for range 3 { // what is left of the stack
			_ = unix.Unmount(dir, unix.MNT_DETACH) // EINVAL once nothing is mounted
		}
	})
	mount("bottom")
	mount("top")
	before, plainBefore := mustStackIdentity(t, dir), mountIDs(mountsAt(dir))
	if again := mustStackIdentity(t, dir); again != before {
		t.Errorf("one untouched stack gave two identities: %s, %s", before, again)
	}
	if n := len(mountsAt(dir)); n != 2 || strings.Count(before, " ") != 1 {
		t.Fatalf("two mounts stacked at %s: mountinfo has %d, stackIdentity %s", dir, n, before)
	}
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	mount("top-again")
	after, plainAfter := mustStackIdentity(t, dir), mountIDs(mountsAt(dir))
	if after == before {
		t.Errorf("the stack's top was replaced but stackIdentity is unchanged: %s", after)
	}
	if strings.Fields(strings.Trim(after, "[]"))[0] != strings.Fields(strings.Trim(before, "[]"))[0] {
		t.Errorf("the untouched bottom mount changed identity: %s → %s", before, after)
	}
	t.Logf("unique IDs %s → %s; mountinfo IDs %s → %s (reused: %t)", before, after, plainBefore, plainAfter, plainBefore == plainAfter)
}

// waitGoneToAgent waits until pod ns/name (uid) is gone as the S3 rescue judges it (s3mount's
// podGone): no longer in the API, in phase Succeeded or Failed, or deleted with no container
// running or waiting. The rescue's handling of a gone pod's target starts with its first pass
// after that, so an absence check over it counts passes from here.
func waitGoneToAgent(t testing.TB, e *env, ns, name, uid string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("pod %s/%s (uid %s) to be gone to the agent (deleted, no container running)", ns, name, uid), func() (bool, string) {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && string(p.UID) != uid) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return true, ""
		}
		if p.DeletionTimestamp == nil {
			return false, "not deleted yet"
		}
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if cs.State.Terminated == nil && (cs.State.Running != nil || cs.State.Waiting != nil) {
				return false, fmt.Sprintf("container %s not ended: %+v", cs.Name, cs.State)
			}
		}
		return true, ""
	})
}
