//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// Checks that the rescued volume is the bucket and nothing else: data put on the S3 server's side
// is read by the app, what the app writes lands on the S3 server's side, no kubelet path holds a
// mount of the node's disk, the plugin's own mounts are all where the node sees them, and nothing
// is left behind once the pods are gone.

// putInBucket puts an object into the bucket on the S3 server's side: a file of versitygw's posix
// backend (the bucket's directory), never through a mount.
func putInBucket(t testing.TB, e *env, key, content string) {
	t.Helper()
	dir, err := e.s3.Bucket(s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// bucketObject reads an object on the S3 server's side ("" when missing).
func bucketObject(e *env, key string) string {
	b, _ := os.ReadFile(filepath.Join(e.s3.Dir, s3Bucket, key))
	return string(b)
}

// writeReachesBucket has the container append a unique line to file (a path under /data) and
// waits until the object key on the S3 server's side holds it.
func writeReachesBucket(t testing.TB, e *env, ns, pod, container, file, key, when string) {
	t.Helper()
	line := fmt.Sprintf("%s/%s %s %d", pod, container, when, time.Now().UnixNano())
	if _, err := execIn(e, ns, pod, container, "sh", "-c", "echo '"+line+"' >> "+file); err != nil {
		t.Errorf("%s: %s/%s cannot write %s: %v", when, pod, container, file, err)
		return
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("%s: the line %s/%s wrote into %s to be in the bucket's object %s on the S3 server", when, pod, container, file, key), func() (bool, string) {
		got := bucketObject(e, key)
		if strings.Contains(got, line) {
			return true, ""
		}
		return false, fmt.Sprintf("object %s holds %q; mounts at /var/lib/pvrescue: %s", key, got, mountsUnderPrefix(config.Default().StateDir))
	})
}

// mountsUnderPrefix summarises the host mounts at or below dir.
func mountsUnderPrefix(dir string) string {
	var parts []string
	for _, m := range hostMounts() {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			parts = append(parts, m.MountPoint+" "+m.FSType+" "+m.Source)
		}
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// nodeDiskDevs are the devices (major:minor) of the node's own disk: the root file system's and
// those holding kubelet's and the agent's directories.
func nodeDiskDevs(e *env) map[string]string {
	devs := map[string]string{}
	ms := hostMounts()
	for _, p := range []string{"/", e.c.Opts.KubeletDir, config.Default().StateDir, "/var/lib", "/var"} {
		if st := mountinfo.Stack(ms, p, mountinfo.Mount.Place); len(st) > 0 {
			m := st[len(st)-1]
			if !strings.HasPrefix(m.FSType, "fuse") && m.FSType != "tmpfs" {
				devs[m.Dev] = m.FSType + " " + m.Source
			}
		}
	}
	return devs
}

// checkKubeletMounts fails for every mount below kubelet's directory whose file system is the
// node's disk (kubelet's own bind of its directory onto itself aside), and for every mount at a
// CSI volume path (a pod's kubernetes.io~csi/<pv>/mount, kubelet's staging path, the agent's
// fresh paths) that is not a FUSE mount: a volume must never become a directory of the node.
func checkKubeletMounts(t testing.TB, e *env, when string) {
	t.Helper()
	kubelet := filepath.Clean(e.c.Opts.KubeletDir)
	disk := nodeDiskDevs(e)
	csiStage := filepath.Join(kubelet, "plugins", "kubernetes.io", "csi") + "/"
	bad, n := []string{}, 0
	for _, m := range hostMounts() {
		if !strings.HasPrefix(m.MountPoint, kubelet+"/") {
			continue
		}
		n++
		csiPath := strings.Contains(m.MountPoint, "/volumes/kubernetes.io~csi/") || strings.HasPrefix(m.MountPoint, csiStage) ||
			strings.Contains(m.MountPoint, "/"+freshDirName+"/")
		switch {
		case disk[m.Dev] != "":
			bad = append(bad, fmt.Sprintf("%s: %s %s (root %s) is the node's disk (%s)", m.MountPoint, m.FSType, m.Source, m.Root, disk[m.Dev]))
		case csiPath && !isFUSE(m.FSType):
			bad = append(bad, fmt.Sprintf("%s: %s %s (root %s) is not a FUSE mount", m.MountPoint, m.FSType, m.Source, m.Root))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: %d of %d mounts under %s are not the volume's FUSE mount (node disk devices %v):\n  %s", when, len(bad), n, kubelet, disk, strings.Join(bad, "\n  "))
	}
}

// isFUSE reports whether a mountinfo fstype is FUSE: "fuse.<subtype>" (a driver's s3fs) or
// plain "fuse" (the agent's bridge, which sets its own fsname).
func isFUSE(fstype string) bool { return fstype == "fuse" || strings.HasPrefix(fstype, "fuse.") }

// checkTopFUSE fails unless the top mount at path is a FUSE mount.
func checkTopFUSE(t testing.TB, path, what string) {
	t.Helper()
	st := mountsAt(path)
	if len(st) == 0 {
		t.Errorf("%s: nothing is mounted at %s", what, path)
		return
	}
	if top := st[len(st)-1]; !isFUSE(top.FSType) {
		t.Errorf("%s: the top mount at %s is %s %s (root %s), not the volume's FUSE mount; stack %s", what, path, top.FSType, top.Source, top.Root, describeStack(st))
	}
}

// checkPluginMounts fails for every FUSE mount in the plugin container's mount namespace that
// lies outside what the node sees of it (<kubelet>/pods, <kubelet>/plugins/kubernetes.io/csi): a
// volume mounted there serves nobody and keeps its s3fs running.
func checkPluginMounts(t testing.TB, e *env, p *stack.CSI, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pid, err := p.PluginPid(ctx)
	if err != nil {
		t.Errorf("%s: find the %s plugin's process: %v", when, p.Driver, err)
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Errorf("%s: read the %s plugin's mountinfo: %v", when, p.Driver, err)
		return
	}
	seen := []string{filepath.Join(e.c.Opts.KubeletDir, "pods") + "/", filepath.Join(e.c.Opts.KubeletDir, "plugins", "kubernetes.io", "csi") + "/"}
	var bad []string
	for _, line := range strings.Split(string(b), "\n") {
		m, err := mountinfo.ParseLine(line)
		if err != nil || !strings.HasPrefix(m.FSType, "fuse") {
			continue
		}
		if !strings.HasPrefix(m.MountPoint, seen[0]) && !strings.HasPrefix(m.MountPoint, seen[1]) {
			bad = append(bad, m.MountPoint+" "+m.FSType+" "+m.Source)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: the %s plugin holds FUSE mounts the node never sees (outside %v):\n  %s", when, p.Driver, seen, strings.Join(bad, "\n  "))
	}
}

// s3fsOf lists the host's s3fs processes (any owner: the driver's, the agent's) mounting src
// (bucket or bucket:/prefix, one whole argument).
func s3fsOf(src string) []int {
	return procs("s3fs", func(_, _ int, cmd []byte) bool { return cmdlineNamesSource(cmd, src) })
}

// cmdlineNamesSource reports whether an s3fs command line (NUL-separated, as in /proc/PID/cmdline)
// names src ("bucket" or "bucket:/prefix") as an argument. s3fs splits a "bucket:/prefix"
// argument in place (the ':' becomes a NUL), so such a source shows as two arguments, "bucket"
// and "/prefix": matching only the whole argument would never find it.
func cmdlineNamesSource(cmd []byte, src string) bool {
	args := bytes.Split(bytes.TrimRight(cmd, "\x00"), []byte{0})
	args = args[min(1, len(args)):]
	bucket, prefix, split := strings.Cut(src, ":")
	for i, a := range args {
		if string(a) == src {
			return true
		}
		if split && i+1 < len(args) && string(a) == bucket && string(args[i+1]) == prefix {
			return true
		}
	}
	return false
}

// replayDirs are the fresh directories the agent may ask a driver to publish or stage a PV at:
// <kubelet>/pods/<uid>/pvrescue~s3/<pv> for any pod, <kubelet>/plugins/kubernetes.io/csi/
// pvrescue~s3/<pv>, and the earlier layout's <state>/s3/replay/<pv>.
func replayDirs(e *env, pv string) []string {
	kubelet := e.c.Opts.KubeletDir
	dirs, _ := filepath.Glob(filepath.Join(kubelet, "pods", "*", freshDirName, pv))
	return append(dirs,
		filepath.Join(kubelet, "plugins", "kubernetes.io", "csi", freshDirName, pv),
		filepath.Join(config.Default().StateDir, "s3", "replay", pv))
}

// freshDirName is the agent's directory for its fresh paths in kubelet's pod and CSI dirs.
const freshDirName = "pvrescue~s3"

// checkNothingLeft waits (30 s) until, with every pod of the PV gone, no mount on the node names
// the PV, no directory of the agent's replay layout for it remains, and no s3fs of src (driver's
// or agent's) runs, then fails with what is left.
func checkNothingLeft(t testing.TB, e *env, pv, src string) {
	t.Helper()
	var why string
	ok := pollFor(30*time.Second, func() bool {
		var left []string
		for _, m := range hostMounts() {
			if strings.Contains(m.MountPoint, "/"+pv+"/") || strings.HasSuffix(m.MountPoint, "/"+pv) {
				left = append(left, "mount "+m.MountPoint+" "+m.FSType+" "+m.Source)
			}
		}
		for _, d := range replayDirs(e, pv) {
			if _, err := os.Stat(d); err == nil {
				left = append(left, "directory "+d+" "+fmt.Sprint(filesUnder(d)))
			}
		}
		if pids := s3fsOf(src); len(pids) > 0 {
			left = append(left, fmt.Sprintf("s3fs of %s: pids %v", src, pids))
		}
		why = strings.Join(left, "; ")
		return len(left) == 0
	})
	if !ok {
		t.Errorf("every pod of %s is gone, but 30 s later this is left: %s", pv, why)
	}
}
