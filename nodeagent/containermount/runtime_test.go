package containermount_test

import (
	"errors"
	"slices"
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
	hostPod := containermount.Proc{Pid: 2, UserNS: host, MountNSOwner: host}
	usernsPod := containermount.Proc{Pid: 2, UserNS: 7, MountNSOwner: 7, UserNSParent: host}
	for _, tc := range []struct {
		name       string
		p, sandbox containermount.Proc
		ok         bool
	}{
		{"host's user namespace", containermount.Proc{Pid: 3, UserNS: host, MountNSOwner: host}, hostPod, true},
		{"the pod's user namespace, made by the runtime from the host's", containermount.Proc{Pid: 3, UserNS: 7, MountNSOwner: 7, UserNSParent: host}, usernsPod, true},
		{"the sandbox itself", usernsPod, usernsPod, true},
		{"init ran unshare -Urm in a pod in the host's user namespace", containermount.Proc{Pid: 3, UserNS: 8, MountNSOwner: 8, UserNSParent: host}, hostPod, false},
		{"init ran unshare -Urm in a user-namespaced pod", containermount.Proc{Pid: 3, UserNS: 8, MountNSOwner: 8, UserNSParent: 7}, usernsPod, false},
		{"host's user namespace in a user-namespaced pod", containermount.Proc{Pid: 3, UserNS: host, MountNSOwner: host}, usernsPod, false},
		{"pod's user namespace nested in another than the host's", containermount.Proc{Pid: 3, UserNS: 8, MountNSOwner: 8, UserNSParent: 7},
			containermount.Proc{Pid: 2, UserNS: 8, MountNSOwner: 8, UserNSParent: 7}, false},
		{"mount namespace owned by another user namespace", containermount.Proc{Pid: 3, UserNS: host, MountNSOwner: 7}, hostPod, false},
		{"owner unknown", containermount.Proc{Pid: 3, UserNS: host}, hostPod, false},
		{"sandbox's user namespace unknown", containermount.Proc{Pid: 3, UserNS: host, MountNSOwner: host}, containermount.Proc{Pid: 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := containermount.RuntimeMade(tc.p, tc.sandbox, host)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, containermount.ErrNotRuntimeNamespace)) {
				t.Fatalf("RuntimeMade = %v; want ok %t", err, tc.ok)
			}
		})
	}
}

// User namespaces are judged from the kernel, whatever the pod spec's hostUsers says.
func TestRemountJudgesUserNamespacesFromTheKernel(t *testing.T) {
	yes, no := true, false
	t.Run("spec hostUsers true, the runtime put the pod in a user namespace", func(t *testing.T) {
		c := newFakeCluster(t)
		c.pod.Spec.HostUsers = &yes
		for pid, ctr := range map[int]string{11: "sandbox", 20: "app", 21: "app", 30: "sub", 40: "c3", 41: "c4", 60: "fresh"} {
			ns := map[string]uint64{"sandbox": 6, "app": 2, "sub": 3, "c3": 4, "c4": 4, "fresh": 5}[ctr]
			c.node.AddProc(pid, containermounttest.FakeProc{Cgroup: cg(ctr), MountNS: ns, UserNS: 77, UserNSParent: 1})
		}
		c.node.FailSetns[3] = errors.New("operation not permitted")
		h := newHarness(t, c.node.OS(), containermount.Options{})
		res, err := h.r.RemountInContainers(ctxFor(t), c.req())
		must(t, err)
		if !slices.Equal(res.Fixed, []string{"app:/data", "c3+c4:/data"}) || len(res.Failed) != 1 {
			t.Errorf("result %+v; want app and c3+c4 fixed, sub failed", res)
		}
		if !errors.Is(res.Failed["sub:/cfg"], containermount.ErrLocked) {
			t.Errorf("sub:/cfg failure = %v, want ErrLocked (entered as a user-namespaced container)", res.Failed["sub:/cfg"])
		}
	})
	t.Run("spec hostUsers false, app's init made its own user namespace", func(t *testing.T) {
		c := newFakeCluster(t)
		c.pod.Spec.HostUsers = &no
		c.node.AddProc(20, containermounttest.FakeProc{Cgroup: cg("app"), MountNS: 2, UserNS: 99, UserNSParent: 1})
		c.node.AddProc(21, containermounttest.FakeProc{Cgroup: cg("app"), MountNS: 2, UserNS: 99, UserNSParent: 1})
		h := newHarness(t, c.node.OS(), containermount.Options{})
		res, err := h.r.RemountInContainers(ctxFor(t), c.req())
		must(t, err)
		for _, call := range c.node.Calls {
			if call.NS == 2 {
				t.Errorf("app's namespace, made by its own init, was entered: %+v", call)
			}
		}
		key := "app (mount namespace 2 of pid 20):/data"
		if !errors.Is(res.Failed[key], containermount.ErrNotRuntimeNamespace) || len(res.Failed) != 1 {
			t.Errorf("failed = %v; want only %s skipped (ErrNotRuntimeNamespace)", res.Failed, key)
		}
		if !slices.Equal(res.Fixed, []string{"sub:/cfg", "c3+c4:/data"}) {
			t.Errorf("fixed = %v, want sub and c3+c4", res.Fixed)
		}
	})
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
