package containermount_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/containermount/containermounttest"
)

func TestParseStat(t *testing.T) {
	tail := " S 812 900 900 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 1 0 48213 1234 56 18446744073709551615\n"
	for _, tc := range []struct {
		name, in string
		want     containermount.ProcStat
		err      bool
	}{
		{"plain", "901 (sleep)" + tail, containermount.ProcStat{PPid: 812, StartTime: 48213}, false},
		// A tenant names its process to look like more fields: only the last ')' counts.
		{"hostile comm", "902 (a) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 1 x (y)" + tail, containermount.ProcStat{PPid: 812, StartTime: 48213}, false},
		{"comm with spaces", "903 (my app) " + tail[1:], containermount.ProcStat{PPid: 812, StartTime: 48213}, false},
		{"no comm", "904 sleep S 1", containermount.ProcStat{}, true},
		{"short", "905 (x) S 1 2 3\n", containermount.ProcStat{}, true},
		{"bad ppid", "906 (x) S x 900 900 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 1 0 48213\n", containermount.ProcStat{}, true},
		{"empty", "", containermount.ProcStat{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := containermount.ParseStat(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParseStat = %+v, %v; want %+v, error %t", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestContainerInits(t *testing.T) {
	ctr := func(id string) containermount.CgroupInfo {
		return containermount.CgroupInfo{PodUID: "u", ContainerID: id}
	}
	procs := []containermount.Proc{
		// app: init 10 (started by the shim, pid 5); 11 its child in the same namespace; 12 a
		// child that made a namespace of its own (unshare -Urm), started in the same tick.
		{Pid: 12, MountNS: 3, PPid: 10, StartTime: 100, Cgroup: ctr("app")},
		{Pid: 10, MountNS: 2, PPid: 5, StartTime: 100, Cgroup: ctr("app")},
		{Pid: 11, MountNS: 2, PPid: 10, StartTime: 150, Cgroup: ctr("app")},
		// side: its init has a higher pid than a later process after a pid wrap; oldest wins.
		{Pid: 30, MountNS: 4, PPid: 7, StartTime: 300, Cgroup: ctr("side")},
		{Pid: 3, MountNS: 5, PPid: 30, StartTime: 400, Cgroup: ctr("side")},
	}
	inits, nested := containermount.ContainerInits(procs)
	var ip, np []int
	for _, p := range inits {
		ip = append(ip, p.Pid)
	}
	for _, p := range nested {
		np = append(np, p.Pid)
	}
	if len(ip) != 2 || ip[0] != 10 || ip[1] != 30 {
		t.Errorf("inits %v, want [10 30]", ip)
	}
	if len(np) != 2 || np[0] != 3 || np[1] != 12 {
		t.Errorf("nested %v, want [3 12]", np)
	}
}

func TestRuntimeMade(t *testing.T) {
	const host = 1
	for _, tc := range []struct {
		name      string
		p         containermount.Proc
		hostUsers bool
		ok        bool
	}{
		{"host's user namespace", containermount.Proc{Pid: 1, UserNS: host, MountNSOwner: host}, true, true},
		{"runtime's user namespace (hostUsers false)", containermount.Proc{Pid: 1, UserNS: 7, MountNSOwner: 7, UserNSParent: host}, false, true},
		{"host's user namespace in a hostUsers false pod", containermount.Proc{Pid: 1, UserNS: host, MountNSOwner: host}, false, true},
		{"init ran unshare -Urm in a hostUsers pod", containermount.Proc{Pid: 1, UserNS: 7, MountNSOwner: 7, UserNSParent: host}, true, false},
		{"nested in the pod's user namespace", containermount.Proc{Pid: 1, UserNS: 8, MountNSOwner: 8, UserNSParent: 7}, false, false},
		{"mount namespace owned by another user namespace", containermount.Proc{Pid: 1, UserNS: host, MountNSOwner: 7}, true, false},
		{"owner unknown", containermount.Proc{Pid: 1, UserNS: host}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := containermount.RuntimeMade(tc.p, host, tc.hostUsers)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, containermount.ErrNotRuntimeNamespace)) {
				t.Fatalf("RuntimeMade = %v; want ok %t", err, tc.ok)
			}
		})
	}
}

// A process of app that made its own user and mount namespace (holding a copy of the dead
// mount) is left alone with a ContainerMountSkipped Event; app itself is fixed.
func TestRemountSkipsNamespaceMadeByTheTenant(t *testing.T) {
	c := newFakeCluster(t)
	c.node.AddProc(22, containermounttest.FakeProc{Cgroup: cg("app"), MountNS: 9, UserNS: 99, UserNSParent: 1, PPid: 20, StartTime: 5})
	must(t, c.node.SetTable(9, `1 0 0:30 / / rw - overlay overlay rw
490 1 `+deadDev+` / /data rw,nosuid,nodev - fuse.s3fs s3fs rw
`))
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	key := "app (mount namespace 9 of pid 22):/data"
	if !errors.Is(res.Failed[key], containermount.ErrNotRuntimeNamespace) {
		t.Errorf("failed = %v; want %s skipped (ErrNotRuntimeNamespace)", res.Failed, key)
	}
	for _, call := range c.node.Calls {
		if call.NS == 9 {
			t.Errorf("the tenant's namespace was entered: %+v", call)
		}
	}
	if top, _ := c.node.Table(9).Top("/data"); top.ID != 490 {
		t.Errorf("the tenant's namespace changed: top %+v", top)
	}
	if len(res.Fixed) == 0 {
		t.Errorf("nothing fixed: %+v", res)
	}
	var skipped int
	for _, e := range h.events() {
		if strings.HasPrefix(e, "Warning "+containermount.ReasonSkipped) && strings.Contains(e, "mount namespace 9 of pid 22") {
			skipped++
		}
	}
	if skipped != 1 {
		t.Errorf("want one %s Event naming the tenant's namespace", containermount.ReasonSkipped)
	}
	if got := counter(t, h.reg, "failure", "not_runtime_namespace"); got != 1 {
		t.Errorf("not_runtime_namespace failures = %v, want 1", got)
	}
}
