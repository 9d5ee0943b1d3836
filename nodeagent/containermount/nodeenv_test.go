//go:build node

package containermount_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/ossthread"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

const bucket = "bkt"

// s3Env is a versitygw S3 server with one bucket, a shared scratch directory (as kubelet's
// root is shared) and s3fs mounts of the bucket; everything is torn down when the test ends.
type s3Env struct {
	t     testing.TB
	dir   string
	s3dir string
	srv   *testenv.S3Server
}

func newS3Env(t testing.TB) *s3Env {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "s3fs", "apt-get install s3fs")
	testenv.RequireCommand(t, "unshare", "apt-get install util-linux")
	testenv.RequireCommand(t, "nsenter", "apt-get install util-linux")
	srv := testenv.S3(t, bucket)
	dir := t.TempDir()
	e := &s3Env{t: t, dir: dir, s3dir: srv.Dir, srv: srv}
	// A shared mount, as kubelet makes its root: mounts below it propagate to slave namespaces.
	must(t, unix.Mount(dir, dir, "", unix.MS_BIND, ""))
	must(t, unix.Mount("", dir, "", unix.MS_SHARED, ""))
	testenv.Sweep(t, dir)
	return e
}

// file writes a file of the volume straight into the S3 server's backing directory.
func (e *s3Env) file(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.s3dir, bucket, rel)
	must(e.t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(e.t, os.WriteFile(p, []byte(content), 0o644))
}

// s3fs mounts bucket:/prefix at mnt (in a process group of its own, as a driver's child would
// be) and returns it; the sweep at the end of the test kills it and detaches the mount.
func (e *s3Env) s3fs(prefix, mnt string) *testenv.S3fsMount {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := testenv.StartS3fs(ctx, e.srv.S3Config, testenv.S3fsSpec{Source: bucket + ":/" + prefix, MountPoint: mnt,
		PasswdFile: filepath.Join(e.dir, strings.ReplaceAll(strings.TrimPrefix(mnt, e.dir+"/"), "/", "_")+".passwd"),
		Options:    []string{"allow_other"}, OwnGroup: true})
	must(e.t, err)
	testenv.WaitFor(e.t, 20*time.Second, "s3fs at "+mnt+" answers", testenv.Until(func() bool {
		var st unix.Statfs_t
		return unix.Statfs(mnt, &st) == nil
	}))
	return m
}

// container is a process in a mount namespace of its own, like a container's.
type container struct {
	pid int
	cmd *exec.Cmd
}

// startContainer runs script in a new mount namespace (propagation "private" or "slave") and
// then sleeps there; ready is a file the script creates last.
func (e *s3Env) startContainer(name, propagation, script string) *container {
	e.t.Helper()
	return e.startContainerArgs(name, []string{"-m", "--propagation", propagation}, script)
}

// startContainerArgs is startContainer with the unshare(1) options given.
func (e *s3Env) startContainerArgs(name string, unshareArgs []string, script string) *container {
	e.t.Helper()
	ready := filepath.Join(e.dir, name+".ready")
	return e.startContainerRaw(name, unshareArgs, script+"\ntouch "+ready+"\nexec sleep 3600", ready)
}

// startContainerRaw runs script (which must create ready and then sleep) under unshare(1).
func (e *s3Env) startContainerRaw(name string, unshareArgs []string, script, ready string) *container {
	e.t.Helper()
	args := append(append([]string(nil), unshareArgs...), "sh", "-ec", script)
	cmd := exec.Command("unshare", args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	must(e.t, cmd.Start())
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testenv.WaitFor(e.t, 10*time.Second, "container "+name+" set up", func() error {
		if _, err := os.Stat(ready); err != nil {
			return fmt.Errorf("%w (output so far: %q)", err, out.String())
		}
		return nil
	})
	return &container{pid: cmd.Process.Pid, cmd: cmd}
}

// join starts a second process in c's mount namespace (another container sharing it).
func (e *s3Env) join(c *container) *container {
	e.t.Helper()
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(c.pid), "-m", "sleep", "3600")
	must(e.t, cmd.Start())
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	want := nsOf(e.t, c.pid)
	testenv.WaitFor(e.t, 5*time.Second, "second process in the namespace", testenv.Until(func() bool {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		return err == nil && l == want
	}))
	return &container{pid: cmd.Process.Pid, cmd: cmd}
}

// path returns a path inside the container's namespace, reachable from the host.
func (c *container) path(p string) string { return fmt.Sprintf("/proc/%d/root%s", c.pid, p) }

func (c *container) table(t testing.TB) containermount.MountTable {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", c.pid))
	must(t, err)
	tab, err := containermount.ParseMountInfo(string(b))
	must(t, err)
	return tab
}

func nsOf(t testing.TB, pid int) string {
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	must(t, err)
	return l
}

func hostTable(t testing.TB) containermount.MountTable {
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	tab, err := containermount.ParseMountInfo(string(b))
	must(t, err)
	return tab
}

var probe = sync.OnceValue(func() mountreplace.Support { return mountreplace.Probe("", ossthread.Run) })

// realOS is the agent's OS as app wires it: the start-up probe's answer, which on this kernel
// (6.5 or later) must be that it mounts beneath.
func realOS(t testing.TB) containermount.OS {
	t.Helper()
	s := probe()
	if !s.Beneath {
		t.Fatalf("this kernel must mount beneath (Linux >= 6.5): %v", s.Err)
	}
	os, err := containermount.NewOS("/proc", s)
	must(t, err)
	return os
}
