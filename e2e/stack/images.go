// Package stack installs pvrescue and its surroundings on an e2e cluster: the pvrescue images built
// offline from the same binaries as the Dockerfiles, a real S3 server (versitygw), the test CSI
// plugin, and the manifests of manifests/ rendered with kustomize.
package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/pvrescue/pvrescue/e2e/images"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// ErrNotLanded is returned when a component the suite installs is not in the tree yet.
var ErrNotLanded = errors.New("component not in the tree yet")

// Binaries are the pvrescue binaries of the webhook image, built like `make build` (static,
// CGO_ENABLED=0); the agent's image is built by `make images`' builder (BuildAgentImage).
type Binaries struct {
	Webhook, Sidecar string
}

// BuildBinaries runs `go build` of ./cmd/... in repo into dir. Static like the Dockerfiles'
// builds (the images have no libc); without -trimpath, which only changes embedded file paths but
// would miss the build cache of every other test layer (minutes on a loaded 2-core machine).
func BuildBinaries(ctx context.Context, repo, dir string) (*Binaries, error) {
	b := &Binaries{
		Webhook: filepath.Join(dir, "pvrescue-webhook"),
		Sidecar: filepath.Join(dir, "pvrescue-sidecar"),
	}
	for _, x := range []struct{ out, pkg, ldflags string }{
		{b.Webhook, "./cmd/pvrescue-webhook", ""},
		{b.Sidecar, "./cmd/pvrescue-sidecar", "-s -w"},
	} {
		if _, err := os.Stat(filepath.Join(repo, x.pkg, "main.go")); err != nil {
			return nil, fmt.Errorf("%w: %s/main.go is missing", ErrNotLanded, x.pkg)
		}
		args := []string{"build", "-o", x.out}
		if x.ldflags != "" {
			args = append(args, "-ldflags", x.ldflags)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, x.pkg)...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", x.pkg, err, out)
		}
	}
	return b, nil
}

// WebhookImage holds the webhook and, at contract.HelperBinaryInImage, the injected helper: the
// configuration's helper.image is the webhook image.
func WebhookImage(b *Binaries) ([]images.File, []string) {
	return []images.File{
		{Path: "/pvrescue-webhook", Src: b.Webhook},
		{Path: contract.HelperBinaryInImage, Src: b.Sidecar},
		{Path: "/tmp", Dir: true},
	}, []string{"/pvrescue-webhook"}
}

// AgentHostBinaries are copied into the test CSI plugin's image with their shared libraries.
var AgentHostBinaries = []string{"/usr/bin/s3fs", "/usr/bin/fusermount", "/usr/bin/fusermount3"}

// AgentImageTag is the tag BuildAgentImage builds (and the layout holds).
const AgentImageTag = "e2e"

// BuildAgentImage builds the agent image as `make images` does — the same builder
// (go run ./hack/images build), the agent binary with s3fs, fuse3 and their libraries from the
// Debian packages hack/images/debian.lock pins — for the node's platform only (linux/GOARCH: the
// other half would only double a cold build; make image-check runs both), into dir, and returns
// that platform's image.
func BuildAgentImage(ctx context.Context, repo, dir string) (v1.Image, error) {
	out := filepath.Join(dir, "images")
	platform := "linux/" + runtime.GOARCH
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/images", "build", "-only", "pvrescue-agent",
		"-platforms", platform, "-version", AgentImageTag, "-out", out)
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go run ./hack/images build (make images' builder) for %s: %w\n%s(make images-deps adds what apt needs)", platform, err, b)
	}
	p, err := layout.FromPath(filepath.Join(out, "pvrescue-agent"))
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("the agent's layout holds %d indexes, want 1", len(m.Manifests))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no %s image in the agent's index", platform)
}

// PluginImage holds the test CSI plugin (cmd csi-s3-test, static) plus s3fs, fusermount and their
// shared libraries copied from this host: the node plugin's image, as k8s-csi-s3's ships s3fs.
func PluginImage(plugin string) ([]images.File, []string, error) {
	files, err := S3fsFiles()
	if err != nil {
		return nil, nil, err
	}
	files = append(files, images.File{Path: "/csi-s3-test", Src: plugin}, images.File{Path: "/run", Dir: true})
	return files, []string{"/csi-s3-test"}, nil
}

// S3fsFiles are s3fs, fusermount, their shared libraries (found with ldd) and the few files of
// /etc they read, copied from this host.
func S3fsFiles() ([]images.File, error) {
	files := []images.File{{Path: "/tmp", Dir: true}}
	libs := map[string]bool{}
	for _, bin := range AgentHostBinaries {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%w: %s (make e2e-deps installs s3fs and fuse3)", images.ErrMissingHostFile, bin)
		}
		files = append(files, images.File{Path: bin, Src: bin})
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", bin, err)
		}
		for _, l := range ParseLdd(string(out)) {
			libs[l] = true
		}
	}
	for l := range libs {
		files = append(files, images.File{Path: l, Src: l, Mode: 0o755})
	}
	// s3fs looks itself up in /etc/passwd; fuse wants /etc/fuse.conf and /etc/mtab may be read.
	files = append(files,
		images.File{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\n")},
		images.File{Path: "/etc/group", Data: []byte("root:x:0:\n")},
		images.File{Path: "/etc/fuse.conf", Data: []byte("user_allow_other\n")},
		images.File{Path: "/etc/mtab", Link: "/proc/self/mounts"},
	)
	return files, nil
}

// ParseLdd returns the absolute library paths in ldd output, the dynamic loader included.
func ParseLdd(out string) []string {
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs
}
