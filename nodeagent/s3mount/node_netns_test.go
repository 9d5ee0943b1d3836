//go:build node

package s3mount_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

// A bridge's s3fs starts in the network namespace it is given (the node's, by default
// init's), not in the agent's: the agent pod's namespace keeps only lo once the pod is deleted,
// and every read through the surviving bridge hung on S3 requests that could not leave it.
func TestNodeStartInNetNS(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "unshare", "apt-get install util-linux")
	holder := exec.Command("unshare", "-n", "sleep", "60")
	must(t, holder.Start())
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	ns := fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)
	ours, err := os.Readlink("/proc/self/ns/net")
	must(t, err)
	var want string
	waitFor(t, 5*time.Second, "unshare -n in its own network namespace", func() bool {
		want, _ = os.Readlink(ns)
		return want != "" && want != ours
	})
	log := filepath.Join(t.TempDir(), "out.log")
	p, err := s3mount.NewOS().Procs.Start(s3fs.ProcSpec{Path: "/bin/sh", Args: []string{"-c", "readlink /proc/self/ns/net"},
		Dir: "/", LogFile: log, NetNS: ns})
	must(t, err)
	if err := p.Wait(); err != nil {
		t.Fatalf("child: %v (%s)", err, p.Output())
	}
	got, err := os.ReadFile(log)
	must(t, err)
	if strings.TrimSpace(string(got)) != want {
		t.Errorf("child ran in %q, want the given namespace %q (ours %q)", strings.TrimSpace(string(got)), want, ours)
	}
	if now, _ := os.Readlink("/proc/self/ns/net"); now != ours {
		t.Errorf("the agent's own network namespace changed: %q, was %q", now, ours)
	}
}
