package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Binary is a Go package compiled into an image at Path.
type Binary struct {
	Pkg  string // e.g. ./cmd/pvrescue-webhook
	Path string // absolute path in the image
}

// File is a literal file, directory or symlink of an image.
type File struct {
	Path string
	Data string
	Dir  bool
	Link string
	Mode int64
	UID  int // owner (and group) of the entry; 0: root
}

// Spec is one image: what Dockerfile.webhook or Dockerfile.agent puts in it, without their base.
type Spec struct {
	Name       string // repository name, e.g. pvrescue-webhook
	Binaries   []Binary
	Files      []File
	Entrypoint []string
	User       string // "" runs as root
	Ports      []string
	// Base, when set, is a multi-platform image whose layers go under this image's.
	Base string
	// Debian adds the files of the lockfile's Debian packages for each platform (the agent's
	// s3fs, fuse3 and their libraries) when there is no Base.
	Debian bool
}

// NonrootUser is distroless "nonroot", the user of Dockerfile.webhook's image and the helper's.
const NonrootUser = "65532:65532"

// distrolessFiles are the files of gcr.io/distroless/static's nonroot image the binaries can
// notice: the users, a home, a world-writable /tmp. (Not copied: CA certificates, tzdata; the
// webhook reaches only the apiserver, with the service account's CA.)
var distrolessFiles = []File{
	{Path: "/etc/passwd", Data: "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
	{Path: "/etc/group", Data: "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"},
	{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: 65532},
	{Path: "/tmp", Dir: true, Mode: 0o1777},
}

// agentFiles are the few files a root image needs; /etc/mtab as Debian has it.
var agentFiles = []File{
	{Path: "/etc/passwd", Data: "root:x:0:0:root:/root:/bin/sh\n"},
	{Path: "/etc/group", Data: "root:x:0:\n"},
	{Path: "/etc/mtab", Link: "/proc/self/mounts"},
	{Path: "/tmp", Dir: true, Mode: 0o1777},
}

// Specs are the three images. The webhook image carries the helper too (the chart's and
// manifests' default helper.image); pvrescue-helper holds only the helper, a far smaller pull in
// every opted-in namespace.
func Specs(agentBase string) []Spec {
	helper := Binary{Pkg: "./cmd/pvrescue-sidecar", Path: contract.HelperBinaryInImage}
	return []Spec{
		{
			Name:       "pvrescue-webhook",
			Binaries:   []Binary{{Pkg: "./cmd/pvrescue-webhook", Path: "/pvrescue-webhook"}, helper},
			Files:      distrolessFiles,
			Entrypoint: []string{"/pvrescue-webhook"},
			User:       NonrootUser,
			Ports:      []string{"9443/tcp", "8080/tcp", "8081/tcp"},
		},
		{
			Name:       "pvrescue-agent",
			Binaries:   []Binary{{Pkg: "./cmd/pvrescue-agent", Path: "/pvrescue-agent"}},
			Files:      agentFiles,
			Entrypoint: []string{"/pvrescue-agent"},
			Base:       agentBase,
			Debian:     agentBase == "",
		},
		{
			Name:       "pvrescue-helper",
			Binaries:   []Binary{helper},
			Files:      distrolessFiles,
			Entrypoint: []string{contract.HelperBinaryInImage},
			User:       NonrootUser,
		},
	}
}

// Compiler builds the Go package pkg for goos/goarch into the file out.
type Compiler func(ctx context.Context, root, pkg, goos, goarch, out string) error

// PackageFiles returns the files of the pinned Debian packages for the Debian architecture arch.
type PackageFiles func(ctx context.Context, arch string) ([]File, error)

// Tools are what Build runs: the Go compiler and the Debian packages' source.
type Tools struct {
	Compile  Compiler
	Packages PackageFiles
}

// HostTools compile with the host's go and fetch packages with its apt, pinned by o.Lock.
func HostTools(o *BuildOptions) (Tools, error) {
	t := Tools{Compile: GoBuild}
	if o.AgentBase != "" {
		return t, nil
	}
	f, err := os.Open(o.Lock)
	if err != nil {
		return t, fmt.Errorf("%w: %w (make image-lock writes it)", ErrLock, err)
	}
	defer func() { _ = f.Close() }()
	lock, err := ParseLock(f)
	if err != nil {
		return t, err
	}
	d := &Debs{Apt: HostApt{}, Lock: lock, Cache: o.DebCache}
	t.Packages = d.Files
	return t, nil
}

// GoBuild compiles as the Dockerfiles do: static, trimmed, stripped.
func GoBuild(ctx context.Context, root, pkg, goos, goarch, out string) error {
	cmd := goBuildCmd(ctx, root, pkg, goos, goarch, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w\n%s", pkg, goos, goarch, err, b)
	}
	return nil
}

func goBuildCmd(ctx context.Context, root, pkg, goos, goarch, out string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	return cmd
}

// Built is one image written by Build.
type Built struct {
	Name   string
	Dir    string  // its OCI image layout
	Digest v1.Hash // of the index
}

// Build compiles the binaries for every platform and writes each image's index as an OCI image
// layout o.Out/<name>, its index annotated with the tag o.Version.
func Build(ctx context.Context, o *BuildOptions, tools Tools) ([]Built, error) {
	work, err := os.MkdirTemp("", "pvrescue-images-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	var built []Built
	for _, s := range Specs(o.AgentBase) {
		if len(o.Only) > 0 && !slices.Contains(o.Only, s.Name) {
			continue
		}
		idx, err := buildIndex(ctx, o, s, work, tools)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		dir := filepath.Join(o.Out, s.Name)
		if err := writeLayout(dir, idx, o.Version); err != nil {
			return nil, fmt.Errorf("image %s: write %s: %w", s.Name, dir, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		built = append(built, Built{Name: s.Name, Dir: dir, Digest: d})
	}
	return built, nil
}

func buildIndex(ctx context.Context, o *BuildOptions, s Spec, work string, tools Tools) (v1.ImageIndex, error) {
	var base v1.ImageIndex
	if s.Base != "" {
		var opts []name.Option
		if o.Insecure {
			opts = append(opts, name.Insecure)
		}
		ref, err := name.ParseReference(s.Base, opts...)
		if err != nil {
			return nil, err
		}
		if base, err = remote.Index(ref, remote.WithContext(ctx)); err != nil {
			return nil, fmt.Errorf("base %s: %w", s.Base, err)
		}
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.Platforms {
		goos, goarch, err := splitPlatform(p)
		if err != nil {
			return nil, err
		}
		files := append([]File(nil), s.Files...)
		for _, b := range s.Binaries {
			out := filepath.Join(work, goos+"-"+goarch, path.Base(b.Pkg))
			if _, err := os.Stat(out); err != nil { // the helper is in two images: compile once
				if err := tools.Compile(ctx, o.Root, b.Pkg, goos, goarch, out); err != nil {
					return nil, err
				}
			}
			data, err := os.ReadFile(out)
			if err != nil {
				return nil, err
			}
			files = append(files, File{Path: b.Path, Data: string(data), Mode: 0o755})
		}
		if s.Debian {
			arch, err := DebArch(goarch)
			if err != nil {
				return nil, err
			}
			if tools.Packages == nil {
				return nil, fmt.Errorf("%w: no Debian package source for %s", ErrLock, s.Name)
			}
			debs, err := tools.Packages(ctx, arch)
			if err != nil {
				return nil, err
			}
			files = append(files, debs...)
		}
		var baseImg v1.Image
		if base != nil {
			if baseImg, err = platformImage(base, goos, goarch); err != nil {
				return nil, fmt.Errorf("base %s: %w", s.Base, err)
			}
		}
		img, err := image(s, files, baseImg, goos, goarch, o.Version)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: goarch}},
		})
	}
	return mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.version": o.Version,
		"org.opencontainers.image.title":   s.Name,
	}).(v1.ImageIndex), nil
}

// platformImage picks goos/goarch out of a base index.
func platformImage(base v1.ImageIndex, goos, goarch string) (v1.Image, error) {
	m, err := base.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.OS == goos && d.Platform.Architecture == goarch {
			return base.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no %s/%s image in the index", goos, goarch)
}

// image lays one layer of files over base (nil: nothing) and sets the config as the Dockerfiles do.
func image(s Spec, files []File, base v1.Image, goos, goarch, version string) (v1.Image, error) {
	l, err := layer(files)
	if err != nil {
		return nil, err
	}
	if base == nil {
		base = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	img, err := mutate.AppendLayers(base, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = goos, goarch
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User = s.Entrypoint, nil, s.User
	if len(cf.Config.Env) == 0 {
		cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	if len(s.Ports) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range s.Ports {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	cf.Config.Labels["org.opencontainers.image.version"] = version
	cf.Config.Labels["org.opencontainers.image.title"] = s.Name
	cf.Config.Labels["org.opencontainers.image.source"] = "https://github.com/pvrescue/pvrescue"
	return mutate.ConfigFile(img, cf)
}

// epoch keeps the images reproducible: the same binaries give the same digests.
var epoch = time.Unix(0, 0).UTC()

// layer makes a gzip layer of files (owned by root), adding parent directories.
func layer(files []File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	done := map[string]bool{"/": true}
	explicit := map[string]File{}
	for _, f := range files {
		if f.Dir {
			explicit[f.Path] = f
		}
	}
	var addDir func(d string) error
	addDir = func(d string) error {
		if done[d] {
			return nil
		}
		if err := addDir(path.Dir(d)); err != nil {
			return err
		}
		done[d] = true
		h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch}
		if f, ok := explicit[d]; ok {
			h.Uid, h.Gid = f.UID, f.UID
			if f.Mode != 0 {
				h.Mode = f.Mode
			}
		}
		return tw.WriteHeader(h)
	}
	sorted := append([]File(nil), files...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for i, f := range sorted {
		if i > 0 && sorted[i-1].Path == f.Path {
			return nil, fmt.Errorf("layer entry %q: given twice", f.Path)
		}
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("layer entry %q: want a clean absolute path", f.Path)
		}
		if f.Dir {
			if err := addDir(f.Path); err != nil {
				return nil, err
			}
			continue
		}
		if err := addDir(path.Dir(f.Path)); err != nil {
			return nil, err
		}
		h := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), ModTime: epoch, Uid: f.UID, Gid: f.UID}
		if f.Link != "" {
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		} else {
			h.Typeflag, h.Size, h.Mode = tar.TypeReg, int64(len(f.Data)), f.Mode
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// refNameAnnotation tags an index inside an OCI image layout.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// writeLayout replaces dir with an OCI image layout holding idx tagged version.
func writeLayout(dir string, idx v1.ImageIndex, version string) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: version})); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}
