package mountinfo

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// kernelEscape escapes a path field the way the kernel's mangle_path does for mountinfo: space,
// tab, newline and backslash as \ooo, every other byte raw. Written here, apart from Unescape, so
// the round trip checks the parser against an independent reading of the format.
func kernelEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, `\%03o`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// kernelLine writes m as one mountinfo line.
func kernelLine(m Mount) string {
	f := []string{strconv.Itoa(m.ID), strconv.Itoa(m.ParentID), m.Dev, kernelEscape(m.Root),
		kernelEscape(m.MountPoint), strings.Join(m.Options, ",")}
	f = append(f, m.Optional...)
	f = append(f, "-", kernelEscape(m.FSType), kernelEscape(m.Source), "rw,user_id=0")
	return strings.Join(f, " ")
}

// FuzzParseLine: a line built by the kernel's rules from any paths parses back to exactly those
// paths, and no input makes the parser panic; whatever parses, written again, parses the same.
func FuzzParseLine(f *testing.F) {
	f.Add("/\u00a0/data\u00a0rw", "/data", "s3fs", "fuse.s3fs", true, uint8(1), "23 1 0:21 / / rw shared:1 - overlay overlay rw")
	f.Add("/a\rb\vc\fd\u0085", "/m n\tx\ny\\z", "", "tmpfs", false, uint8(0), "7 1 0:9 /\\040 /x ro - tmpfs \\134 rw")
	f.Add("/\xff\xfe", "/-", "-", "a b", false, uint8(3), "1 1 0:1 / / rw - ext4 a rw x")
	f.Fuzz(func(t *testing.T, root, point, source, fstype string, ro bool, nopt uint8, raw string) {
		// Any text: never a panic; a parsed line written again parses to the same Mount.
		if m, err := ParseLine(raw); err == nil {
			again, err := ParseLine(kernelLine(m))
			if err != nil || !reflect.DeepEqual(again, m) {
				t.Fatalf("re-parse of %q: %#v, %v; first %#v", raw, again, err, m)
			}
		}
		_, _ = Parse(raw)

		// Kernel-shaped lines from arbitrary paths: exact round trip. A path is never empty in
		// mountinfo (root and mount point begin with '/', a type has a name).
		if root == "" || point == "" || fstype == "" {
			return
		}
		opt := "rw"
		if ro {
			opt = "ro"
		}
		want := Mount{ID: 42, ParentID: 7, Dev: "0:55", Root: root, MountPoint: point,
			Options: []string{opt, "nosuid", "relatime"}, FSType: fstype, Source: source}
		for i := 0; i < int(nopt%4); i++ {
			want.Optional = append(want.Optional, "shared:"+strconv.Itoa(i+1))
		}
		line := kernelLine(want)
		got, err := ParseLine(line)
		if err != nil {
			t.Fatalf("ParseLine(%q): %v", line, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseLine(%q):\n got %#v\nwant %#v", line, got, want)
		}
		if got.ReadOnly() != ro {
			t.Fatalf("ReadOnly = %v, want %v for %q", got.ReadOnly(), ro, line)
		}
	})
}
