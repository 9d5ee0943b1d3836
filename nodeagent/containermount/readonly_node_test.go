//go:build node

package containermount_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

// A read-only volume mount with mountPropagation HostToContainer receives the host's
// restored mount by propagation, and the propagated mount is writable — a read-only container
// would write into the bucket. The remounter makes it read-only again in the container's
// namespace, without attaching anything and without touching the host's mount.
func TestNodeReadOnlyHostToContainerStaysReadOnly(t *testing.T) {
	n := newNode(t)
	root := filepath.Join(n.dir, "ctr-ro")
	data := filepath.Join(root, "data")
	must(t, os.MkdirAll(data, 0o755))
	// As runc does for a readOnly volume with HostToContainer: an rslave bind made read-only.
	c := n.startContainer("ro", "slave", strings.Join([]string{
		"mount --bind " + n.target + " " + data,
		"mount -o remount,bind,ro " + data,
		"mount --make-rslave " + data,
		"umount " + n.target,
	}, "\n"))
	if err := os.WriteFile(c.path(data)+"/x.txt", []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write before the loss: %v, want EROFS", err)
	}

	n.kill()
	n.restore()
	// The failure this guards against: the propagated live mount is writable.
	top, _ := c.table(t).Top(data)
	if top.Dev == n.deadDev {
		t.Fatalf("the restored mount did not propagate into the HostToContainer container: top %+v", top)
	}
	if top.ReadOnly() {
		t.Fatalf("the kernel propagated the live mount read-only (%+v): the failure this test guards against did not happen, so it cannot check the defence", top)
	}
	hostTop, _ := hostTable(t).Top(n.target)

	n.mounts("ro", vm(data, "", true))
	r, rec := n.remounter(inPod(map[int]string{c.pid: "ro"}))
	ctx := logr.NewContext(context.Background(), testr.New(t))
	res, err := r.RemountInContainers(ctx, n.request("ro"))
	must(t, err)
	t.Logf("result %+v, events %q", res, drain(rec))
	if len(res.Failed) != 0 {
		t.Fatalf("failures: %v", res.Failed)
	}
	after := c.table(t)
	now, _ := after.Top(data)
	if now.ID != top.ID || !now.ReadOnly() {
		t.Fatalf("top at %s = %+v; want the propagated mount %d, read-only", data, now, top.ID)
	}
	if s := after.Stack(data); len(s) != 2 {
		t.Errorf("stack at %s = %+v; want the dead mount and the propagated one, nothing attached", data, s)
	}
	if got := read(t, c.path(data)+"/root.txt"); got != "volume root\n" {
		t.Errorf("read after the fix = %q", got)
	}
	if err := os.WriteFile(c.path(data)+"/x.txt", []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write after the fix: %v, want EROFS", err)
	}
	// The host's mount (and so every other container's) is untouched and writable.
	if h, _ := hostTable(t).Top(n.target); h.ID != hostTop.ID || h.ReadOnly() {
		t.Errorf("host target top = %+v, want mount %d still writable", h, hostTop.ID)
	}
	// A second pass changes nothing.
	res, err = r.RemountInContainers(ctx, n.request("ro"))
	must(t, err)
	if len(res.Fixed) != 0 || len(res.Failed) != 0 {
		t.Errorf("second pass: %+v; want nothing fixed or failed", res)
	}
}
