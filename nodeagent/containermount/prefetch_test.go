package containermount_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/containermount/containermounttest"
)

// twoPods is the fake cluster with a second pod of the volume (its own target on the node) whose
// container w2 runs in mount namespace 7; the second pod's process is not added.
func twoPods(t *testing.T) (*fakeCluster, *corev1.Pod) {
	c := newFakeCluster(t)
	must(t, c.node.SetTable(agentNS, `1 0 0:21 / / rw - overlay overlay rw
300 1 `+deadDev+` / `+livePath+` rw shared:5 - fuse.s3fs s3fs rw
301 300 `+liveDev+` / `+livePath+` rw shared:5 - fuse.s3fs s3fs rw
302 1 `+deadDev+` / `+livePath2+` rw shared:6 - fuse.s3fs s3fs rw
303 302 `+liveDev+` / `+livePath2+` rw shared:6 - fuse.s3fs s3fs rw
`))
	for _, ns := range []uint64{7, 8} {
		must(t, c.node.SetTable(ns, `1 0 0:35 / / rw - overlay overlay rw
440 1 `+deadDev+` / /data rw - fuse.s3fs s3fs rw
`))
	}
	pod2 := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web2", Namespace: "default", UID: types.UID(uid2)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "w2", VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/data"}}}}},
		Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "w2", ContainerID: "containerd://w2"}}},
	}
	return c, pod2
}

// TestPrefetchedPassReadsOnlyWhatChanged: the processes are listed while the targets are put
// back (PrefetchPods); the pass after reads only the process started since (a container that
// started meanwhile, fixed like the others) and drops the one that ended (never entered, never
// reported as failed).
func TestPrefetchedPassReadsOnlyWhatChanged(t *testing.T) {
	c, pod2 := twoPods(t)
	// A process of the second pod that ends before the pass.
	c.node.AddProc(90, containermounttest.FakeProc{Cgroup: "0::/kubepods/besteffort/pod" + uid2 + "/gone", MountNS: 8, UserNS: 1})
	proc := &countingProc{ProcFS: c.node.OS().Proc}
	h := newHarness(t, containermount.OS{Proc: proc, NS: c.node.OS().NS}, containermount.Options{})

	h.r.PrefetchPods([]string{string(c.pod.UID), uid2})
	containermount.WaitPrefetch(h.r)
	listed := proc.cgroups
	// Meanwhile: the second pod's container starts, its other process ends.
	c.node.AddProc(80, containermounttest.FakeProc{Cgroup: "0::/kubepods/besteffort/pod" + uid2 + "/w2", MountNS: 7, UserNS: 1})
	c.node.RemoveProc(90)
	proc.cgroups, proc.pids = 0, 0

	out := h.r.RemountPods(ctxFor(t), []containermount.RemountRequest{c.req(),
		{Pod: pod2, DeadDevice: deadDev, DeadRoot: "/", LivePath: livePath2}})

	if listed != len(mustPids(t, c)) { // 90 gone, 80 added: as many as before
		t.Errorf("the prefetch read %d cgroups; want one per process (%d)", listed, len(mustPids(t, c)))
	}
	if proc.pids != 1 || proc.cgroups != 1 {
		t.Errorf("the pass listed the processes %d times and read %d cgroups; want one list and only the new process's cgroup", proc.pids, proc.cgroups)
	}
	if err := out[0].Err; err != nil || strings.Join(out[0].Result.Fixed, ",") != "app:/data,sub:/cfg,c3+c4:/data" {
		t.Errorf("first pod: %+v, %v; want app, sub and c3+c4 fixed", out[0].Result, err)
	}
	if err := out[1].Err; err != nil || strings.Join(out[1].Result.Fixed, ",") != "w2:/data" || len(out[1].Result.Failed) != 0 {
		t.Errorf("second pod: %+v, %v; want w2:/data fixed and nothing failed (the ended process is not entered)", out[1].Result, err)
	}
	if top, _ := c.node.Table(8).Top("/data"); top.Dev != deadDev {
		t.Errorf("the ended process's namespace was changed: %+v at /data", top)
	}
	if len(c.node.Violations) != 0 {
		t.Fatalf("safety violations: %v", c.node.Violations)
	}
}

// TestPrefetchNotUsed: a pass lists every process itself when the prefetched list is older than
// ten seconds, or does not cover every pod it is asked about.
func TestPrefetchNotUsed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		uids  func(c *fakeCluster) []string
		after time.Duration
	}{
		{"stale", func(c *fakeCluster) []string { return []string{string(c.pod.UID), uid2} }, 11 * time.Second},
		{"another pod", func(*fakeCluster) []string { return []string{uid2} }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := twoPods(t)
			proc := &countingProc{ProcFS: c.node.OS().Proc}
			h := newHarness(t, containermount.OS{Proc: proc, NS: c.node.OS().NS}, containermount.Options{})
			h.r.PrefetchPods(tc.uids(c))
			containermount.WaitPrefetch(h.r)
			h.clock.Step(tc.after)
			proc.cgroups = 0
			out := h.r.RemountPods(ctxFor(t), []containermount.RemountRequest{c.req()})
			if want := len(mustPids(t, c)); proc.cgroups != want {
				t.Errorf("the pass read %d cgroups; want every process's (%d)", proc.cgroups, want)
			}
			if err := out[0].Err; err != nil || strings.Join(out[0].Result.Fixed, ",") != "app:/data,sub:/cfg,c3+c4:/data" {
				t.Errorf("pod: %+v, %v; want app, sub and c3+c4 fixed", out[0].Result, err)
			}
		})
	}
}
