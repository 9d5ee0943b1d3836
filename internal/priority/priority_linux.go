//go:build linux

package priority

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// SetNice gives every thread of the process the nice value n (-20..19). Lowering it below the
// current value needs CAP_SYS_NICE.
func SetNice(n int) error {
	if n < -20 || n > 19 {
		return fmt.Errorf("nice %d is outside -20..19", n)
	}
	// Twice: a thread the runtime starts while the first round runs may have been made by a
	// thread not changed yet.
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("list own threads: %w", err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, n); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("setpriority of thread %d to %d: %w", tid, n, err)
			}
		}
	}
	return nil
}

// Nice returns the nice value of thread tid (0: the calling thread).
func Nice(tid int) (int, error) {
	// The raw system call returns 20 - nice, so that it is never negative.
	v, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return 0, err
	}
	return 20 - v, nil
}
