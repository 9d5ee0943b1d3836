package s3mount

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

func TestParseProcStat(t *testing.T) {
	tail := " 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 4 0 987654 1000000 200"
	cases := []struct {
		name, in  string
		start     uint64
		state     string
		wantError bool
	}{
		{"plain", "1234 (s3fs) S" + tail, 987654, "S", false},
		{"spaces and parens in the name", "1234 (my (odd) prog) R" + tail, 987654, "R", false},
		{"zombie", "1234 (s3fs) Z" + tail, 987654, "Z", false},
		{"truncated", "1234 (s3fs) S 1 1 0", 0, "", true},
		{"no name", "1234 s3fs S" + tail, 0, "", true},
		{"bad number", "1234 (s3fs) S" + strings.Replace(tail, "987654", "x", 1), 0, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, state, err := ParseProcStat(c.in)
			if (err != nil) != c.wantError {
				t.Fatalf("err = %v, want error %v", err, c.wantError)
			}
			if st != c.start || state != c.state {
				t.Errorf("got (%d, %q), want (%d, %q)", st, state, c.start, c.state)
			}
		})
	}
}

func TestCgroupDirs(t *testing.T) {
	const v1 = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:33 / /mnt/devices-again rw,relatime - cgroup cgroup rw,devices
51 23 0:29 /kubepods/pod1 /mnt/sub rw,relatime - cgroup cgroup rw,cpu
`
	const v2 = `30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
`
	cases := []struct {
		name, table, root, group string
		want                     []string
	}{
		{"v1 every hierarchy once, no sub-trees", v1, "/proc/1/root", "pvrescue/s3/pv-a-7", []string{
			"/proc/1/root/sys/fs/cgroup/cpu/pvrescue/s3/pv-a-7",
			"/proc/1/root/sys/fs/cgroup/cpuset/pvrescue/s3/pv-a-7",
			"/proc/1/root/sys/fs/cgroup/devices/pvrescue/s3/pv-a-7",
			"/proc/1/root/sys/fs/cgroup/systemd/pvrescue/s3/pv-a-7",
			"/proc/1/root/sys/fs/cgroup/unified/pvrescue/s3/pv-a-7",
		}},
		{"v2", v2, "/", "g", []string{"/sys/fs/cgroup/g"}},
		{"none", "22 1 8:1 / / rw - ext4 /dev/vda rw\n", "/", "g", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			table, err := stack.ParseMountInfo(c.table)
			if err != nil {
				t.Fatal(err)
			}
			if got := CgroupDirs(table, c.root, c.group); !slices.Equal(got, c.want) {
				t.Errorf("got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestBridgeCgroupAndOptions(t *testing.T) {
	if got := BridgeCgroup("pvrescue/s3", "pv-a", 42); got != "pvrescue/s3/pv-a-42" {
		t.Errorf("BridgeCgroup = %q", got)
	}
	if got := BridgeCgroup("", "pv-a", 42); got != "" {
		t.Errorf("BridgeCgroup without parent = %q, want empty (not placed)", got)
	}
	for _, bad := range []string{"/abs", "../up", "a/../b", "a//b", "."} {
		o := NewOptions()
		o.BridgeCgroup = bad
		if err := o.Validate(); err == nil {
			t.Errorf("BridgeCgroup %q accepted", bad)
		}
	}
	if err := NewOptions().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// An agent restart while a bridge serves a pod: the new restorer adopts the recorded process (no
// second s3fs, no second bind), supervises it, and retires it cleanly when the pod goes.
func TestBridgeAdoptedAcrossAgentRestart(t *testing.T) {
	l := Layout{StateDir: testState}
	w := newWorld(t, standard(false)...)
	w.bridgeCgroup = "pvrescue/s3"
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bridged", func() bool { return len(w.node.Table().Stack(target)) == 2 })

	specs := w.node.Specs()
	if len(specs) != 1 {
		t.Fatalf("started %d processes, want 1", len(specs))
	}
	if s := specs[0]; s.LogFile != l.LogFile("pv-a") || s.Dir != l.Root() || !slices.Contains(s.Env, "TMPDIR="+l.TmpDir("pv-a")) {
		t.Errorf("spec %+v: want log %s, dir %s, TMPDIR %s (all in the state dir)", s, l.LogFile("pv-a"), l.Root(), l.TmpDir("pv-a"))
	}
	proc := w.node.Processes()[0]
	group := BridgeCgroup("pvrescue/s3", "pv-a", proc.Pid())
	if pids, _ := w.node.Cgroup(group); !slices.Equal(pids, []int{proc.Pid()}) {
		t.Errorf("cgroup %s holds %v, want [%d]", group, pids, proc.Pid())
	}
	data, _, ok := w.node.File(l.BridgeRecordFile("pv-a"))
	var rec BridgeRecord
	if !ok || json.Unmarshal(data, &rec) != nil || rec.Proc != proc.ID() || rec.Cgroup != group {
		t.Fatalf("bridge record %q (present %v), want proc %+v in %s", data, ok, proc.ID(), group)
	}

	// The agent restarts (its old restorer is simply abandoned, as a killed process would be).
	w.start()
	w.settle()
	if n := len(w.node.Started()); n != 1 {
		t.Errorf("s3fs started after restart: %d in total, want 1 (adopted, not re-bridged)", n)
	}
	if n := len(w.node.Table().Stack(target)); n != 2 {
		t.Errorf("target stack %d, want 2 (no stacking)", n)
	}
	if got := value(t, w.r.Metrics().BridgesActive); got != 1 {
		t.Errorf("bridges active after adoption %v, want 1", got)
	}

	// The pod goes: the adopted bridge is detached, its s3fs exits by itself (nothing holds a
	// file on it), record and cgroup removed.
	w.view.DeletePod("default", "app")
	w.waitFor("adopted bridge retired", func() bool {
		_, _, rec := w.node.File(l.BridgeRecordFile("pv-a"))
		_, cg := w.node.Cgroup(group)
		return proc.Exited() && !rec && !cg && len(w.node.Table().Stack(target)) == 0
	})
}

// A record whose process is gone and whose staging mount is dead is dropped at start; a record
// naming a pid that is now another process is never used to signal it.
func TestBridgeRecordsOfDeadBridgesDropped(t *testing.T) {
	l := Layout{StateDir: testState}
	w := newWorld(t)
	w.bridgeCgroup = "pvrescue/s3"
	w.node.AddMount(l.Staging("pv-old"), "fuse", stack.FSName("pv-old"))
	w.node.KillMount(l.Staging("pv-old"))
	rec, _ := json.Marshal(BridgeRecord{Proc: ProcID{Pid: 4242, StartTime: 1}, Cgroup: "pvrescue/s3/pv-old-4242"})
	w.node.SetFile(l.BridgeRecordFile("pv-old"), rec)
	rec2, _ := json.Marshal(BridgeRecord{Proc: ProcID{Pid: 4343, StartTime: 1}})
	w.node.SetFile(l.BridgeRecordFile("pv-gone"), rec2)
	w.start()
	for _, pv := range []string{"pv-old", "pv-gone"} {
		if _, _, ok := w.node.File(l.BridgeRecordFile(pv)); ok {
			t.Errorf("record of dead bridge %s kept", pv)
		}
	}
	if w.node.Table().IsMountPoint(l.Staging("pv-old")) {
		t.Error("dead staging mount kept")
	}
}

// A cgroup v1 container's view (its own cgroup bound at each hierarchy) and the host's.
func TestParseCgroupMounts(t *testing.T) {
	const ctr = `454 453 0:56 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
478 454 0:29 /kubepods/pod1/c1 /sys/fs/cgroup/cpu rw,nosuid shared:16 - cgroup cgroup rw,cpu
481 454 0:32 /kubepods/pod1/c1 /sys/fs/cgroup/memory rw,nosuid shared:19 - cgroup cgroup rw,memory
486 454 0:37 /kubepods/pod1/c1 /sys/fs/cgroup/systemd rw,nosuid shared:26 - cgroup cgroup rw,name=systemd
487 454 0:38 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
488 454 0:29 /kubepods/pod1/c1 /mnt/cpu-again rw - cgroup cgroup rw,cpu
489 487 0:38 /kubepods/pod1/c1 /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
`
	got := ParseCgroupMounts(ctr)
	want := []CgroupMount{
		{Root: "/kubepods/pod1/c1", MountPoint: "/sys/fs/cgroup/cpu", FSType: "cgroup", Options: []string{"cpu"}},
		{Root: "/kubepods/pod1/c1", MountPoint: "/sys/fs/cgroup/memory", FSType: "cgroup", Options: []string{"memory"}},
		{Root: "/kubepods/pod1/c1", MountPoint: "/sys/fs/cgroup/systemd", FSType: "cgroup", Options: []string{"name=systemd"}},
		// covered by a bind of the container's group: the top one counts
		{Root: "/kubepods/pod1/c1", MountPoint: "/sys/fs/cgroup/unified", FSType: "cgroup2"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i].Root != want[i].Root || got[i].MountPoint != want[i].MountPoint || got[i].FSType != want[i].FSType ||
			!slices.Equal(got[i].Options, want[i].Options) {
			t.Errorf("[%d] got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// F8: a bridge's s3fs starts in the configured network namespace (the node's); when that cannot
// be joined, in our parent's (the shim's, on the node's network), and when that fails too still
// in the agent's, and the volume is bridged.
func TestBridgeNetNS(t *testing.T) {
	parent := fmt.Sprintf("/proc/%d/ns/net", os.Getppid())
	for _, c := range []struct {
		name   string
		denied func(string) bool
		want   string
	}{
		{"init's", nil, "/proc/1/ns/net"},
		{"parent's", func(ns string) bool { return ns == "/proc/1/ns/net" }, parent},
		{"ours", func(string) bool { return true }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, standard(false)...)
			w.bridgeNetNS = "/proc/1/ns/net"
			w.node.NetNSDenied = c.denied
			target := w.publish("uid-1", "pv-a")
			w.node.KillMount(target)
			w.start()
			w.waitFor("bridged", func() bool { return len(w.node.Table().Stack(target)) == 2 })
			specs := w.node.Specs()
			if len(specs) != 1 || specs[0].NetNS != c.want {
				t.Fatalf("started %+v, want one s3fs in network namespace %q", specs, c.want)
			}
		})
	}
}
