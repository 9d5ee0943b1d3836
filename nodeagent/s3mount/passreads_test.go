package s3mount

import (
	"fmt"
	"sync"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// A pass over many dead targets of a PV reads the node's mount table once for its bridgeable
// checks, not once per target: with 100 pods on one claim those reads, each a walk of every
// mount on the node under the kernel's mount lock, came before the bridge's s3fs could start.
func TestBridgeChecksReadTheTableOnce(t *testing.T) {
	readsBeforeBridge := func(pods int) int {
		w, targets := deadPodsWorld(t, pods)
		var mu sync.Mutex
		reads := -1
		w.node.BeforeStart = func(s3fs.ProcSpec) {
			mu.Lock()
			defer mu.Unlock()
			if reads < 0 {
				reads = w.node.TableReads()
			}
		}
		w.start()
		requireBridged(t, w, targets)
		mu.Lock()
		defer mu.Unlock()
		if reads < 0 {
			t.Fatalf("%d pods: no s3fs was started", pods)
		}
		return reads
	}
	one, eight := readsBeforeBridge(1), readsBeforeBridge(8)
	if eight != one {
		t.Errorf("mount tables read before the bridge's s3fs started: %d with 1 dead target, %d with 8; want the same", one, eight)
	}
}

// A pass binds its one bridge mount over each dead target: the bridge's daemon is asked
// whether it answers once per pass, not once or twice per target (each ask queues a FUSE
// request behind the pods' own reads). The record of what the agent put where is written at
// each bind: holding it for one write after the binds (Placed.Hold) was removed (issue 52: the
// ablation bench found it inside the run-to-run spread at 20 and 100 pods), so 8 binds write it
// 8 times.
func TestBridgePassAsksTheBridgeOnceAndWritesTheRecordPerBind(t *testing.T) {
	perPass := func(pods int) (bridgeStatfs, recordWrites int) {
		w, targets := deadPodsWorld(t, pods)
		w.replacer = &beneathReplacer{node: w.node}
		bridge := s3fs.Layout{StateDir: testState}.MountPoint("pv-a")
		var mu sync.Mutex
		w.node.BeforeStatfs = func(path string) {
			mu.Lock()
			defer mu.Unlock()
			if path == bridge {
				bridgeStatfs++
			}
		}
		w.start()
		requireBridged(t, w, targets)
		mu.Lock()
		defer mu.Unlock()
		return bridgeStatfs, w.node.FileWrites(testState + "/s3/handed.json")
	}
	statfs1, writes1 := perPass(1)
	statfs8, writes8 := perPass(8)
	if statfs8 != statfs1 {
		t.Errorf("statfs of the bridge's mount in a pass: %d with 1 dead target, %d with 8; want the same", statfs1, statfs8)
	}
	if writes1 != 1 || writes8 != 8 {
		t.Errorf("writes of the record of placed mounts: %d with 1 dead target, %d with 8; want one per bind (1 and 8)", writes1, writes8)
	}
}

// A bridge pass reads the node's mount table once per bind (the check before each bind, in
// stack.Rules.Cover), on top of the fixed reads of its check and its bridgeable checks. A pass
// snapshot that shared one read between the binds was removed (issue 52: the ablation bench
// found it inside the run-to-run spread at 20 and 100 pods), so 8 targets read 7 tables more
// than 1 does.
func TestBridgePassReadsTheTableOncePerBind(t *testing.T) {
	readsInPass := func(pods int) int {
		w, targets := deadPodsWorld(t, pods)
		w.replacer = &beneathReplacer{node: w.node}
		w.start()
		requireBridged(t, w, targets)
		return w.node.TableReads()
	}
	// The check's own retire step (retireUnusedBridges) reads the table once when the pass
	// goroutine has already ended, and skips the PV while it is in flight: a race between the two,
	// as likely with 1 target as with 8, so give or take one.
	if one, eight := readsInPass(1), readsInPass(8); eight-one < 6 || eight-one > 8 {
		t.Errorf("mount tables read by a check and its bridge pass: %d with 1 dead target, %d with 8; want one more per bind (7), give or take the retire step's one", one, eight)
	}
}

// deadPodsWorld is a node with pods pods on claim data of PV pv-a, their targets dead.
func deadPodsWorld(t *testing.T, pods int) (*world, []string) {
	t.Helper()
	objs := standard(false)
	for i := 2; i <= pods; i++ {
		objs = append(objs, podObj(fmt.Sprintf("app%d", i), fmt.Sprintf("uid-%d", i), "data", false))
	}
	w := newWorld(t, objs...)
	var targets []string
	for i := 1; i <= pods; i++ {
		target := w.publish(fmt.Sprintf("uid-%d", i), "pv-a")
		w.node.KillMount(target)
		targets = append(targets, target)
	}
	return w, targets
}

// requireBridged fails the test unless our bridge is the top at every target.
func requireBridged(t *testing.T, w *world, targets []string) {
	t.Helper()
	for _, p := range targets {
		if top, _ := w.node.Table().Top(p); top.Source != stack.FSName("pv-a") {
			t.Fatalf("%d pods: top at %s is %+v after the pass, want our bridge", len(targets), p, top)
		}
	}
}
