//go:build node

package containermount_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// TestNodePivotRootContainer: a container as runc makes it — its own root filesystem
// (pivot_root, the old root detached), the volume at /data and a read-only subPath at /cfg —
// so the mount points exist only inside the container and the kubelet path not at all.
func TestNodePivotRootContainer(t *testing.T) {
	busybox := testenv.RequireCommand(t, "busybox", "apt-get install busybox-static (a static busybox for the test rootfs)")
	n := newNode(t)
	root := filepath.Join(n.dir, "rootfs")
	for _, d := range []string{"bin", "data", "cfg", "old"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	b, err := os.ReadFile(busybox)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755))
	c := n.startContainerRaw("pivot", []string{"-m", "--propagation", "private"}, strings.Join([]string{
		"mount --bind " + root + " " + root,
		"mount --bind " + n.target + " " + root + "/data",
		"mount --bind " + n.target + "/sub/dir " + root + "/cfg",
		"mount -o remount,bind,ro " + root + "/cfg",
		"cd " + root,
		"pivot_root . old",
		"exec /bin/busybox sh -c 'umount -l /old && touch /ready && exec /bin/busybox sleep 3600'",
	}, "\n"), filepath.Join(root, "ready"))
	if got := read(t, c.path("/cfg/sub.txt")); got != "subdirectory\n" {
		t.Fatalf("container /cfg before the failure: %q", got)
	}
	if _, err := os.Stat(c.path(n.target)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the kubelet path exists inside the container (%v): not a container-like root", err)
	}

	n.mounts("app", vm("/data", "", false), vm("/cfg", "sub/dir", true))
	n.kill()
	n.restore()
	r, _ := n.remounter(inPod(map[int]string{c.pid: "app"}))
	res, err := r.RemountInContainers(logr.NewContext(context.Background(), testr.New(t)), n.request("app"))
	must(t, err)
	if !slices.Equal(res.Fixed, []string{"app:/data", "app:/cfg"}) || len(res.Failed) != 0 {
		t.Fatalf("result = %+v; want app:/data and app:/cfg fixed", res)
	}
	if got := read(t, c.path("/data/root.txt")); got != "volume root\n" {
		t.Errorf("/data/root.txt = %q", got)
	}
	if got := read(t, c.path("/cfg/sub.txt")); got != "subdirectory\n" {
		t.Errorf("/cfg/sub.txt = %q", got)
	}
	if err := os.WriteFile(c.path("/cfg/x"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to the read-only subPath: %v, want EROFS", err)
	}
}

// TestNodeNestedMountPoints: the volume at /data and a subPath of it at /data/inner, on top of it.
// Fixing /data hides the dead /data/inner; the next round puts the subPath back inside the live
// /data.
func TestNodeNestedMountPoints(t *testing.T) {
	n := newNode(t)
	n.file("pv1/inner/.keep", "")
	data := filepath.Join(n.dir, "ctr-nested", "data")
	must(t, os.MkdirAll(data, 0o755))
	c := n.startContainer("nested", "private", strings.Join([]string{
		"mount --bind " + n.target + " " + data,
		"mount --bind " + n.target + "/sub/dir " + data + "/inner",
		"umount " + n.target,
	}, "\n"))
	if got := read(t, c.path(data)+"/inner/sub.txt"); got != "subdirectory\n" {
		t.Fatalf("nested subPath before the failure: %q", got)
	}
	n.mounts("app", vm(data, "", false), vm(data+"/inner", "sub/dir", false))
	n.kill()
	n.restore()
	r, _ := n.remounter(inPod(map[int]string{c.pid: "app"}))
	res, err := r.RemountInContainers(logr.NewContext(context.Background(), testr.New(t)), n.request("app"))
	must(t, err)
	if !slices.Equal(res.Fixed, []string{"app:" + data, "app:" + data + "/inner"}) || len(res.Failed) != 0 {
		t.Fatalf("result = %+v; want /data and /data/inner fixed", res)
	}
	if got := read(t, c.path(data)+"/root.txt"); got != "volume root\n" {
		t.Errorf("/data/root.txt = %q", got)
	}
	if got := read(t, c.path(data)+"/inner/sub.txt"); got != "subdirectory\n" {
		t.Errorf("/data/inner/sub.txt = %q (the subPath, not the volume's inner directory)", got)
	}
	res, err = r.RemountInContainers(logr.NewContext(context.Background(), testr.New(t)), n.request("app"))
	must(t, err)
	if len(res.Fixed) != 0 || len(res.Failed) != 0 || res.Untouched != 2 {
		t.Errorf("second pass: %+v; want 2 untouched", res)
	}
}
