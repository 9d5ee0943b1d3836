package localdisk

import (
	"errors"
	"testing"
)

func TestParseLoopName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{
		{"loop0", 0, false},
		{"loop101", 101, false},
		{"loop", 0, true},
		{"loop1p1", 0, true},
		{"loop-1", 0, true},
		{"loop01", 0, true},
		{"sda", 0, true},
		{"loop 1", 0, true},
	} {
		got, err := ParseLoopName(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseLoopName(%q) = %d, %v; want %d, err=%v", tc.in, got, err, tc.want, tc.err)
		}
		if err != nil && !errors.Is(err, ErrNotLoop) {
			t.Errorf("ParseLoopName(%q) error %v does not wrap ErrNotLoop", tc.in, err)
		}
	}
}

func TestParseLoopLinkTarget(t *testing.T) {
	for _, tc := range []struct {
		dev, target string
		want        int
		err         bool
	}{
		{"/dev", "/dev/loop101", 101, false},
		{"/dev", "/dev/loop101/", 0, true},
		{"/dev", "/dev/sda", 0, true},
		{"/dev", "../../loop101", 0, true},
		{"/dev", "loop101", 0, true},
		{"/dev", "/dev/../dev/loop101", 0, true},
		{"/dev", "/tmp/loop101", 0, true},
		{"/dev", "/dev/mapper/loop101", 0, true},
	} {
		got, err := ParseLoopLinkTarget(tc.dev, tc.target)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseLoopLinkTarget(%q,%q) = %d, %v; want %d, err=%v", tc.dev, tc.target, got, err, tc.want, tc.err)
		}
	}
}

func TestParseBackingFile(t *testing.T) {
	for _, tc := range []struct {
		in, path string
		deleted  bool
	}{
		{"/var/lib/pvrescue/localdisk/pv1.img\n", "/var/lib/pvrescue/localdisk/pv1.img", false},
		{"/var/lib/pvrescue/localdisk/pv1.img (deleted)\n", "/var/lib/pvrescue/localdisk/pv1.img", true},
		{"/dev/loop101\n", "/dev/loop101", false},
		{"", "", false},
	} {
		p, d := ParseBackingFile(tc.in)
		if p != tc.path || d != tc.deleted {
			t.Errorf("ParseBackingFile(%q) = %q, %v; want %q, %v", tc.in, p, d, tc.path, tc.deleted)
		}
	}
}

func TestInDir(t *testing.T) {
	for _, tc := range []struct {
		dir, path string
		want      bool
	}{
		{"/var/lib/pvrescue", "/var/lib/pvrescue/localdisk/a.img", true},
		{"/var/lib/pvrescue", "/var/lib/pvrescue", false},
		{"/var/lib/pvrescue", "/var/lib/pvrescue-other/a.img", false},
		{"/var/lib/pvrescue", "/var/lib/pvrescue/../x", false},
		{"/var/lib/pvrescue", "relative/a.img", false},
		{"/var/lib/pvrescue/", "/var/lib/pvrescue/a", true},
		{"/dev", "/dev/disk/by-id/x", true},
	} {
		if got := InDir(tc.dir, tc.path); got != tc.want {
			t.Errorf("InDir(%q,%q) = %v, want %v", tc.dir, tc.path, got, tc.want)
		}
	}
}

func TestValidatePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want error
	}{
		{"/dev/disk/by-id/nvme-1", nil},
		{"disk/by-id/nvme-1", ErrRelativePath},
		{"/dev/disk/../../etc/passwd", ErrRelativePath},
		{"/dev/disk/by-id/x/", ErrRelativePath},
		{"/mnt/disks/ssd0", nil},
		{"/mnt/fast-disks/ssd0", nil},
		{"/dev/sdb", nil}, // a kernel name: followed, never faked
		{"/srv/disks/ssd0", ErrNotUnderDev},
		{"/dev", ErrNotUnderDev},
		{"/devices/x", ErrNotUnderDev},
	} {
		err := ValidatePath(DefaultPathRoots, "/dev", tc.path)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("ValidatePath(%q) = %v, want %v", tc.path, err, tc.want)
		}
	}
}

func TestIsKernelName(t *testing.T) {
	for p, want := range map[string]bool{
		"/dev/sdb": true, "/dev/nvme0n1": true, "/dev/mapper/vg-lv": true, "/dev/loop101": true,
		"/dev/disk/by-id/nvme-1": false, "/dev": false, "/mnt/fast-disks/a": false,
	} {
		if got := IsKernelName("/dev", p); got != want {
			t.Errorf("IsKernelName(%q) = %v, want %v", p, got, want)
		}
	}
}
