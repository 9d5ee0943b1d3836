package s3mount

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/nodeagent"

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
// request behind the pods' own reads), and the record of what the agent put where is written
// once, after the binds, not rewritten whole per target.
func TestBridgePassAsksTheBridgeAndWritesTheRecordOnce(t *testing.T) {
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
	if writes1 != 1 || writes8 != 1 {
		t.Errorf("writes of the record of placed mounts: %d with 1 dead target, %d with 8; want 1 each", writes1, writes8)
	}
}

// A bridge pass reads the node's mount table a fixed number of times however many targets it
// binds (stack.Snapshot): each read is every mount on the node under the kernel's mount lock,
// and reading it per target made a pass O(targets × mounts).
func TestBridgePassReadsTheTableAFixedNumberOfTimes(t *testing.T) {
	readsInPass := func(pods int) int {
		w, targets := deadPodsWorld(t, pods)
		w.replacer = &beneathReplacer{node: w.node}
		w.start()
		requireBridged(t, w, targets)
		return w.node.TableReads()
	}
	if one, eight := readsInPass(1), readsInPass(8); one != eight {
		t.Errorf("mount tables read by a check and its bridge pass: %d with 1 dead target, %d with 8; want the same", one, eight)
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

// A bridge pass moves a pod's containers onto its target's live mount while it binds the next
// targets: a pod's application reads through its containers, and with the containers moved
// only after every bind, the last of 100 pods waited for all the binds and then all the other
// pods' containers. Here each bind after the first waits until the first pod's containers were
// asked about; a pass that remounts only after its binds has them wait out the timeout.
func TestBridgePassRemountsContainersWhileItBinds(t *testing.T) {
	const pods = 4
	w, targets := deadPodsWorld(t, pods)
	firstAsked := make(chan struct{})
	var once sync.Once
	w.remount = &fakeRemounter{before: func(nodeagent.RemountRequest) { once.Do(func() { close(firstAsked) }) }}
	gate := &gatedReplacer{inner: &beneathReplacer{node: w.node}, open: firstAsked, wait: 5 * time.Second}
	w.replacer = gate
	w.start()
	requireBridged(t, w, targets)
	if gate.calls != pods {
		t.Fatalf("replacements: %d, want one per target (%d)", gate.calls, pods)
	}
	if gate.timedOut > 0 {
		t.Errorf("%d of %d binds after the first waited %s and still no container had been remounted: containers are remounted only after every bind", gate.timedOut, pods-1, gate.wait)
	}
	if got := len(w.remount.reqs); got != pods {
		t.Errorf("container remount requests: %d, want one per pod (%d)", got, pods)
	}
}

// gatedReplacer holds every replacement after the first until open is closed (or wait passed,
// counted in timedOut).
type gatedReplacer struct {
	inner    stack.Replacer
	open     <-chan struct{}
	wait     time.Duration
	calls    int
	timedOut int
}

func (g *gatedReplacer) Replace(source, target string, old int, readOnly, noPeerGroup bool, table stack.Table) (mountreplace.Result, error) {
	g.calls++
	if g.calls > 1 {
		select {
		case <-g.open:
		case <-time.After(g.wait):
			g.timedOut++
		}
	}
	return g.inner.Replace(source, target, old, readOnly, noPeerGroup, table)
}
