//go:build linux

package fusewatch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

// mixedOS is the real event source with a made-up mount and process table: two plain processes
// stand for two FUSE daemons.
type mixedOS struct {
	OS
	holders []Holder
	// withDead lists exited processes too (a walk racing an exit).
	withDead bool
}

// Holders lists only live processes, as the real walk does (an exited process holds no
// descriptor).
func (m mixedOS) live() []Holder {
	var out []Holder
	for _, h := range m.holders {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.PID)); err == nil && !strings.Contains(string(b), ") Z ") {
			out = append(out, h)
		}
	}
	return out
}

func (m mixedOS) Connections() (map[Connection][]Mount, error) {
	return map[Connection][]Mount{1: {{ID: 1, Point: "/a"}}, 2: {{ID: 2, Point: "/b"}}}, nil
}
func (m mixedOS) Holders() ([]Holder, error) {
	if m.withDead {
		return m.holders, nil
	}
	return m.live(), nil
}

// Two daemons killed one after the other are both seen exiting, each within milliseconds, and
// each once, even when a walk still lists the first.
func TestWatcherRealEventsTwoExits(t *testing.T) {
	for _, withDead := range []bool{false, true} {
		t.Run(fmt.Sprintf("withDead=%v", withDead), func(t *testing.T) { twoExits(t, withDead) })
	}
}

// A walk that runs while a daemon exits (it no longer holds the descriptor) does not swallow
// its exit.
func TestWatcherWalkRacingAnExit(t *testing.T) {
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	m := &racingOS{OS: NewOS(OSOptions{}), pid: c.Process.Pid, kick: make(chan struct{}, 1)}
	exits := make(chan Exit, 4)
	w, err := New(m, Options{RescanInterval: time.Hour, OnExit: func(x Exit) { exits <- x }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(200 * time.Millisecond) // the first walk watches it
	m.killDuringWalk.Store(true)
	m.kick <- struct{}{}
	select {
	case x := <-exits:
		if x.PID != c.Process.Pid {
			t.Fatalf("exit of %d, want %d", x.PID, c.Process.Pid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exit during a walk was swallowed")
	}
	_ = c.Wait()
}

// racingOS kills its one daemon in the middle of a walk, after its descriptors were read; the
// connection set changes on demand so that a walk happens.
type racingOS struct {
	OS
	pid            int
	killDuringWalk atomic.Bool
	n              atomic.Int32
	// kick is made before the watcher starts: the test sends on it while Run reads it.
	kick chan struct{}
}

func (r *racingOS) Connections() (map[Connection][]Mount, error) {
	return map[Connection][]Mount{Connection(1 + r.n.Add(1)%2): {{ID: 1, Point: "/a"}}}, nil // a new connection each read: always a walk
}

func (r *racingOS) Holders() ([]Holder, error) {
	if r.killDuringWalk.Load() {
		_ = syscall.Kill(r.pid, syscall.SIGKILL)
		for i := 0; i < 100; i++ { // until it is gone, as a walk reading /proc after the exit sees it
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.pid)); err != nil || strings.Contains(string(b), ") Z ") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil, nil
	}
	return []Holder{{PID: r.pid, Unnamed: true}}, nil
}

func (r *racingOS) Events() (Events, error) {
	ev, err := r.OS.Events()
	if err != nil {
		return nil, err
	}
	return &kickEvents{Events: ev, kick: r.kick}, nil
}

// kickEvents adds a test-driven "mount table changed" to the real event source.
type kickEvents struct {
	Events
	kick chan struct{}
}

func (k *kickEvents) Wait(ctx context.Context) (Event, error) {
	type res struct {
		e   Event
		err error
	}
	ch := make(chan res, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { e, err := k.Events.Wait(wctx); ch <- res{e, err} }()
	select {
	case <-k.kick:
		cancel()
		r := <-ch
		if r.err == nil {
			r.e.MountsChanged = true
			return r.e, nil
		}
		return Event{MountsChanged: true}, nil
	case r := <-ch:
		return r.e, r.err
	}
}

func twoExits(t *testing.T, withDead bool) {
	var cmds []*exec.Cmd
	var holders []Holder
	for i := 0; i < 2; i++ {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		holders = append(holders, Holder{PID: c.Process.Pid, Connections: []Connection{Connection(i + 1)}})
	}
	exits := make(chan Exit, 4)
	w, err := New(mixedOS{OS: NewOS(OSOptions{}), holders: holders, withDead: withDead}, Options{RescanInterval: time.Hour, OnExit: func(x Exit) { exits <- x }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(200 * time.Millisecond) // the first walk
	for _, c := range cmds {
		start := time.Now()
		_ = c.Process.Kill()
		select {
		case x := <-exits:
			t.Logf("pid %d killed → exit of %d seen after %v", c.Process.Pid, x.PID, x.At.Sub(start))
			if x.PID != c.Process.Pid {
				t.Fatalf("exit of %d, want %d", x.PID, c.Process.Pid)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("pid %d killed: no exit seen", c.Process.Pid)
		}
		_ = c.Wait()
	}
}
