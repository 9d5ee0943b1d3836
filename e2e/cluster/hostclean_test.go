package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMountPointsUnder(t *testing.T) {
	const info = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
100 22 0:50 / /var/lib/kubelet rw shared:40 - tmpfs tmpfs rw
101 100 0:51 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv/mount rw shared:41 - fuse.s3fs s3fs rw
102 101 0:52 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv/mount rw shared:42 - fuse.s3fs s3fs rw
103 22 0:53 / /var/lib/kubeletx rw - tmpfs tmpfs rw
104 22 0:54 / /w/with\040space rw - tmpfs tmpfs rw
`
	tests := []struct {
		name  string
		roots []string
		want  []string
	}{
		{"deepest first, stacked kept", []string{"/var/lib/kubelet"}, []string{
			"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv/mount",
			"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv/mount",
			"/var/lib/kubelet",
		}},
		{"prefix is not a parent", []string{"/var/lib/kube"}, nil},
		{"octal escapes", []string{"/w/"}, []string{"/w/with space"}},
		{"no roots", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, MountPointsUnder(info, tt.roots...)); diff != "" {
				t.Errorf("MountPointsUnder (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnderAny(t *testing.T) {
	tests := []struct {
		p    string
		want bool
	}{
		{"/w/disks/d1.img", true},
		{"/w/disks/d1.img (deleted)", true},
		{"/w", true},
		{"/wx/d.img", false},
		{"/other", false},
	}
	for _, tt := range tests {
		if got := UnderAny(tt.p, "/w", "/var/lib/pvrescue"); got != tt.want {
			t.Errorf("UnderAny(%q) = %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestFirstServiceIP(t *testing.T) {
	ip, err := FirstServiceIP("10.0.0.0/24")
	if err != nil || ip.String() != "10.0.0.1" {
		t.Fatalf("FirstServiceIP = %v, %v; want 10.0.0.1", ip, err)
	}
	if _, err := FirstServiceIP("fd00::/64"); err == nil {
		t.Fatal("FirstServiceIP(IPv6) should fail")
	}
}

func TestStatStartTime(t *testing.T) {
	const stat = "4242 (kube (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 987654 1000000 500 18446744073709551615"
	if got := StatStartTime(stat); got != "987654" {
		t.Errorf("StatStartTime = %q, want 987654", got)
	}
	if got := StatStartTime("garbage"); got != "" {
		t.Errorf("StatStartTime(garbage) = %q, want empty", got)
	}
}

func TestForeignLoopBacking(t *testing.T) {
	for back, want := range map[string]bool{
		"/":                             true,
		"/localdisk/pv-1.img (deleted)": true,
		"/localdisk/pv-1.img":           true,
		"/tmp/other-test/disk.img":      false,
		"/var/lib/pvrescue/localdisk/x": false,
		"/tmp/x.img (deleted)":          false,
	} {
		if got := ForeignLoopBacking(back); got != want {
			t.Errorf("ForeignLoopBacking(%q) = %v, want %v", back, got, want)
		}
	}
}
