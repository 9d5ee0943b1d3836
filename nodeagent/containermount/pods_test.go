package containermount_test

import (
	"errors"
	"strings"
	"testing"

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
