package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// fakeApt serves apt-cache records from a map (name or name:arch → record).
type fakeApt map[string]string

func (f fakeApt) Show(_ context.Context, name string) (string, error) {
	if s, ok := f[name]; ok {
		return s, nil
	}
	return "", fmt.Errorf("%w: %s", ErrNoPackage, name)
}

func (f fakeApt) Download(context.Context, Package, string) (string, error) {
	return "", fmt.Errorf("not here")
}

func rec(name, arch, section, multiArch, depends string) string {
	return fmt.Sprintf("Package: %s\nVersion: 1.0-1\nArchitecture: %s\nSection: %s\nMulti-Arch: %s\nDepends: %s\nFilename: pool/main/%s_%s.deb\nSHA256: %s\nDescription: x\n continued\n\n",
		name, arch, section, multiArch, depends, name, arch, strings.Repeat("ab", 32))
}

// The closure follows shared libraries by name (first alternative apt has, virtual names skipped),
// takes Architecture: all roots, and leaves programs the maintainer scripts use.
func TestLockClosure(t *testing.T) {
	apt := fakeApt{
		"s3fs:arm64":            rec("s3fs", "arm64", "utils", "foreign", "fuse, mime-support, libc6 (>= 2.17), libcurl3-gnutls (>= 7.16.2) | libcurl4, zlib1g"),
		"fuse3:arm64":           rec("fuse3", "arm64", "utils", "foreign", "libc6 (>= 2.34), libfuse3-3 (= 3.14.0-4), adduser, mount (>= 2.19.1)"),
		"libc6:arm64":           rec("libc6", "arm64", "libs", "same", "libgcc-s1"),
		"libgcc-s1:arm64":       rec("libgcc-s1", "arm64", "libs", "same", "libc6 (>= 2.35)"),
		"libfuse3-3:arm64":      rec("libfuse3-3", "arm64", "libs", "same", "libc6"),
		"libcurl3-gnutls:arm64": rec("libcurl3-gnutls", "arm64", "libs", "same", "libc6, libzstd1 (>= 1.5.2)"),
		"libzstd1:arm64":        rec("libzstd1", "arm64", "libs", "same", "libc6"),
		"zlib1g:arm64":          rec("zlib1g", "arm64", "libs", "same", "libc6"),
		"adduser:arm64":         rec("adduser", "all", "admin", "foreign", "passwd"),
		"mount:arm64":           rec("mount", "arm64", "admin", "foreign", "util-linux"),
		"mime-support":          rec("mime-support", "all", "net", "foreign", "mailcap"),
		"media-types":           rec("media-types", "all", "net", "foreign", ""),
	}
	got, err := LockClosure(context.Background(), apt, "arm64", []string{"s3fs", "fuse3", "media-types"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.Name+":"+p.Arch)
	}
	want := []string{"fuse3:arm64", "libc6:arm64", "libcurl3-gnutls:arm64", "libfuse3-3:arm64", "libgcc-s1:arm64", "libzstd1:arm64", "media-types:all", "s3fs:arm64", "zlib1g:arm64"}
	if !slices.Equal(names, want) {
		t.Errorf("closure %v, want %v", names, want)
	}
	if _, err := LockClosure(context.Background(), apt, "arm64", []string{"s3fs-missing"}); err == nil {
		t.Error("a root apt does not have resolved")
	}
	// a root only of another architecture is not taken for this one
	apt["rclone"] = rec("rclone", "amd64", "net", "", "")
	if _, err := LockClosure(context.Background(), apt, "arm64", []string{"rclone"}); err == nil {
		t.Error("rclone:amd64 taken for arm64")
	}
}

func TestLockRoundTrip(t *testing.T) {
	l := Lock{"arm64": {{Name: "s3fs", Version: "1.90-1", Arch: "arm64", SHA256: strings.Repeat("0f", 32), Filename: "pool/main/s/s3fs-fuse/s3fs_1.90-1_arm64.deb"}},
		"amd64": {{Name: "zlib1g", Version: "1:1.2.13.dfsg-1", Arch: "amd64", SHA256: strings.Repeat("aa", 32), Filename: "pool/z.deb"},
			{Name: "media-types", Version: "10.0.0", Arch: "all", SHA256: strings.Repeat("bb", 32), Filename: "pool/m.deb"}}}
	var b bytes.Buffer
	if err := l.Format(&b); err != nil {
		t.Fatal(err)
	}
	back, err := ParseLock(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back["amd64"][0].Name != "media-types" || back["amd64"][1] != l["amd64"][0] || back["arm64"][0] != l["arm64"][0] {
		t.Errorf("round trip: %+v", back)
	}
	for _, bad := range []string{"amd64 s3fs 1.90 amd64 nothex pool/x", "amd64 s3fs 1.90 amd64"} {
		if _, err := ParseLock(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The lockfile in the tree pins the agent's packages for both platforms, each with its libraries.
func TestCheckedInLock(t *testing.T) {
	f, err := os.Open("debian.lock")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	l, err := ParseLock(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range DefaultPlatforms {
		arch := strings.TrimPrefix(p, "linux/")
		var names []string
		for _, pkg := range l[arch] {
			names = append(names, pkg.Name)
			if pkg.Arch != arch && pkg.Arch != "all" {
				t.Errorf("%s: %s is %s", arch, pkg.Name, pkg.Arch)
			}
		}
		for _, w := range append(slices.Clone(AgentPackages), "libc6", "libfuse2", "libfuse3-3", "libcurl3-gnutls") {
			if !slices.Contains(names, w) {
				t.Errorf("%s: debian.lock lacks %s (make image-lock): %v", arch, w, names)
			}
		}
	}
}

// A package's data tar becomes layer entries: files with their modes, symlinks, hard links as
// copies; documentation other than copyright left out.
func TestTarFiles(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	add := func(h *tar.Header, data string) {
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(data))
	}
	add(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "./bin/fusermount3", Typeflag: tar.TypeReg, Mode: 0o4755}, "ELF")
	add(&tar.Header{Name: "./bin/fusermount", Typeflag: tar.TypeSymlink, Linkname: "fusermount3"}, "")
	add(&tar.Header{Name: "./usr/share/doc/fuse3/copyright", Typeflag: tar.TypeReg, Mode: 0o644}, "GPL")
	add(&tar.Header{Name: "./usr/share/doc/fuse3/changelog.gz", Typeflag: tar.TypeReg, Mode: 0o644}, "x")
	add(&tar.Header{Name: "./usr/share/man/man1/fusermount3.1.gz", Typeflag: tar.TypeReg, Mode: 0o644}, "x")
	add(&tar.Header{Name: "./sbin/mount.fuse3", Typeflag: tar.TypeLink, Linkname: "./bin/fusermount3"}, "")
	_ = tw.Close()
	files, err := tarFiles(&b)
	if err != nil {
		t.Fatal(err)
	}
	want := []File{
		{Path: "/bin/fusermount3", Data: "ELF", Mode: 0o4755},
		{Path: "/bin/fusermount", Link: "fusermount3"},
		{Path: "/usr/share/doc/fuse3/copyright", Data: "GPL", Mode: 0o644},
		{Path: "/sbin/mount.fuse3", Data: "ELF", Mode: 0o4755},
	}
	if !slices.Equal(files, want) {
		t.Errorf("files %+v\nwant %+v", files, want)
	}
}

func TestParseRecordDepends(t *testing.T) {
	r, err := parseRecord(rec("x", "amd64", "libs", "same", "a (>= 1) | b, c:any, d [amd64]"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.Depends) != "[[a b] [c] [d]]" || !r.isLibrary() {
		t.Errorf("depends %v library %v", r.Depends, r.isLibrary())
	}
}
