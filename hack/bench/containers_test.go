package main

import "testing"

func TestDepthAt(t *testing.T) {
	// Three mounts at /t (the dead driver mount and two stacked on it), one at /t/x and one at
	// a path with an escaped space.
	table := `22 1 0:21 / / rw shared:1 - ext4 /dev/vda rw
40 22 0:50 / /t rw,nosuid,nodev shared:5 - fuse.s3fs s3fs rw,user_id=0
41 40 0:51 / /t rw,nosuid,nodev shared:6 - fuse.s3fs s3fs rw,user_id=0
42 41 0:52 /sub /t rw,nosuid,nodev master:7 - fuse.s3fs s3fs rw,user_id=0
43 42 0:53 / /t/x rw - tmpfs tmpfs rw
44 22 0:54 / /a\040b rw - tmpfs tmpfs rw
`
	for _, tc := range []struct {
		point string
		want  int
	}{
		{"/t", 3}, {"/t/x", 1}, {"/a b", 1}, {"/a\\040b", 0}, {"/", 1}, {"/none", 0},
	} {
		got, err := depthAt(table, tc.point)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("depthAt(%q) = %d, want %d", tc.point, got, tc.want)
		}
	}
	if _, err := depthAt("not a mountinfo line\n", "/t"); err == nil {
		t.Error("depthAt of a broken table: no error")
	}
}
