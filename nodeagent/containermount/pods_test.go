package containermount_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/containermount/containermounttest"
)

// countingProc counts the reads RemountPods shares between pods.
type countingProc struct {
	containermount.ProcFS
	pids, ownTables, cgroups int
}

func (c *countingProc) Pids() ([]int, error) { c.pids++; return c.ProcFS.Pids() }

func (c *countingProc) Cgroup(pid int) (string, error) { c.cgroups++; return c.ProcFS.Cgroup(pid) }

func (c *countingProc) MountInfo(pid int) (string, error) {
	if pid == agentPid {
		c.ownTables++
	}
	return c.ProcFS.MountInfo(pid)
}

const (
	uid2      = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
	livePath2 = "/var/lib/kubelet/pods/" + uid2 + "/volumes/kubernetes.io~csi/pv1/mount"
)

// TestRemountPodsReadsTheNodeOnce: one pass over two pods (and a malformed request between
// them) lists the processes and reads the agent's own mount table once, not once per pod, and
// fixes each pod's containers as a pass of its own would.
func TestRemountPodsReadsTheNodeOnce(t *testing.T) {
	c, pod2 := twoPods(t)
	c.node.AddProc(80, containermounttest.FakeProc{Cgroup: "0::/kubepods/besteffort/pod" + uid2 + "/w2", MountNS: 7, UserNS: 1})
	proc := &countingProc{ProcFS: c.node.OS().Proc}
	h := newHarness(t, containermount.OS{Proc: proc, NS: c.node.OS().NS}, containermount.Options{})
	bad := containermount.RemountRequest{Pod: pod2, DeadDevice: "dead", LivePath: livePath2}
	second := containermount.RemountRequest{Pod: pod2, DeadDevice: deadDev, DeadRoot: "/", LivePath: livePath2}

	out := h.r.RemountPods(ctxFor(t), []containermount.RemountRequest{c.req(), bad, second})

	if len(out) != 3 {
		t.Fatalf("%d outcomes for 3 requests", len(out))
	}
	if proc.pids != 1 || proc.ownTables != 1 {
		t.Errorf("process list read %d times, own mount table %d times; want once each for the whole pass", proc.pids, proc.ownTables)
	}
	if want := len(mustPids(t, c)); proc.cgroups != want {
		t.Errorf("%d cgroup reads for %d processes; want one each", proc.cgroups, want)
	}
	if err := out[0].Err; err != nil || strings.Join(out[0].Result.Fixed, ",") != "app:/data,sub:/cfg,c3+c4:/data" {
		t.Errorf("first pod: %+v, %v; want app, sub and c3+c4 fixed", out[0].Result, err)
	}
	if !errors.Is(out[1].Err, containermount.ErrBadRequest) {
		t.Errorf("malformed request: %v, want ErrBadRequest", out[1].Err)
	}
	if err := out[2].Err; err != nil || strings.Join(out[2].Result.Fixed, ",") != "w2:/data" || len(out[2].Result.Failed) != 0 {
		t.Errorf("second pod: %+v, %v; want w2:/data fixed", out[2].Result, err)
	}
	if top, _ := c.node.Table(7).Top("/data"); top.Dev != liveDev {
		t.Errorf("second pod's container shows %+v at /data, want the live connection", top)
	}
	if len(c.node.Violations) != 0 {
		t.Fatalf("safety violations: %v", c.node.Violations)
	}
}

func mustPids(t *testing.T, c *fakeCluster) []int {
	t.Helper()
	pids, err := c.node.OS().Proc.Pids()
	must(t, err)
	return pids
}

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
