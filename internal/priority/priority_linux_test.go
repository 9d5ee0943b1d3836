//go:build linux

package priority

import (
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Every thread of the process gets the value, and a thread started afterwards inherits it.
// (Raising the value needs no privilege, so this runs as any user.)
func TestSetNiceReachesEveryThread(t *testing.T) {
	// Busy goroutines make the runtime start threads of its own before the call.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					time.Sleep(time.Microsecond)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(20 * time.Millisecond)

	before, err := Nice(0)
	if err != nil {
		t.Fatal(err)
	}
	want := min(before+3, 19)
	if err := SetNice(want); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < 2 {
		t.Fatalf("%d threads: the check needs more than one", len(tasks))
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		got, err := Nice(tid)
		if err != nil {
			continue // the thread ended meanwhile
		}
		if got != want {
			t.Errorf("thread %d has nice %d, want %d", tid, got, want)
		}
	}
}

func TestSetNiceRefusesOutOfRange(t *testing.T) {
	for _, n := range []int{-21, 20} {
		if err := SetNice(n); err == nil {
			t.Errorf("SetNice(%d) accepted", n)
		}
	}
}
