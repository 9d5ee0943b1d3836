package s3mount

import (
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

// issue 32 item 4: a bridge whose statfs times out is busy, not dead. An agent restart while it
// hangs adopts it: its s3fs is not signalled, its mount stays, no second s3fs starts.
func TestBusyBridgeAdoptedNotKilled(t *testing.T) {
	l := s3fs.Layout{StateDir: testState}
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("bridged", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	proc := w.node.Processes()[0]
	w.node.Hang(l.MountPoint("pv-a"))

	w.start() // the agent restarts: Prepare adopts what the earlier one left
	w.settle()
	if proc.Exited() {
		t.Fatal("the busy bridge's s3fs was stopped on a statfs timeout")
	}
	if n := len(w.node.Table().Stack(l.MountPoint("pv-a"))); n != 1 {
		t.Errorf("bridge mount: %d mounts at %s, want 1 (never unmounted for a timeout)", n, l.MountPoint("pv-a"))
	}
	if n := len(w.node.Started()); n != 1 {
		t.Errorf("s3fs started %d times, want 1 (adopted, no second writer)", n)
	}
	if got := value(t, w.r.Metrics().BridgesActive); got != 1 {
		t.Errorf("bridges_active = %v, want 1 (adopted)", got)
	}
}

// A second pod of a bridged PV loses its mount while the bridge hangs: Ensure finds the bridge
// busy and leaves it (ErrBridgeBusy), never stopping it to start another.
func TestBusyBridgeNotRestartedByEnsure(t *testing.T) {
	l := s3fs.Layout{StateDir: testState}
	objs := append(standard(false), podObj("app2", "uid-2", "data", false))
	w := newWorld(t, objs...)
	t1 := w.publish("uid-1", "pv-a")
	t2 := w.publish("uid-2", "pv-a")
	w.node.KillMount(t1)
	w.start()
	w.waitFor("first target bridged", func() bool { return len(w.node.Table().Stack(t1)) == 2 })
	proc := w.node.Processes()[0]
	w.node.Hang(l.MountPoint("pv-a"))
	w.node.KillMount(t2)
	w.settle()
	if proc.Exited() {
		t.Fatal("the busy bridge's s3fs was stopped by Ensure on a statfs timeout")
	}
	if n := len(w.node.Started()); n != 1 {
		t.Errorf("s3fs started %d times, want 1", n)
	}
	if n := len(w.node.Table().Stack(l.MountPoint("pv-a"))); n != 1 {
		t.Errorf("bridge mount: %d mounts, want 1", n)
	}
}
