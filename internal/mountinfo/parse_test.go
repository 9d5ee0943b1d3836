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
		"1 1 0:1 / /a\u00a0b ro - ext4 a",  // two fields after "-": a no-break space does not separate
		"1 1 0:1  / / rw - ext4 a rw",      // two spaces: an empty root
		"1 1 0:1 / / rw  - ext4 a rw",      // two spaces: an empty optional field
		"1 1 0:1 / / rw - ext4 a rw x",     // a fourth field after "-"
		"1 1 0:1 / / rw - ext4 a rw ",      // a trailing space
		"1 1 0:1 / / rw\t- ext4 a rw",      // a tab does not separate
		"-1 1 0:1 / / rw - ext4 a rw",      // negative id
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

// TestParseLineKeepsRawBytes: the kernel escapes only space, tab, newline and backslash; every
// other byte of a path (carriage return, vertical tab, form feed, U+0085, U+00A0, invalid UTF-8)
// arrives raw and must neither split a field nor be altered.
func TestParseLineKeepsRawBytes(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       Mount
	}{
		{
			name: "no-break spaces around a subPath",
			line: "600 23 0:220 /\u00a0/data\u00a0rw /data ro,relatime - fuse.s3fs s3fs rw,user_id=0",
			want: Mount{ID: 600, ParentID: 23, Dev: "0:220", Root: "/\u00a0/data\u00a0rw", MountPoint: "/data",
				Options: []string{"ro", "relatime"}, FSType: "fuse.s3fs", Source: "s3fs"},
		},
		{
			name: "carriage return, vertical tab, form feed, NEL",
			line: "7 1 0:9 /a\rb\vc\fd\u0085e /m\r\v\f\u0085 rw master:3 - tmpfs x\ry rw",
			want: Mount{ID: 7, ParentID: 1, Dev: "0:9", Root: "/a\rb\vc\fd\u0085e", MountPoint: "/m\r\v\f\u0085",
				Options: []string{"rw"}, Optional: []string{"master:3"}, FSType: "tmpfs", Source: "x\ry"},
		},
		{
			name: "the four kernel escapes",
			line: `8 1 0:9 /a\040b\011c\012d\134e /m\040\134040 ro - tmpfs \040 rw`,
			want: Mount{ID: 8, ParentID: 1, Dev: "0:9", Root: "/a b\tc\nd\\e", MountPoint: `/m \040`,
				Options: []string{"ro"}, FSType: "tmpfs", Source: " "},
		},
		{
			name: "invalid UTF-8 and high bytes",
			line: "9 1 0:9 /\xff\xfe\x80 /\xc3 rw - tmpfs \xa0 rw",
			want: Mount{ID: 9, ParentID: 1, Dev: "0:9", Root: "/\xff\xfe\x80", MountPoint: "/\xc3",
				Options: []string{"rw"}, FSType: "tmpfs", Source: "\xa0"},
		},
		{
			name: "a lone dash as a path is escaped-free but is the root, not the separator",
			line: "10 1 0:9 - /- rw shared:1 - tmpfs - rw",
			want: Mount{ID: 10, ParentID: 1, Dev: "0:9", Root: "-", MountPoint: "/-",
				Options: []string{"rw"}, Optional: []string{"shared:1"}, FSType: "tmpfs", Source: "-"},
		},
		{
			name: "empty source (mount with an empty device name)",
			line: "11 1 0:9 / /e rw - tmpfs  rw,size=4k",
			want: Mount{ID: 11, ParentID: 1, Dev: "0:9", Root: "/", MountPoint: "/e",
				Options: []string{"rw"}, FSType: "tmpfs", Source: ""},
		},
		{
			name: "a trailing carriage return belongs to the super options",
			line: "12 1 0:9 / /f rw - tmpfs t rw\r",
			want: Mount{ID: 12, ParentID: 1, Dev: "0:9", Root: "/", MountPoint: "/f",
				Options: []string{"rw"}, FSType: "tmpfs", Source: "t"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLine(tc.line)
			if err != nil {
				t.Fatalf("ParseLine(%q): %v", tc.line, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseLine(%q):\n got %#v\nwant %#v", tc.line, got, tc.want)
			}
		})
	}
}

func TestParseLineSuper(t *testing.T) {
	m, super, err := ParseLineSuper("35 24 0:30 / /sys/fs/cgroup/memory rw,nosuid shared:13 - cgroup cgroup rw,memory")
	if err != nil || super != "rw,memory" || m.FSType != "cgroup" || m.MountPoint != "/sys/fs/cgroup/memory" {
		t.Errorf("ParseLineSuper = %+v %q %v", m, super, err)
	}
}
