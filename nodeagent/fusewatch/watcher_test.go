package fusewatch

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// fakeOS is a mount table, a process table and an event source under the test's control.
type fakeOS struct {
	mu      sync.Mutex
	conns   map[Connection][]Mount
	holders []Holder
	walks   int
	reads   int // of the mount table
	ev      *fakeEvents
}

func (f *fakeOS) connectionReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func newFakeOS() *fakeOS {
	return &fakeOS{conns: map[Connection][]Mount{}, ev: &fakeEvents{ch: make(chan Event, 16), watched: map[int]bool{}, dead: map[int]bool{}}}
}

func (f *fakeOS) Connections() (map[Connection][]Mount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	out := map[Connection][]Mount{}
	for c, m := range f.conns {
		out[c] = append([]Mount(nil), m...)
	}
	return out, nil
}

func (f *fakeOS) Holders() ([]Holder, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.walks++
	return append([]Holder(nil), f.holders...), nil
}

func (f *fakeOS) Events() (Events, error) { return f.ev, nil }

// set lays out the mount table (each mount point of a connection keeps one mountinfo ID) and the
// holders.
func (f *fakeOS) set(conns map[Connection][]string, holders ...Holder) {
	mounts := map[Connection][]Mount{}
	for c, points := range conns {
		for i, p := range points {
			mounts[c] = append(mounts[c], Mount{ID: int(c)*100 + i, Point: p})
		}
	}
	f.setMounts(mounts, holders...)
}

// setMounts is set with the mountinfo IDs given.
func (f *fakeOS) setMounts(conns map[Connection][]Mount, holders ...Holder) {
	f.mu.Lock()
	f.conns, f.holders = conns, holders
	f.mu.Unlock()
}

func (f *fakeOS) walkCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.walks
}

type fakeEvents struct {
	ch      chan Event
	mu      sync.Mutex
	watched map[int]bool
	dead    map[int]bool
}

func (e *fakeEvents) Add(pid int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead[pid] {
		return ErrExited
	}
	e.watched[pid] = true
	return nil
}

func (e *fakeEvents) Remove(pid int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead[pid] {
		return true
	}
	delete(e.watched, pid)
	return false
}

func (e *fakeEvents) Wait(ctx context.Context) (Event, error) {
	select {
	case ev := <-e.ch:
		return ev, nil
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

func (e *fakeEvents) Close() error { return nil }

func (e *fakeEvents) pids() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []int
	for p := range e.watched {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// kill reports pid's exit the way the real source does: once, and no longer watched.
func (e *fakeEvents) kill(pid int) {
	e.mu.Lock()
	delete(e.watched, pid)
	e.dead[pid] = true
	e.mu.Unlock()
	e.ch <- Event{Exited: []int{pid}}
}

func start(t *testing.T, fos *fakeOS, opts Options) (*Watcher, chan Exit) {
	t.Helper()
	exits := make(chan Exit, 16)
	opts.OnExit = func(x Exit) { exits <- x }
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	w, err := New(fos, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return w, exits
}

func waitPIDs(t *testing.T, e *fakeEvents, want ...int) {
	t.Helper()
	testenv.WaitFor(t, 5*time.Second, "watched pids", func() error {
		if got := e.pids(); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("watching %v, want %v", got, want)
		}
		return nil
	})
}

func wakeWithin(t *testing.T, w *Watcher, d time.Duration) {
	t.Helper()
	select {
	case <-w.Wake():
	case <-time.After(d):
		t.Fatal("no wake")
	}
}

// The holders of mounted connections are watched (not other /dev/fuse holders); an exit wakes
// the consumer once with the daemon's mount points; unknown-connection holders are watched
// whatever they serve; a rescan drops holders whose connection was unmounted.
func TestWatcherWatchesHoldersOfMountedConnections(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	fos := newFakeOS()
	fos.set(map[Connection][]string{39: {"/mnt/a"}, 40: {"/mnt/b", "/pods/b"}},
		Holder{PID: 100, Connections: []Connection{39}},
		Holder{PID: 101, Connections: []Connection{40}},
		Holder{PID: 102, Connections: []Connection{77}}, // serves nothing mounted here
	)
	w, exits := start(t, fos, Options{Clock: clk, RescanInterval: time.Hour})
	waitPIDs(t, fos.ev, 100, 101)

	fos.set(map[Connection][]string{39: {"/mnt/a"}}, Holder{PID: 100, Connections: []Connection{39}}, Holder{PID: 102, Connections: []Connection{77}})
	fos.ev.kill(101)
	wakeWithin(t, w, 5*time.Second)
	x := <-exits
	if x.PID != 101 || !reflect.DeepEqual(x.MountPoints, []string{"/mnt/b", "/pods/b"}) {
		t.Fatalf("exit = %+v", x)
	}
	waitPIDs(t, fos.ev, 100)
	select {
	case <-w.Wake():
		t.Fatal("a second wake for one exit")
	default:
	}

	// A descriptor that names no connection on a kernel that names them (a tenant's plain file at
	// /dev/fuse in its own mount namespace): no holder, never watched.
	fos.set(map[Connection][]string{39: {"/mnt/a"}}, Holder{PID: 100, Connections: []Connection{39}}, Holder{PID: 103, Unnamed: true})
	fos.ev.ch <- Event{MountsChanged: true} // same connections: no walk
	n := fos.walkCount()
	testenv.WaitFor(t, 5*time.Second, "the slow rescan", testenv.Until(clk.HasWaiters))
	clk.Step(time.Hour)
	testenv.WaitFor(t, 5*time.Second, "a walk", testenv.Until(func() bool { return fos.walkCount() > n }))
	waitPIDs(t, fos.ev, 100)

	// Unmounted: nothing to watch.
	fos.set(map[Connection][]string{}, Holder{PID: 100, Connections: []Connection{39}})
	fos.ev.ch <- Event{MountsChanged: true}
	testenv.WaitFor(t, 5*time.Second, "no pid watched", func() error {
		clk.Step(10 * time.Millisecond)
		if got := fos.ev.pids(); len(got) != 0 {
			return fmt.Errorf("watching %v", got)
		}
		return nil
	})
}

// An unmount (the dead mounts detached at the end of a bridge pass) lets go of the holders of what
// went without walking every process; a holder that still runs is reported as an exit, as a walk
// reports it (at worst one extra check).
func TestWatcherUnmountNeedsNoWalk(t *testing.T) {
	fos := newFakeOS()
	fos.set(map[Connection][]string{39: {"/mnt/a"}, 40: {"/mnt/b"}},
		Holder{PID: 100, Connections: []Connection{39}}, Holder{PID: 101, Connections: []Connection{40}})
	w, exits := start(t, fos, Options{RescanInterval: time.Hour})
	waitPIDs(t, fos.ev, 100, 101)
	walks := fos.walkCount()
	fos.set(map[Connection][]string{39: {"/mnt/a"}}, Holder{PID: 100, Connections: []Connection{39}}, Holder{PID: 101, Connections: []Connection{40}})
	fos.ev.ch <- Event{MountsChanged: true}
	waitPIDs(t, fos.ev, 100)
	if n := fos.walkCount(); n != walks {
		t.Errorf("%d walks of the processes for an unmount, want none", n-walks)
	}
	select {
	case x := <-exits:
		if x.PID != 101 || len(x.MountPoints) != 0 {
			t.Errorf("exit %+v, want pid 101 with no mount point left", x)
		}
	case <-time.After(5 * time.Second):
		t.Error("the unmounted connection's holder was let go unreported")
	}
	wakeWithin(t, w, 5*time.Second)
	// A new connection is walked for as before.
	fos.set(map[Connection][]string{39: {"/mnt/a"}, 41: {"/mnt/c"}}, Holder{PID: 100, Connections: []Connection{39}}, Holder{PID: 102, Connections: []Connection{41}})
	fos.ev.ch <- Event{MountsChanged: true}
	waitPIDs(t, fos.ev, 100, 102)
}

// Every mount table change (a bridge pass binding 100 targets makes hundreds) is read at once.
// Reading a burst once per MountSettle was removed (issue 52: the ablation bench found it
// inside the run-to-run spread at 20 and 100 pods). One change at a time, each waited for: the
// event source may merge changes that queue up on a loaded machine (37 reads for 51 changes
// sent at once, 1e657d2), which says nothing of the watcher.
func TestWatcherReadsTheTableOnEveryChange(t *testing.T) {
	fos := newFakeOS()
	fos.set(map[Connection][]string{39: {"/mnt/a"}}, Holder{PID: 100, Connections: []Connection{39}})
	start(t, fos, Options{RescanInterval: time.Hour})
	waitPIDs(t, fos.ev, 100)
	reads := fos.connectionReads()
	for i := 1; i <= 20; i++ {
		fos.ev.ch <- Event{MountsChanged: true}
		deadline := time.Now().Add(5 * time.Second)
		for fos.connectionReads() < reads+i {
			if time.Now().After(deadline) {
				t.Fatalf("change %d not read within 5 s (%d reads since the first)", i, fos.connectionReads()-reads)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// A change that mounts a new connection is read and its holder watched.
	fos.set(map[Connection][]string{39: {"/mnt/a"}, 40: {"/mnt/b"}}, Holder{PID: 100, Connections: []Connection{39}}, Holder{PID: 101, Connections: []Connection{40}})
	fos.ev.ch <- Event{MountsChanged: true}
	waitPIDs(t, fos.ev, 100, 101)
}

// A connection mounted before its daemon holds the descriptor (fusermount hands it over) is
// walked again soon, with backoff, until a holder shows up; a holder that is gone by the time
// it is watched counts as an exit.
func TestWatcherRetriesOrphanConnections(t *testing.T) {
	fos := newFakeOS()
	w, _ := start(t, fos, Options{RescanInterval: time.Hour, OrphanRetry: 5 * time.Millisecond, MaxOrphanRetry: 40 * time.Millisecond})
	fos.set(map[Connection][]string{41: {"/mnt/c"}}) // mounted, descriptor in flight
	fos.ev.ch <- Event{MountsChanged: true}
	testenv.WaitFor(t, 5*time.Second, "retries", testenv.Until(func() bool { return fos.walkCount() >= 3 }))
	fos.set(map[Connection][]string{41: {"/mnt/c"}}, Holder{PID: 200, Connections: []Connection{41}})
	waitPIDs(t, fos.ev, 200)

	// Retries stop once they reach the maximum (a dead mount stays without a holder).
	fos.set(map[Connection][]string{42: {"/mnt/d"}})
	fos.ev.ch <- Event{MountsChanged: true}
	time.Sleep(300 * time.Millisecond)
	n := fos.walkCount()
	time.Sleep(200 * time.Millisecond)
	if m := fos.walkCount(); m != n {
		t.Fatalf("walks went on (%d → %d) after the retries' maximum", n, m)
	}

	fos.ev.dead[300] = true
	fos.set(map[Connection][]string{43: {"/mnt/e"}}, Holder{PID: 300, Connections: []Connection{43}})
	fos.ev.ch <- Event{MountsChanged: true}
	wakeWithin(t, w, 5*time.Second)
}

func TestOptionsValidate(t *testing.T) {
	if err := (Options{RescanInterval: -1}).Validate(); err == nil {
		t.Fatal("negative interval accepted")
	}
	if err := (Options{OrphanRetry: -1}).Validate(); err == nil {
		t.Fatal("negative OrphanRetry accepted")
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("nil OS accepted")
	}
}

// Two daemons die together (a plugin pod's s3fs processes): the walk after the first exit finds
// the second mid-exit — its descriptors closed, its pidfd not yet readable — and reports it as an
// exit instead of dropping it unseen.
func TestWatcherReportsAHolderThatLetGoAsAnExit(t *testing.T) {
	fos := newFakeOS()
	conns := map[Connection][]string{39: {"/mnt/a"}, 41: {"/mnt/b"}}
	fos.set(conns, Holder{PID: 100, Connections: []Connection{39}}, Holder{PID: 101, Connections: []Connection{41}})
	w, exits := start(t, fos, Options{RescanInterval: time.Hour})
	waitPIDs(t, fos.ev, 100, 101)

	fos.set(conns) // 101 no longer holds /dev/fuse, and its exit is not reported (yet)
	fos.ev.kill(100)
	got := map[int][]string{}
	for len(got) < 2 {
		select {
		case x := <-exits:
			got[x.PID] = x.MountPoints
		case <-time.After(5 * time.Second):
			t.Fatalf("exits reported: %v, want 100 and 101", got)
		}
	}
	if !reflect.DeepEqual(got, map[int][]string{100: {"/mnt/a"}, 101: {"/mnt/b"}}) {
		t.Fatalf("exits = %v", got)
	}
	wakeWithin(t, w, 5*time.Second)
	waitPIDs(t, fos.ev)
}

func noWakeWithin(t *testing.T, w *Watcher, d time.Duration, why string) {
	t.Helper()
	select {
	case <-w.Wake():
		t.Fatalf("a wake: %s", why)
	case <-time.After(d):
	}
}

// A daemon that dies before any walk saw it hold its descriptor (killed just after its mount)
// has no pidfd to report its exit: the walk that finds its connection mounted without a holder
// wakes the consumer. Before, nothing did, and the rescue waited for its periodic check (a
// bench incident waited 58 s).
func TestWatcherWakesForAConnectionWhoseDaemonDiedUnwatched(t *testing.T) {
	fos := newFakeOS()
	fos.set(map[Connection][]string{39: {"/mnt/a"}}, Holder{PID: 100, Connections: []Connection{39}})
	w, _ := start(t, fos, Options{RescanInterval: time.Hour})
	waitPIDs(t, fos.ev, 100)
	noWakeWithin(t, w, 100*time.Millisecond, "every connection is held")

	// The replay's new daemon mounted 40 and was killed before the mount change was read.
	fos.set(map[Connection][]string{39: {"/mnt/a"}, 40: {"/mnt/b"}}, Holder{PID: 100, Connections: []Connection{39}})
	fos.ev.ch <- Event{MountsChanged: true}
	wakeWithin(t, w, 5*time.Second)
}

// A descriptor in flight at one walk (no holder yet) whose daemon takes it and dies before the
// next retry walk is told at that retry; once the retries run out the dead connection wakes no
// one again (a dead mount waits for the rescue without costing it a check at every walk).
func TestWatcherWakesAtEachRetryUntilTheRetriesRunOut(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	fos := newFakeOS()
	w, _ := start(t, fos, Options{Clock: clk, RescanInterval: time.Hour, OrphanRetry: 50 * time.Millisecond, MaxOrphanRetry: 100 * time.Millisecond})
	fos.set(map[Connection][]string{41: {"/mnt/c"}}) // mounted, descriptor in flight
	fos.ev.ch <- Event{MountsChanged: true}
	wakeWithin(t, w, 5*time.Second)
	walks := fos.walkCount()
	// The daemon took the descriptor and died between the walks: the retry still finds none.
	for i, step := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
		testenv.WaitFor(t, 5*time.Second, "the retry timer", testenv.Until(func() bool { return clk.HasWaiters() }))
		clk.Step(step)
		testenv.WaitFor(t, 5*time.Second, "a retry walk", testenv.Until(func() bool { return fos.walkCount() > walks }))
		walks = fos.walkCount()
		wakeWithin(t, w, 5*time.Second)
		t.Logf("retry %d woke the consumer", i+1)
	}
	// Retries over (100ms doubled is past MaxOrphanRetry): the slow rescan walks, no wake.
	clk.Step(time.Hour)
	testenv.WaitFor(t, 5*time.Second, "the rescan walk", testenv.Until(func() bool { return fos.walkCount() > walks }))
	noWakeWithin(t, w, 100*time.Millisecond, "a settled dead connection woke the consumer again")
}

// The kernel gives a new FUSE mount the lowest free connection number: a dead connection
// detached and a new one mounted under its number between two reads of the mount table looks
// like the same connection. Its new mount (a mountinfo ID it did not have) makes the watcher
// walk, so the new daemon is watched and its death wakes the consumer.
func TestWatcherWatchesANewDaemonOnAReusedConnectionNumber(t *testing.T) {
	fos := newFakeOS()
	fos.setMounts(map[Connection][]Mount{39: {{ID: 500, Point: "/stage"}}}, Holder{PID: 100, Connections: []Connection{39}})
	w, _ := start(t, fos, Options{RescanInterval: time.Hour})
	waitPIDs(t, fos.ev, 100)
	fos.setMounts(map[Connection][]Mount{39: {{ID: 500, Point: "/stage"}}})
	fos.ev.kill(100)
	wakeWithin(t, w, 5*time.Second)
	waitPIDs(t, fos.ev)

	// Detached, and mounted again by the driver's next daemon under number 39.
	fos.setMounts(map[Connection][]Mount{39: {{ID: 512, Point: "/stage"}}}, Holder{PID: 200, Connections: []Connection{39}})
	fos.ev.ch <- Event{MountsChanged: true}
	waitPIDs(t, fos.ev, 200)
	fos.ev.kill(200)
	wakeWithin(t, w, 5*time.Second)
}

// A kernel that names no connection in fdinfo (older than this project's 6.18): every /dev/fuse
// holder is watched whatever it serves, and its exit wakes the consumer.
func TestWatcherWatchesEveryHolderWhereTheKernelNamesNone(t *testing.T) {
	fos := newFakeOS()
	fos.set(map[Connection][]string{39: {"/mnt/a"}}, Holder{PID: 100, Unnamed: true}, Holder{PID: 103, Unnamed: true})
	w, exits := start(t, fos, Options{RescanInterval: time.Hour})
	waitPIDs(t, fos.ev, 100, 103)
	fos.ev.kill(103)
	wakeWithin(t, w, 5*time.Second)
	if x := <-exits; x.PID != 103 || !reflect.DeepEqual(x.MountPoints, []string{"/mnt/a"}) {
		t.Fatalf("exit = %+v, want 103 with every FUSE mount point", x)
	}
}

// A tenant's impostor (a plain file at /dev/fuse in its own mount namespace, opened again and
// again by a loop) makes no holder once the kernel is seen naming connections: it is not
// watched, and its exit wakes no one and costs no walk. Before, it counted as a holder of every
// connection, and each exit of the loop's openers woke the rescue and walked every process.
func TestWatcherIgnoresAnImpostorDevFuse(t *testing.T) {
	fos := newFakeOS()
	fos.set(map[Connection][]string{39: {"/mnt/a"}}, Holder{PID: 100, Connections: []Connection{39}}, Holder{PID: 500, Unnamed: true})
	w, _ := start(t, fos, Options{RescanInterval: time.Hour})
	waitPIDs(t, fos.ev, 100)
	walks := fos.walkCount()
	fos.ev.ch <- Event{Exited: []int{500}} // the opener exits (as the event source would report it, were it watched)
	noWakeWithin(t, w, 200*time.Millisecond, "an impostor's exit woke the rescue")
	if n := fos.walkCount() - walks; n != 0 {
		t.Errorf("%d walks for an impostor's exit, want none", n)
	}
}

// Daemons dying in a burst (a plugin pod's s3fs, or a tenant's FUSE loop) each wake the consumer
// at once, each is reported, and the walks after them leave nothing watched. With MountSettle
// removed (issue 52) a walk follows each exit the watcher receives: at most one per exit.
func TestWatcherWalksAfterExits(t *testing.T) {
	fos := newFakeOS()
	conns := map[Connection][]string{}
	var holders []Holder
	var pids []int
	for i := range 30 {
		c := Connection(100 + i)
		conns[c] = []string{fmt.Sprintf("/mnt/%d", i)}
		holders = append(holders, Holder{PID: 1000 + i, Connections: []Connection{c}})
		pids = append(pids, 1000+i)
	}
	fos.set(conns, holders...)
	w, exits := start(t, fos, Options{RescanInterval: time.Hour})
	waitPIDs(t, fos.ev, pids...)
	walks := fos.walkCount()
	fos.set(conns)
	go func() { // the start helper's exit channel holds 16: read them while the kills go on
		for _, pid := range pids {
			fos.ev.kill(pid)
		}
	}()
	for range pids {
		select {
		case <-exits:
		case <-time.After(5 * time.Second):
			t.Fatal("an exit was not reported")
		}
	}
	wakeWithin(t, w, time.Second)
	waitPIDs(t, fos.ev)
	if n := fos.walkCount() - walks; n < 1 || n > len(pids) {
		t.Errorf("30 exits walked the processes %d times, want 1..30 (one per exit received)", n)
	}
}
