//go:build imagecheck

package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// make image-check: the images as `make images` builds them (real go builds, the lockfile's Debian
// packages), built twice, then run.

var debCache = flag.String("deb-cache", defaultDebCache(), "the .deb cache (make image-check passes the Makefile's)")

// TestImages builds the three images for linux/amd64 and linux/arm64 twice from this checkout
// into two directories: every index digest must be equal (the lockfile pins the packages, the
// builds are trimmed and the layers' times fixed). Then each platform's image is unpacked into a
// directory and its binaries run from there: the arm64 ones under Debian's qemu-user-static with
// the unpacked image as the loader's root (-L), the amd64 ones in a chroot of it — the agent's s3fs
// and fusermount3 load their libraries from the image's own root, not the host's.
func TestImages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		t.Fatalf("qemu-aarch64-static missing: run `make images-deps` (apt-get install qemu-user-static)")
	}
	if os.Getuid() != 0 {
		t.Fatal("needs root (chroot into the unpacked amd64 images): run as root (make image-check)")
	}
	var built [2][]Built
	var took [2]time.Duration
	for i := range built {
		o := NewBuildOptions()
		o.Root, o.Out, o.Version, o.Lock, o.DebCache = "../..", t.TempDir(), "v0.0.0-imagecheck", DefaultLock[len("hack/images/"):], *debCache
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		tools, err := HostTools(o)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if built[i], err = Build(ctx, o, tools); err != nil {
			t.Fatalf("build %d: %v", i+1, err)
		}
		took[i] = time.Since(t0)
	}
	for j := range built[0] {
		a, b := built[0][j], built[1][j]
		if a.Digest != b.Digest {
			t.Errorf("%s: two builds of one checkout, two digests: %s and %s", a.Name, a.Digest, b.Digest)
		} else {
			t.Logf("RESULT reproducible: %s %s in both builds (%s, then %s)", a.Name, a.Digest, took[0].Round(time.Second), took[1].Round(time.Second))
		}
	}
	if _, err := os.Stat("/lib/ld-linux-aarch64.so.1"); err == nil {
		t.Log("note: this host has an arm64 loader of its own (/lib/ld-linux-aarch64.so.1); qemu -L still prefers the image's")
	}

	// what runs, per image: the command and a string its output must hold
	type run struct {
		args []string
		want string
	}
	checks := map[string][]run{
		"pvrescue-webhook": {{[]string{"/pvrescue-webhook", "--help"}, "Usage"}, {[]string{contract.HelperBinaryInImage}, "usage: pvrescue-sidecar"}},
		"pvrescue-agent": {
			{[]string{"/pvrescue-agent", "--help"}, "Usage"},
			{[]string{"/usr/bin/s3fs", "--version"}, "V1.90"},
			{[]string{"/bin/fusermount3", "-V"}, "fusermount3 version: 3.14.0"},
		},
		"pvrescue-helper": {{[]string{contract.HelperBinaryInImage}, "usage: pvrescue-sidecar"}},
	}
	for _, b := range built[0] {
		idx, err := readLayout(b.Dir, "v0.0.0-imagecheck")
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range im.Manifests {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(t.TempDir(), "root")
			if err := unpack(img, root); err != nil {
				t.Fatalf("%s %s: unpack: %v", b.Name, d.Platform.Architecture, err)
			}
			for _, r := range checks[b.Name] {
				var cmd *exec.Cmd
				switch d.Platform.Architecture {
				case "arm64":
					// -L: the guest's loader and every file it opens are looked up under root first
					cmd = exec.CommandContext(ctx, qemu, append([]string{"-L", root, filepath.Join(root, r.args[0])}, r.args[1:]...)...)
				case "amd64":
					cmd = exec.CommandContext(ctx, "chroot", append([]string{root}, r.args...)...)
				default:
					t.Fatalf("no way to run %s here", d.Platform.Architecture)
				}
				cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if err != nil && !errors.As(err, &ee) { // a usage exit code is fine; not starting is not
					t.Errorf("%s %s: %v: %v", b.Name, d.Platform.Architecture, r.args, err)
					continue
				}
				if !strings.Contains(string(out), r.want) {
					t.Errorf("%s linux/%s: %v printed no %q (%v):\n%s", b.Name, d.Platform.Architecture, r.args, r.want, err, out)
					continue
				}
				t.Logf("RESULT %s linux/%s: %s ran from the image's root (%s): %q", b.Name, d.Platform.Architecture, strings.Join(r.args, " "),
					map[string]string{"arm64": "qemu-aarch64-static -L", "amd64": "chroot"}[d.Platform.Architecture], firstLine(string(out), r.want))
			}
		}
	}
}

func firstLine(out, want string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, want) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// unpack writes an image's layers under root: directories, regular files, symlinks.
func unpack(img v1.Image, root string) error {
	ls, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			p := filepath.Join(root, filepath.Clean("/"+h.Name))
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(p, 0o755)
			case tar.TypeReg:
				if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
					var f *os.File
					if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777)); err == nil {
						_, err = io.Copy(f, tr) //nolint:gosec // our own image's layer, sized by its tar header
						if cerr := f.Close(); err == nil {
							err = cerr
						}
					}
				}
			case tar.TypeSymlink:
				if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
					err = os.Symlink(h.Linkname, p)
				}
			default:
				err = fmt.Errorf("unexpected entry type %q", h.Typeflag)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
		_ = rc.Close()
	}
	return nil
}
