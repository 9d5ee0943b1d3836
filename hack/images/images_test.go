package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// fakeCompiler writes "<pkg> <goos>/<goarch>" as the binary and records each call.
type fakeCompiler struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeCompiler) compile(_ context.Context, _, pkg, goos, goarch, out string) error {
	f.mu.Lock()
	f.calls = append(f.calls, pkg+" "+goos+"/"+goarch)
	f.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(pkg+" "+goos+"/"+goarch), 0o755)
}

// fakeDebs are the Debian packages' files for an architecture: an s3fs naming it.
func fakeDebs(_ context.Context, arch string) ([]File, error) {
	return []File{{Path: "/usr/bin/s3fs", Data: "s3fs " + arch, Mode: 0o755}, {Path: "/lib/libfuse.so.2", Link: "libfuse.so.2.9.9"}}, nil
}

func (f *fakeCompiler) tools() Tools { return Tools{Compile: f.compile, Packages: fakeDebs} }

func (f *fakeCompiler) newTools(*BuildOptions) (Tools, error) { return f.tools(), nil }

func serveRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// layerFiles reads every regular file and symlink of an image's layers (later layers win).
func layerFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			switch h.Typeflag {
			case tar.TypeReg:
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				files["/"+h.Name] = string(b)
			case tar.TypeSymlink:
				files["/"+h.Name] = "-> " + h.Linkname
			case tar.TypeDir:
				files["/"+strings.TrimSuffix(h.Name, "/")] = fmt.Sprintf("dir %o %d:%d", h.Mode, h.Uid, h.Gid)
			}
		}
		_ = rc.Close()
	}
	return files
}

// Build both platforms into OCI layouts, push them to an in-process registry, and read each image
// back from the registry: an index with one manifest per platform, each with that platform's
// binaries at the Dockerfiles' paths, their entrypoint and user, and the version as the tag.
func TestBuildPushReadBack(t *testing.T) {
	ctx := context.Background()
	out := t.TempDir()
	fc := &fakeCompiler{}
	bo := NewBuildOptions()
	bo.Out, bo.Version = out, "v0.1.0-3-gabcdef0-dirty"
	if err := bo.Validate(); err != nil {
		t.Fatal(err)
	}
	built, err := Build(ctx, bo, fc.tools())
	if err != nil {
		t.Fatal(err)
	}
	if len(built) != 3 {
		t.Fatalf("built %d images, want webhook, agent, helper", len(built))
	}
	// Three packages per platform; the helper (in two images) is compiled once per platform.
	wantCalls := []string{
		"./cmd/pvrescue-webhook linux/amd64", "./cmd/pvrescue-sidecar linux/amd64", "./cmd/pvrescue-webhook linux/arm64",
		"./cmd/pvrescue-sidecar linux/arm64", "./cmd/pvrescue-agent linux/amd64", "./cmd/pvrescue-agent linux/arm64",
	}
	if got := slices.Sorted(slices.Values(fc.calls)); !slices.Equal(got, slices.Sorted(slices.Values(wantCalls))) {
		t.Errorf("compiled %v, want %v", fc.calls, wantCalls)
	}

	reg := serveRegistry(t) + "/team/pvrescue"
	var buf bytes.Buffer
	if err := runCommand(ctx, []string{"push", "-in", out, "-version", bo.Version, "-registry", reg, "-chart", "../../charts/pvrescue"}, &buf, fc.newTools, nil); err != nil {
		t.Fatalf("push: %v\n%s", err, buf.String())
	}
	if n := strings.Count(buf.String(), "pushed "); n != 4 {
		t.Errorf("push printed %d pushed lines, want 3 images and the chart:\n%s", n, buf.String())
	}
	checkPushedChart(t, reg, bo.Version, buf.String())

	want := map[string]struct {
		entry []string
		user  string
		files map[string]string // path → content prefix (the fake binary names its package)
	}{
		"pvrescue-webhook": {[]string{"/pvrescue-webhook"}, NonrootUser, map[string]string{
			"/pvrescue-webhook": "./cmd/pvrescue-webhook", contract.HelperBinaryInImage: "./cmd/pvrescue-sidecar",
			"/etc/passwd": "root:x:0:0", "/tmp": "dir 1777 0:0", "/home/nonroot": "dir 700 65532:65532"}},
		"pvrescue-agent": {[]string{"/pvrescue-agent"}, "", map[string]string{
			"/pvrescue-agent": "./cmd/pvrescue-agent", "/etc/mtab": "-> /proc/self/mounts", "/usr/bin/s3fs": "s3fs ",
			"/lib/libfuse.so.2": "-> libfuse.so.2.9.9"}},
		"pvrescue-helper": {[]string{contract.HelperBinaryInImage}, NonrootUser, map[string]string{
			contract.HelperBinaryInImage: "./cmd/pvrescue-sidecar"}},
	}
	for imgName, w := range want {
		ref, err := name.NewTag(reg + "/" + imgName + ":" + bo.Version)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("%s: read the pushed index: %v", ref, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if im.MediaType != types.OCIImageIndex || im.Annotations["org.opencontainers.image.version"] != bo.Version {
			t.Errorf("%s: index media type %s, version annotation %q", imgName, im.MediaType, im.Annotations["org.opencontainers.image.version"])
		}
		var platforms []string
		for _, d := range im.Manifests {
			p := d.Platform.OS + "/" + d.Platform.Architecture
			platforms = append(platforms, p)
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS+"/"+cf.Architecture != p {
				t.Errorf("%s %s: config says %s/%s", imgName, p, cf.OS, cf.Architecture)
			}
			if !slices.Equal(cf.Config.Entrypoint, w.entry) || cf.Config.User != w.user {
				t.Errorf("%s %s: entrypoint %q user %q, want %q %q", imgName, p, cf.Config.Entrypoint, cf.Config.User, w.entry, w.user)
			}
			if cf.Config.Labels["org.opencontainers.image.version"] != bo.Version {
				t.Errorf("%s %s: version label %q", imgName, p, cf.Config.Labels["org.opencontainers.image.version"])
			}
			files := layerFiles(t, img)
			for path, prefix := range w.files {
				got, ok := files[path]
				if !ok || !strings.HasPrefix(got, prefix) {
					t.Errorf("%s %s: %s = %.40q, want it to start with %q", imgName, p, path, got, prefix)
				}
				if strings.HasPrefix(prefix, "./cmd/") && got != prefix+" "+p {
					t.Errorf("%s %s: %s holds the binary built for %q", imgName, p, path, strings.TrimPrefix(got, prefix+" "))
				}
				if prefix == "s3fs " && got != "s3fs "+d.Platform.Architecture {
					t.Errorf("%s %s: the Debian packages of %q", imgName, p, strings.TrimPrefix(got, prefix))
				}
			}
		}
		if slices.Sort(platforms); !slices.Equal(platforms, DefaultPlatforms) {
			t.Errorf("%s: platforms %v, want %v", imgName, platforms, DefaultPlatforms)
		}
	}

	// A version that was not built is refused before anything is pushed.
	err = runCommand(ctx, []string{"push", "-in", out, "-version", "v9", "-registry", reg}, io.Discard, fc.newTools, nil)
	if !errors.Is(err, ErrNotBuilt) {
		t.Errorf("push of an unbuilt version: %v, want ErrNotBuilt", err)
	}
}

// Building twice gives the same digests (fixed times, sorted entries).
func TestBuildReproducible(t *testing.T) {
	fc := &fakeCompiler{}
	var digests [2][]v1.Hash
	for i := range digests {
		bo := NewBuildOptions()
		bo.Out, bo.Version = t.TempDir(), "v1"
		built, err := Build(context.Background(), bo, fc.tools())
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range built {
			digests[i] = append(digests[i], b.Digest)
		}
	}
	if !slices.Equal(digests[0], digests[1]) {
		t.Errorf("digests differ between builds: %v vs %v", digests[0], digests[1])
	}
}

// -agent-base lays the agent over a multi-platform base (e.g. Debian with s3fs), per platform.
func TestBuildAgentOnBase(t *testing.T) {
	ctx := context.Background()
	reg := serveRegistry(t)
	base := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range DefaultPlatforms {
		goos, goarch, _ := splitPlatform(p)
		l, err := layer([]File{{Path: "/usr/bin/s3fs", Data: "s3fs " + p, Mode: 0o755}})
		if err != nil {
			t.Fatal(err)
		}
		img, err := mutate.AppendLayers(empty.Image, l)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture, cf.Config.Env = goos, goarch, []string{"PATH=/usr/bin", "BASE=1"}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
		base = mutate.AppendManifests(base, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: goarch}}})
	}
	baseRef, _ := name.NewTag(reg + "/debian-s3fs:bookworm")
	if err := remote.WriteIndex(baseRef, base, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}

	bo := NewBuildOptions()
	bo.Out, bo.Version, bo.AgentBase = t.TempDir(), "v1", baseRef.String()
	if err := bo.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(ctx, bo, Tools{Compile: (&fakeCompiler{}).compile}); err != nil {
		t.Fatal(err)
	}
	idx, err := readLayout(filepath.Join(bo.Out, "pvrescue-agent"), "v1")
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	for _, d := range im.Manifests {
		p := d.Platform.OS + "/" + d.Platform.Architecture
		img, _ := idx.Image(d.Digest)
		files := layerFiles(t, img)
		if files["/usr/bin/s3fs"] != "s3fs "+p || files["/pvrescue-agent"] != "./cmd/pvrescue-agent "+p {
			t.Errorf("%s: s3fs %q, agent %q: want the base's and the agent for this platform", p, files["/usr/bin/s3fs"], files["/pvrescue-agent"])
		}
		cf, _ := img.ConfigFile()
		if !slices.Contains(cf.Config.Env, "BASE=1") || !slices.Equal(cf.Config.Entrypoint, []string{"/pvrescue-agent"}) {
			t.Errorf("%s: env %v entrypoint %v: want the base's env kept and the agent's entrypoint", p, cf.Config.Env, cf.Config.Entrypoint)
		}
	}
}

func TestValidate(t *testing.T) {
	o := NewBuildOptions()
	o.Version = "v0.1.0-3-gabcdef0-dirty"
	if err := o.Validate(); err != nil {
		t.Errorf("defaults with a git describe version: %v", err)
	}
	p := NewPushOptions()
	p.Version, p.Registry = "v1", "127.0.0.1:5000/pvrescue"
	if err := p.Validate(); err != nil {
		t.Errorf("push to a local registry: %v", err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // substring of the error; "" means valid
	}{
		{"build no version", []string{"build"}, "-version: required"},
		{"build bad tag", []string{"build", "-version", "v1+meta"}, "not a valid image tag"},
		{"build bad platform", []string{"build", "-version", "v1", "-platforms", "linux"}, `"linux" is not os/arch`},
		{"push no registry", []string{"push", "-version", "v1"}, "-registry: required"},
		{"push bad registry", []string{"push", "-version", "v1", "-registry", "Bad Host/x"}, `-registry "Bad Host/x"`},
		{"no subcommand", nil, "want a subcommand"},
		{"unknown subcommand", []string{"publish"}, `unknown subcommand "publish"`},
		{"build unknown image", []string{"build", "-version", "v1", "-only", "pvrescue-x"}, `-only: no image "pvrescue-x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runCommand(context.Background(), tc.args, io.Discard, (&fakeCompiler{}).newTools, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The real compiler cross-compiles a static binary: the helper for linux/arm64 is an arm64 ELF
// without a program interpreter.
func TestGoBuildCrossStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the helper for arm64 (-short)")
	}
	out := filepath.Join(t.TempDir(), "helper")
	if err := GoBuild(context.Background(), "../..", "./cmd/pvrescue-sidecar", "linux", "arm64", out); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if f.Machine != elf.EM_AARCH64 {
		t.Errorf("machine %v, want EM_AARCH64", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the helper has a program interpreter: not static (CGO_ENABLED=0 missing?)")
		}
	}
	cmd := goBuildCmd(context.Background(), ".", "./x", "linux", "arm64", "o")
	for _, e := range []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"} {
		if !slices.Contains(cmd.Env, e) {
			t.Errorf("go build env lacks %s", e)
		}
	}
}
