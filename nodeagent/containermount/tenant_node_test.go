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

	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

// sq quotes p for sh, whatever bytes it holds.
func sq(p string) string { return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'" }

// TestNodeOddSubPathKeepsItsSubdirectoryReadOnly: a tenant's read-only subPath and mount path
// hold no-break spaces, a carriage return and U+0085 (the kernel writes them raw in mountinfo;
// a "/data rw" inside the name once parsed as separate fields). After the volume's s3fs dies and
// is restored, the container sees only its subdirectory, still read-only. A second container
// whose mount table disagrees with its pod spec (it shows the volume root, the spec names a
// subPath) is skipped with an Event and keeps its dead mount.
func TestNodeOddSubPathKeepsItsSubdirectoryReadOnly(t *testing.T) {
	n := newNode(t)
	sub := "\u00a0data\u00a0rw\r\u0085"
	n.file("pv1/"+sub+"/marker.txt", "only the subdirectory\n")
	n.file("pv1/other-tenant/secret.txt", "not yours\n")

	root := filepath.Join(n.dir, "ctr-odd")
	mp := filepath.Join(root, "d\u00a0a\rt\u0085a rw")
	must(t, os.MkdirAll(mp, 0o755))
	c := n.startContainer("odd", "private", strings.Join([]string{
		"mount --bind " + sq(n.target+"/"+sub) + " " + sq(mp),
		"mount -o remount,bind,ro " + sq(mp),
		"umount " + sq(n.target),
	}, "\n"))
	n.mounts("odd", vm(mp, sub, true))

	liarRoot := filepath.Join(n.dir, "ctr-liar")
	liarMP := filepath.Join(liarRoot, "cfg")
	must(t, os.MkdirAll(liarMP, 0o755))
	liar := n.startContainer("liar", "private", "mount --bind "+sq(n.target)+" "+sq(liarMP)+"\numount "+sq(n.target))
	n.mounts("liar", vm(liarMP, sub, true)) // the spec says a read-only subPath; the table shows the root, writable

	if got := read(t, c.path(mp)+"/marker.txt"); got != "only the subdirectory\n" {
		t.Fatalf("marker before the failure: %q", got)
	}
	n.kill()
	n.restore()
	r, rec := n.remounter(inPod(map[int]string{c.pid: "odd", liar.pid: "liar"}))
	ctx := logr.NewContext(context.Background(), testr.New(t))
	res, err := r.RemountInContainers(ctx, n.request("odd", "liar"))
	must(t, err)
	ev := drain(rec)
	t.Logf("result %+v, events %q", res, ev)
	if !slices.Equal(res.Fixed, []string{"odd:" + mp}) {
		t.Fatalf("fixed = %q, want only odd:%q", res.Fixed, mp)
	}
	if err := res.Failed["liar:"+liarMP]; !errors.Is(err, containermount.ErrUnverified) || len(res.Failed) != 1 {
		t.Fatalf("failed = %v, want liar skipped (ErrUnverified)", res.Failed)
	}
	if got := read(t, c.path(mp)+"/marker.txt"); got != "only the subdirectory\n" {
		t.Errorf("marker after the rescue: %q", got)
	}
	if _, err := os.Stat(c.path(mp) + "/other-tenant"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the container sees the volume root after the rescue: stat other-tenant = %v", err)
	}
	if err := os.WriteFile(c.path(mp)+"/x", []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write after the rescue: %v, want EROFS", err)
	}
	top, _ := c.table(t).Top(mp)
	if top.Root != "/"+sub || !top.ReadOnly() {
		t.Errorf("top at the odd mount point = %+v, want root %q read-only", top, "/"+sub)
	}
	// The skipped container keeps its dead mount; nothing was attached there.
	if _, err := os.Stat(liar.path(liarMP) + "/root.txt"); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("skipped container: stat = %v, want ENOTCONN (left to its probe)", err)
	}
	if s := liar.table(t).Stack(liarMP); len(s) != 1 || s[0].Dev != n.deadDev {
		t.Errorf("skipped container's stack = %+v, want only the dead mount", s)
	}
	var skipped int
	for _, e := range ev {
		if strings.HasPrefix(e, "Warning "+containermount.ReasonSkipped) && strings.Contains(e, "liar:") {
			skipped++
		}
	}
	if skipped != 1 {
		t.Errorf("events %q, want one %s naming liar", ev, containermount.ReasonSkipped)
	}
}
