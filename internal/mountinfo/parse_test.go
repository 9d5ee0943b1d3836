package mountinfo

import (
	"errors"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse(`23 1 0:21 / / rw,relatime shared:1 - overlay overlay rw

500 23 0:55 / /data rw,nosuid,nodev,relatime master:7 propagate_from:2 - fuse.s3fs s3fs rw,user_id=0
501 23 0:55 /sub/dir /my\040path ro,relatime - fuse.s3fs my\040src rw
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{ID: 23, ParentID: 1, Dev: "0:21", Root: "/", MountPoint: "/", Options: []string{"rw", "relatime"}, Optional: []string{"shared:1"}, FSType: "overlay", Source: "overlay"},
		{ID: 500, ParentID: 23, Dev: "0:55", Root: "/", MountPoint: "/data", Options: []string{"rw", "nosuid", "nodev", "relatime"}, Optional: []string{"master:7", "propagate_from:2"}, FSType: "fuse.s3fs", Source: "s3fs"},
		{ID: 501, ParentID: 23, Dev: "0:55", Root: "/sub/dir", MountPoint: "/my path", Options: []string{"ro", "relatime"}, FSType: "fuse.s3fs", Source: "my src"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
	if !got[2].ReadOnly() || got[1].ReadOnly() || !got[1].HasOption("nosuid") || got[0].HasOption("nosuid") {
		t.Errorf("option helpers wrong: %+v", got)
	}
	if p := got[1].Place(); p != (Place{ID: 500, ParentID: 23, MountPoint: "/data"}) {
		t.Errorf("Place = %+v", p)
	}
}

func TestParseRejects(t *testing.T) {
	for _, bad := range []string{
		"1 2 3",                            // too short
		"x 1 0:1 / / rw - ext4 a rw",       // id not a number
		"1 y 0:1 / / rw - ext4 a rw",       // parent not a number
		"1 1 01 / / rw - ext4 a rw",        // dev without ':'
		"1 1 a:1 / / rw - ext4 a rw",       // dev not decimal
		"1 1 0:1 / / rw ext4 a rw",         // no separator
		"1 1 0:1 / / rw -",                 // nothing after the separator
		"1 1 0:1 / / rw - ext4",            // no source
		"23 1 0:21 / / rw\n1 1 0:1 / / rw", // a bad line among good ones
	} {
		if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) err = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestValidDev(t *testing.T) {
	for in, want := range map[string]bool{"0:55": true, "259:1": true, "0:": false, ":1": false, "1": false, "-1:2": false, "a:b": false} {
		if got := ValidDev(in); got != want {
			t.Errorf("ValidDev(%q) = %v, want %v", in, got, want)
		}
	}
}
