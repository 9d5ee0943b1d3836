// Package images builds the container images of the end-to-end suite offline, from files on this
// host, and serves them from an in-process registry. Nothing is pulled from the internet.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of an image layer: a copy of a host file (Src), literal content (Data),
// a directory (Dir) or a symlink (Link).
type File struct {
	Path string // absolute path inside the image
	Src  string
	Data []byte
	Link string
	Dir  bool
	Mode int64 // 0 means 0755 for files copied from the host, 0644 for Data
}

// Layer makes an uncompressed tar layer from files; parent directories are added as needed.
func Layer(files []File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"/": true}
	addDir := func(d string) error {
		var chain []string
		for ; !dirs[d]; d = path.Dir(d) {
			chain = append(chain, d)
			dirs[d] = true
		}
		for i := len(chain) - 1; i >= 0; i-- {
			h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(chain[i], "/") + "/", Mode: 0o755, ModTime: epoch}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		}
		return nil
	}
	sorted := append([]File(nil), files...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, f := range sorted {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("layer entry %q: path must be absolute", f.Path)
		}
		if err := addDir(path.Dir(f.Path)); err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(f.Path, "/")
		switch {
		case f.Dir:
			if err := addDir(f.Path); err != nil {
				return nil, err
			}
		case f.Link != "":
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: f.Link, Mode: 0o777, ModTime: epoch}); err != nil {
				return nil, err
			}
		default:
			data, mode := f.Data, f.Mode
			if f.Src != "" {
				b, err := os.ReadFile(f.Src)
				if err != nil {
					return nil, fmt.Errorf("layer entry %s: %w", f.Path, err)
				}
				data = b
				if mode == 0 {
					mode = 0o755
				}
			}
			if mode == 0 {
				mode = 0o644
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(data)), Mode: mode, ModTime: epoch}); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// epoch keeps layers reproducible: the same files give the same digest.
var epoch = time.Unix(0, 0)

// HelperUser is the user the published helper image runs as (distroless "nonroot"); the e2e
// helper image must run as it too, or root hides permission problems (device nodes are
// root:disk 0660).
const HelperUser = "65532:65532"

// Build makes a linux/amd64 image from one layer of files, running as root.
func Build(files []File, entrypoint, cmd []string) (v1.Image, error) {
	return BuildAs(files, entrypoint, cmd, "")
}

// BuildAs is Build with the image's user set (e.g. HelperUser; "" leaves it unset: root).
func BuildAs(files []File, entrypoint, cmd []string, user string) (v1.Image, error) {
	l, err := Layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User = entrypoint, cmd, user
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	return mutate.ConfigFile(img, cf)
}

// BusyboxPath is Debian busybox-static's binary (package busybox-static).
const BusyboxPath = "/bin/busybox"

// ErrMissingHostFile is returned when a file an image is made from is not on this host.
var ErrMissingHostFile = errors.New("host file missing")

// Pause is the sandbox image: a static busybox sleeping forever. Any static binary that sleeps
// does the job of the real pause image for the CRI.
func Pause() (v1.Image, error) {
	if _, err := os.Stat(BusyboxPath); err != nil {
		return nil, fmt.Errorf("%w: %s (apt-get install busybox-static)", ErrMissingHostFile, BusyboxPath)
	}
	return Build([]File{{Path: "/bin/busybox", Src: BusyboxPath}}, []string{"/bin/busybox", "sleep", "2147483647"}, nil)
}

// Busybox is a shell image for test applications: busybox with a link per applet in /bin.
func Busybox() (v1.Image, error) {
	files, err := BusyboxFiles()
	if err != nil {
		return nil, err
	}
	return Build(files, nil, []string{"sh"})
}

// BusyboxFiles are /bin/busybox and one link per applet, for images that want a shell.
func BusyboxFiles() ([]File, error) {
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s --list: %w (apt-get install busybox-static)", ErrMissingHostFile, BusyboxPath, err)
	}
	files := []File{{Path: "/bin/busybox", Src: BusyboxPath}, {Path: "/tmp", Dir: true}}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" {
			files = append(files, File{Path: "/bin/" + applet, Link: "busybox"})
		}
	}
	return files, nil
}

// RacerPkg is the hostile tenant's racer (package main of the e2e module, see racer/main.go).
const RacerPkg = "./images/racer"

// BuildStatic compiles the package pkg of the Go module in moduleDir into out as a static binary
// (CGO_ENABLED=0), for images without a libc.
func BuildStatic(ctx context.Context, moduleDir, pkg, out string) error {
	if err := os.MkdirAll(path.Dir(out), 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Racer is the hostile tenant's image: the busybox shell image (for exec) plus the racer binary
// (built with BuildStatic from RacerPkg) at /racer, its entrypoint.
func Racer(racerBin string) (v1.Image, error) {
	files, err := BusyboxFiles()
	if err != nil {
		return nil, err
	}
	files = append(files, File{Path: "/racer", Src: racerBin})
	return Build(files, []string{"/racer"}, nil)
}

// Registry is an in-process OCI registry on 127.0.0.1 (go-containerregistry's pkg/registry).
type Registry struct {
	Host string // 127.0.0.1:port
	srv  *http.Server
}

// ServeRegistry starts a registry on a free port of 127.0.0.1.
func ServeRegistry() (*Registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the image registry: %w", err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &Registry{Host: ln.Addr().String(), srv: srv}, nil
}

// Ref returns the image reference of repo:tag in this registry.
func (r *Registry) Ref(repo, tag string) string { return r.Host + "/" + repo + ":" + tag }

// Push stores img as repo:tag and returns its reference.
func (r *Registry) Push(ctx context.Context, repo, tag string, img v1.Image) (string, error) {
	s := r.Ref(repo, tag)
	ref, err := name.ParseReference(s, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", s, err)
	}
	return s, nil
}

// Close stops the registry.
func (r *Registry) Close() error { return r.srv.Close() }
