//go:build node

package containermount_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

const (
	bucket = "bkt"
	ak     = "AKIATESTPVRESCUE"
	sk     = "sEcReTkEy-pvrescue-0123456789"
)

// s3Env is a versitygw S3 server with one bucket, a shared scratch directory (as kubelet's
// root is shared) and s3fs mounts of the bucket; everything is torn down when the test ends.
type s3Env struct {
	t        testing.TB
	dir      string
	s3dir    string
	endpoint string
	passwd   string
}

func newS3Env(t testing.TB) *s3Env {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "s3fs", "apt-get install s3fs")
	testenv.RequireCommand(t, "unshare", "apt-get install util-linux")
	testenv.RequireCommand(t, "nsenter", "apt-get install util-linux")
	gw := testenv.Binary(t, "versitygw", "versitygw")

	dir := t.TempDir()
	e := &s3Env{t: t, dir: dir, s3dir: filepath.Join(dir, "s3"), passwd: filepath.Join(dir, "passwd")}
	must(t, os.MkdirAll(filepath.Join(e.s3dir, bucket), 0o755))
	must(t, os.WriteFile(e.passwd, []byte(ak+":"+sk+"\n"), 0o600))

	port := freePort(t)
	e.endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(gw, "--access", ak, "--secret", sk, "--port", "127.0.0.1:"+strconv.Itoa(port), "posix", e.s3dir)
	logf, err := os.Create(filepath.Join(dir, "versitygw.log"))
	must(t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, 20*time.Second, "versitygw listening", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	// A shared mount, as kubelet makes its root: mounts below it propagate to slave namespaces.
	must(t, unix.Mount(dir, dir, "", unix.MS_BIND, ""))
	must(t, unix.Mount("", dir, "", unix.MS_SHARED, ""))
	t.Cleanup(func() { sweep(t, dir) })
	return e
}

// file writes a file of the volume straight into the S3 server's backing directory.
func (e *s3Env) file(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.s3dir, bucket, rel)
	must(e.t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(e.t, os.WriteFile(p, []byte(content), 0o644))
}

// s3fs mounts bucket:/prefix at mnt and returns the s3fs process.
func (e *s3Env) s3fs(prefix, mnt string) *os.Process {
	e.t.Helper()
	must(e.t, os.MkdirAll(mnt, 0o755))
	cmd := exec.Command("s3fs", bucket+":/"+prefix, mnt, "-f", "-o", "passwd_file="+e.passwd, "-o", "url="+e.endpoint,
		"-o", "use_path_request_style", "-o", "allow_other")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(filepath.Join(e.dir, "s3fs-"+filepath.Base(filepath.Dir(mnt))+".log"))
	must(e.t, err)
	cmd.Stdout, cmd.Stderr = logf, logf
	must(e.t, cmd.Start())
	go func() { _ = cmd.Wait(); logf.Close() }() // reap it whenever it dies
	waitFor(e.t, 20*time.Second, "s3fs mounted at "+mnt, func() bool {
		top, ok := hostTable(e.t).Top(mnt)
		var st unix.Statfs_t
		return ok && top.FSType == "fuse.s3fs" && unix.Statfs(mnt, &st) == nil
	})
	return cmd.Process
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
	waitFor(e.t, 10*time.Second, "container "+name+" set up", func() bool {
		if cmd.ProcessState != nil {
			e.t.Fatalf("container %s exited: %s", name, out.String())
		}
		_, err := os.Stat(ready)
		return err == nil
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
	waitFor(e.t, 5*time.Second, "second process in the namespace", func() bool {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		return err == nil && l == want
	})
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

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// sweep kills the s3fs processes serving dir and lazily unmounts everything under it.
func sweep(t testing.TB, dir string) {
	pids, _ := containermount.RealProcFS{Root: "/proc"}.Pids()
	for _, pid := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasPrefix(string(b), "s3fs\x00") && strings.Contains(string(b), dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for pass := 0; pass < 20; pass++ {
		var under []containermount.Mount
		for _, m := range hostTable(t) {
			if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
				under = append(under, m)
			}
		}
		if len(under) == 0 {
			return
		}
		sort.Slice(under, func(i, j int) bool { return len(under[i].MountPoint) > len(under[j].MountPoint) })
		for _, m := range under {
			_ = unix.Unmount(m.MountPoint, unix.MNT_DETACH)
		}
	}
	t.Errorf("mounts left under %s after cleanup", dir)
}

// podProcFS is the real /proc, except that the given pids report the pod's cgroup: the test's
// processes cannot be placed in a kubepods cgroup here (cgroup v1, no kubelet).
type podProcFS struct {
	containermount.RealProcFS
	cgroups map[int]string
}

func (p podProcFS) Cgroup(pid int) (string, error) {
	if cg, ok := p.cgroups[pid]; ok {
		return cg, nil
	}
	return p.RealProcFS.Cgroup(pid)
}

func podCgroup(podUID, containerID string) string {
	return "12:memory:/kubepods/burstable/pod" + podUID + "/" + containerID + "\n"
}
