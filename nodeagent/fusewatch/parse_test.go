package fusewatch

import (
	"reflect"
	"testing"
)

func TestConnections(t *testing.T) {
	const table = `22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
44 26 0:39 / /tmp/cpl-mnt rw,nosuid,nodev,relatime - fuse.rclone /tmp/cpl-src rw,user_id=0,group_id=0
45 30 0:40 / /var/lib/kubelet/plugins/kubernetes.io/csi/ru.yandex.s3.csi/abc/globalmount rw,nosuid,nodev shared:9 - fuse.s3fs s3fs rw,user_id=0,group_id=0
46 31 0:40 /sub /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount rw shared:9 - fuse.s3fs s3fs rw
47 31 0:41 / /mnt/with\040space rw - fuse fuse rw
48 31 0:42 / /mnt/blk rw - fuseblk /dev/sdb1 rw
49 31 0:43 / /sys/fs/fuse/connections rw - fusectl fusectl rw
garbage line
50 31 8:1 / /data rw - ext4 /dev/sda1 rw
`
	got := Connections(table)
	want := map[Connection][]Mount{
		39: {{ID: 44, Point: "/tmp/cpl-mnt"}},
		40: {{ID: 45, Point: "/var/lib/kubelet/plugins/kubernetes.io/csi/ru.yandex.s3.csi/abc/globalmount"}, {ID: 46, Point: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount"}},
		41: {{ID: 47, Point: "/mnt/with space"}},
		42: {{ID: 48, Point: "/mnt/blk"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Connections =\n%v\nwant\n%v", got, want)
	}
}

func TestFDInfoConnection(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Connection
		ok       bool
	}{
		{"6.18 kernel", "pos:\t0\nflags:\t02100002\nmnt_id:\t23\nino:\t88\nfuse_connection:\t39\n", 39, true},
		{"older kernel", "pos:\t0\nflags:\t02100002\nmnt_id:\t23\nino:\t88\n", 0, false},
		{"garbled", "fuse_connection:\tx\n", 0, false},
		{"empty", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := FDInfoConnection(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("FDInfoConnection = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// Only the FUSE device's exact link text passes: a tenant's file named fuse anywhere else is
// never looked at further (no stat, no fdinfo).
func TestFuseDeviceLink(t *testing.T) {
	for _, tc := range []struct {
		link string
		want bool
	}{
		{"/dev/fuse", true},
		{"/data/fuse", false},          // a tenant's file on a volume
		{"/mnt/nfs/dev/fuse", false},   // named like the device, elsewhere
		{"fuse", false},                // relative
		{"/dev/fuse (deleted)", false}, // an unlinked node
		{"/dev//fuse", false},
		{"/dev/fuse/", false},
		{"/dev/fuse\n", false},
		{"/dev/fusectl", false},
		{"/proc/1/root/dev/fuse", false},
		{"anon_inode:[eventpoll]", false},
		{"socket:[12345]", false},
		{"", false},
	} {
		if got := FuseDeviceLink(tc.link); got != tc.want {
			t.Errorf("FuseDeviceLink(%q) = %t, want %t", tc.link, got, tc.want)
		}
	}
}
