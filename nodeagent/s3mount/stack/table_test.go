package stack

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A dead driver mount with our bind stacked on it, our staging mount, and an escaped space.
const mountinfoFixture = `21 26 0:20 / /proc rw,relatime - proc proc rw
26 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
41 26 0:38 / /var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount rw,nosuid,nodev,relatime shared:7 - fuse.s3fs s3fs rw,user_id=0,group_id=0,allow_other
42 26 0:39 / /var/lib/pvrescue/s3/staging/pv-a rw,nosuid,nodev,relatime - fuse pvrescue-s3:pv-a rw,user_id=0,group_id=0,allow_other
43 41 0:39 / /var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount ro,nosuid,nodev,relatime shared:8 master:3 - fuse pvrescue-s3:pv-a rw,user_id=0
44 26 0:40 / /mnt/with\040space rw - tmpfs tmpfs rw
`

func TestParseMountInfo(t *testing.T) {
	tab, err := ParseMountInfo(mountinfoFixture)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab) != 6 {
		t.Fatalf("got %d entries, want 6", len(tab))
	}
	want := Mount{ID: 43, ParentID: 41, Dev: "0:39", Root: "/",
		MountPoint: "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount",
		Options:    []string{"ro", "nosuid", "nodev", "relatime"}, Optional: []string{"shared:8", "master:3"},
		FSType: "fuse", Source: "pvrescue-s3:pv-a"}
	if d := cmp.Diff(want, tab[4]); d != "" {
		t.Errorf("bind entry (-want +got):\n%s", d)
	}
	if !tab[4].ReadOnly() || tab[3].ReadOnly() {
		t.Errorf("ReadOnly: bind %v staging %v, want true false", tab[4].ReadOnly(), tab[3].ReadOnly())
	}
	if tab[5].MountPoint != "/mnt/with space" {
		t.Errorf("escaped mount point: %q", tab[5].MountPoint)
	}
}

func TestParseMountInfoErrors(t *testing.T) {
	for _, line := range []string{
		"garbage",
		"41 26 0:38 / /mnt rw,relatime shared:7 fuse s3fs rw", // no separator
		"x 26 0:38 / /mnt rw - fuse s3fs rw",                  // bad id
		"41 26 038 / /mnt rw - fuse s3fs rw",                  // bad dev
		"41 26 0:38 / /mnt rw - fuse",                         // truncated after separator
	} {
		if _, err := ParseMountInfo(line); !errors.Is(err, ErrMountInfo) {
			t.Errorf("ParseMountInfo(%q) = %v, want ErrMountInfo", line, err)
		}
	}
}

func TestMountTableStack(t *testing.T) {
	target := "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount"
	tab, _ := ParseMountInfo(mountinfoFixture)
	// Line order must not matter: reverse the lines.
	rev := make(Table, len(tab))
	for i := range tab {
		rev[len(tab)-1-i] = tab[i]
	}
	for name, mt := range map[string]Table{"file order": tab, "reversed": rev} {
		var ids []int
		for _, m := range mt.Stack(target) {
			ids = append(ids, m.ID)
		}
		if d := cmp.Diff([]int{41, 43}, ids); d != "" {
			t.Errorf("%s: stack ids (-want +got):\n%s", name, d)
		}
		if top, _ := mt.Top(target); top.ID != 43 {
			t.Errorf("%s: top = %d, want 43", name, top.ID)
		}
	}
	if tab.IsMountPoint("/var/lib/kubelet/pods/uid-1") {
		t.Error("plain directory reported as a mount point")
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		mounted bool
		err     error
		want    Health
	}{
		{false, nil, NotMounted},
		{true, nil, Healthy},
		{true, fmt.Errorf("statfs: %w", syscall.ENOTCONN), Dead},
		{true, syscall.EIO, Dead},
		{true, syscall.ESTALE, Dead},
		{true, syscall.ENODEV, Dead},
		{true, syscall.EHOSTDOWN, Dead},
		{true, fmt.Errorf("x: %w", ErrTimeout), Hung}, // a timeout is never death
		{true, syscall.EACCES, Unknown},
		{true, syscall.ENOENT, Unknown},
	}
	for _, tt := range tests {
		if got := Classify(tt.mounted, tt.err); got != tt.want {
			t.Errorf("Classify(%v, %v) = %v, want %v", tt.mounted, tt.err, got, tt.want)
		}
	}
}
