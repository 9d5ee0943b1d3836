//go:build node

package mountinfo_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// byteGroups returns every byte 0x01–0xFF except '/', in groups of n (names stay under NAME_MAX).
func byteGroups(n int) [][]byte {
	var all []byte
	for c := 1; c <= 0xff; c++ {
		if c != '/' {
			all = append(all, byte(c))
		}
	}
	var out [][]byte
	for len(all) > 0 {
		k := min(n, len(all))
		out = append(out, all[:k])
		all = all[k:]
	}
	return out
}

// mountID is the kernel's ID of the mount path is on (statx STATX_MNT_ID), the same ID mountinfo
// prints first: it identifies the line without reading any path out of the text.
func mountID(t *testing.T, path string) int {
	t.Helper()
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
		t.Fatalf("statx %q: %v", path, err)
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		t.Fatalf("statx %q: the kernel returned no mount ID", path)
	}
	return int(st.Mnt_id)
}

// TestNodeParseEveryByte mounts tmpfs filesystems, and subPath-like binds of a subdirectory of
// each, at paths holding every byte 0x01–0xFF but '/', with sources of those bytes too, then reads
// /proc/self/mountinfo: every line parses, and the line of each mount (found by its statx mount
// ID) has exactly the mount point, root, source and options that were created. Every other bind
// is read-only, so the per-mount options are checked both ways.
func TestNodeParseEveryByte(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	type want struct {
		path, root, source string
		options            []string
	}
	var wants []want
	unmount := func(p string) {
		t.Cleanup(func() {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %q: %v", p, err)
			}
		})
	}
	for i, g := range byteGroups(32) {
		name := string(g)
		fs := filepath.Join(base, "fs-"+name)
		bind := filepath.Join(base, "bind-"+name)
		for _, d := range []string{fs, bind} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatalf("mkdir %q: %v", d, err)
			}
		}
		source := "src " + name
		if err := unix.Mount(source, fs, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k"); err != nil {
			t.Fatalf("mount tmpfs at %q: %v", fs, err)
		}
		unmount(fs)
		wants = append(wants, want{path: fs, root: "/", source: source, options: []string{"rw", "nosuid", "nodev", "relatime"}})

		// A subPath bind: a subdirectory of the filesystem, as kubelet binds a subPath.
		sub := "sub\u00a0" + name
		if err := os.Mkdir(filepath.Join(fs, sub), 0o755); err != nil {
			t.Fatalf("mkdir sub: %v", err)
		}
		if err := unix.Mount(filepath.Join(fs, sub), bind, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind %q: %v", bind, err)
		}
		unmount(bind)
		opts := []string{"rw", "nosuid", "nodev", "relatime"}
		if i%2 == 0 {
			if err := unix.Mount("", bind, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
				t.Fatalf("remount %q read-only: %v", bind, err)
			}
			opts = []string{"ro", "nosuid", "nodev", "relatime"}
		}
		wants = append(wants, want{path: bind, root: "/" + sub, source: source, options: opts})
	}

	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	// Strict: one line the parser cannot read fails the whole table.
	table, err := mountinfo.Parse(string(raw))
	if err != nil {
		t.Fatalf("parse /proc/self/mountinfo: %v", err)
	}
	byID := map[int]mountinfo.Mount{}
	for _, m := range table {
		byID[m.ID] = m
	}
	for _, w := range wants {
		id := mountID(t, w.path)
		m, ok := byID[id]
		if !ok {
			t.Errorf("mount %d at %q: no mountinfo line with that ID", id, w.path)
			continue
		}
		if m.MountPoint != w.path || m.Root != w.root || m.Source != w.source || m.FSType != "tmpfs" ||
			!slices.Equal(m.Options, w.options) {
			t.Errorf("mount %d:\n got point %q root %q source %q type %q options %q\nwant point %q root %q source %q type tmpfs options %q",
				id, m.MountPoint, m.Root, m.Source, m.FSType, m.Options, w.path, w.root, w.source, w.options)
		}
		if m.ReadOnly() != (w.options[0] == "ro") {
			t.Errorf("mount %d at %q: ReadOnly() = %v", id, w.path, m.ReadOnly())
		}
	}
	if len(wants) != 16 {
		t.Fatalf("%d mounts checked, want 16 (8 groups of bytes, a filesystem and a bind each)", len(wants))
	}
}
