//go:build node && linux

package ossthread

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// namespaces returns the namespace links of every thread of this process.
func namespaces(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		for _, ns := range []string{"net", "cgroup", "mnt", "uts"} {
			l, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns", ns))
			if err == nil {
				out[task.Name()+"/"+ns] = l
			}
		}
	}
	return out
}

// TestNodeEnterLeavesTheProcessAlone joins another network, cgroup and UTS namespace many times
// (also from the main thread) and checks that every thread left of the process is still in the
// process's own namespaces: each thread that joined one was retired.
func TestNodeEnterLeavesTheProcessAlone(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "unshare", "apt-get install util-linux")
	cmd := exec.Command("unshare", "--net", "--uts", "--cgroup", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	own := map[string]string{}
	for _, ns := range []string{"net", "cgroup", "uts"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		own[ns] = l
	}
	testenv.WaitFor(t, 5*time.Second, "the other namespaces exist", testenv.Until(func() bool {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		return err == nil && l != own["net"]
	}))
	for i := 0; i < 100; i++ {
		for _, ns := range []struct {
			name string
			typ  int
		}{{"net", unix.CLONE_NEWNET}, {"cgroup", unix.CLONE_NEWCGROUP}, {"uts", unix.CLONE_NEWUTS}} {
			path := fmt.Sprintf("/proc/%d/ns/%s", pid, ns.name)
			want, _ := os.Readlink(path)
			err := Enter(path, ns.typ, func() error {
				got, err := os.Readlink("/proc/thread-self/ns/" + ns.name)
				if err != nil {
					return fmt.Errorf("read the thread's namespace: %w", err)
				}
				if got != want {
					return fmt.Errorf("the thread is in %s, want %s", got, want)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("enter %s %d: %v", ns.name, i, err)
			}
		}
	}
	testenv.WaitFor(t, 5*time.Second, "every thread in the process's own namespaces", func() error {
		var bad []string
		for k, l := range namespaces(t) {
			ns := k[strings.LastIndexByte(k, '/')+1:]
			if w, ok := own[ns]; ok && l != w {
				bad = append(bad, k+"="+l)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("threads in other namespaces: %v", bad)
		}
		return nil
	})
	if fromMain.worker == os.Getpid() {
		t.Error("a call from the main thread ran on it")
	}
}
