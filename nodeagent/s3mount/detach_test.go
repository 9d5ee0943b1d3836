package s3mount

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

func TestBridgeCgroupAndOptions(t *testing.T) {
	if got := s3fs.BridgeCgroup("pvrescue/s3", "pv-a", 42); got != "pvrescue/s3/pv-a-42" {
		t.Errorf("BridgeCgroup = %q", got)
	}
	if got := s3fs.BridgeCgroup("", "pv-a", 42); got != "" {
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

// bridgedInCgroups is a node whose one pod's target (returned) of pv-a died and was bridged, the
// bridge's s3fs placed under the cgroup pvrescue/s3.
func bridgedInCgroups(t *testing.T) (*world, string) {
	t.Helper()
	w := newWorld(t, standard(false)...)
	w.bridgeCgroup = "pvrescue/s3"
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bridged", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	return w, target
}

// The bridge's group, and all bridges' parent, get the configured limits before s3fs is placed in
// it (s3.bridgeLimits), and the levels above none: only the kernel's default CPU weight.
func TestBridgeCgroupLimited(t *testing.T) {
	w := newWorld(t, standard(false)...)
	w.bridgeCgroup = "pvrescue/s3"
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bridged", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	group := s3fs.BridgeCgroup("pvrescue/s3", "pv-a", w.node.Processes()[0].Pid())
	want := map[string]s3fs.Limits{
		"pvrescue":    {},
		"pvrescue/s3": {CPUMillis: 1500, MemoryBytes: 1 << 30},
		group:         {CPUMillis: 1000, MemoryBytes: 512 << 20},
	}
	for g, l := range want {
		if got, ok := w.node.Limits(g); !ok || got != l {
			t.Errorf("limits of %s = %+v (set: %v), want %+v", g, got, ok, l)
		}
	}
}

// An agent restart while a bridge serves a pod: the new restorer adopts the recorded process (no
// second s3fs, no second bind), supervises it, and retires it cleanly when the pod goes.
func TestBridgeAdoptedAcrossAgentRestart(t *testing.T) {
	l := s3fs.Layout{StateDir: testState}
	w, target := bridgedInCgroups(t)

	specs := w.node.Specs()
	if len(specs) != 1 {
		t.Fatalf("started %d processes, want 1", len(specs))
	}
	if s := specs[0]; s.LogFile != l.LogFile("pv-a") || s.Dir != l.Root() || !slices.Contains(s.Env, "TMPDIR="+l.TmpDir("pv-a")) {
		t.Errorf("spec %+v: want log %s, dir %s, TMPDIR %s (all in the state dir)", s, l.LogFile("pv-a"), l.Root(), l.TmpDir("pv-a"))
	}
	proc := w.node.Processes()[0]
	group := s3fs.BridgeCgroup("pvrescue/s3", "pv-a", proc.Pid())
	if pids, _ := w.node.Cgroup(group); !slices.Equal(pids, []int{proc.Pid()}) {
		t.Errorf("cgroup %s holds %v, want [%d]", group, pids, proc.Pid())
	}
	data, _, ok := w.node.File(l.BridgeRecordFile("pv-a"))
	var rec s3fs.BridgeRecord
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
		return proc.Exited() && !rec && !cg && leftForTheDriver(w, target)
	})
	strictUnpublish(t, w, target)
}

// At start the agent removes the bridge groups no bridge uses (left by agents that were gone when
// their s3fs exited), and only those: never the adopted bridge's group, one that still has a
// process, nor a group whose name is not one of ours.
func TestUnusedBridgeCgroupsRemovedAtStart(t *testing.T) {
	w, _ := bridgedInCgroups(t)
	proc := w.node.Processes()[0]
	live := s3fs.BridgeCgroup("pvrescue/s3", "pv-a", proc.Pid())

	stale := []string{"pvrescue/s3/pv-a-777", "pvrescue/s3/pv-gone-4242"}
	for _, g := range stale {
		w.node.AddCgroup(g)
	}
	populated := "pvrescue/s3/pv-other-888" // a process runs in it, no record names it
	if err := w.node.Cgroups().Place(proc.Pid(), populated); err != nil {
		t.Fatal(err)
	}
	notOurs := []string{"pvrescue/s3/keep", "pvrescue/s3/pv-x-0", "pvrescue/elsewhere-12"}
	for _, g := range notOurs {
		w.node.AddCgroup(g)
	}

	w.start() // the agent restarts
	w.settle()
	for _, g := range stale {
		if _, ok := w.node.Cgroup(g); ok {
			t.Errorf("unused bridge cgroup %s kept", g)
		}
	}
	for _, g := range append([]string{live, populated}, notOurs...) {
		if _, ok := w.node.Cgroup(g); !ok {
			t.Errorf("cgroup %s removed", g)
		}
	}
	if n := len(w.node.Started()); n != 1 {
		t.Errorf("s3fs started %d times, want 1 (the bridge adopted)", n)
	}
}

// A record whose process is gone and whose bridge mount is dead is dropped at start; a record
// naming a pid that is now another process is never used to signal it.
func TestBridgeRecordsOfDeadBridgesDropped(t *testing.T) {
	l := s3fs.Layout{StateDir: testState}
	w := newWorld(t)
	w.bridgeCgroup = "pvrescue/s3"
	w.node.AddMount(l.MountPoint("pv-old"), "fuse", stack.FSName("pv-old"))
	w.node.KillMount(l.MountPoint("pv-old"))
	rec, _ := json.Marshal(s3fs.BridgeRecord{Proc: s3fs.ProcID{Pid: 4242, StartTime: 1}, Cgroup: "pvrescue/s3/pv-old-4242"})
	w.node.SetFile(l.BridgeRecordFile("pv-old"), rec)
	rec2, _ := json.Marshal(s3fs.BridgeRecord{Proc: s3fs.ProcID{Pid: 4343, StartTime: 1}})
	w.node.SetFile(l.BridgeRecordFile("pv-gone"), rec2)
	w.start()
	for _, pv := range []string{"pv-old", "pv-gone"} {
		if _, _, ok := w.node.File(l.BridgeRecordFile(pv)); ok {
			t.Errorf("record of dead bridge %s kept", pv)
		}
	}
	if w.node.Table().IsMountPoint(l.MountPoint("pv-old")) {
		t.Error("dead bridge mount kept")
	}
}

// A bridge's s3fs starts in the configured network namespace (the node's); when that cannot
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

// Once a bridge started in a fallback network namespace, the next bridge starts there at once:
// the refused namespace is not tried again at every incident (each try cost up to 14 ms of the
// pods' window and an error in the log).
func TestBridgeNetNSRemembersTheOneThatWorked(t *testing.T) {
	parent := fmt.Sprintf("/proc/%d/ns/net", os.Getppid())
	w := newWorld(t, standard(false)...)
	w.bridgeNetNS = "/proc/1/ns/net"
	w.node.NetNSDenied = func(ns string) bool { return ns == "/proc/1/ns/net" }
	var mu sync.Mutex
	var tried []string
	w.node.BeforeStart = func(spec s3fs.ProcSpec) {
		mu.Lock()
		defer mu.Unlock()
		tried = append(tried, spec.NetNS)
	}
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bridged", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	// The bridge's daemon dies: the next incident starts another bridge.
	w.node.KillMount(s3fs.Layout{StateDir: testState}.MountPoint("pv-a"))
	w.waitFor("bridged again", func() bool { return len(w.node.Specs()) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"/proc/1/ns/net", parent, parent}; !slices.Equal(tried, want) {
		t.Errorf("network namespaces tried by the two bridges: %q, want %q", tried, want)
	}
}
