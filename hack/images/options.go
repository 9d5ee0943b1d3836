package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// DefaultPlatforms are the platforms every image is built for.
var DefaultPlatforms = []string{"linux/amd64", "linux/arm64"}

// BuildOptions configure `images build`.
type BuildOptions struct {
	Root      string   // the repository (where go build runs)
	Out       string   // the directory the OCI layouts are written to
	Version   string   // the tag, e.g. `git describe --tags --always --dirty`
	Platforms []string // os/arch
	// AgentBase is an optional multi-platform image (registry reference) the agent is laid onto,
	// e.g. one with s3fs, fuse3 and util-linux as Dockerfile.agent installs. Empty: no base.
	AgentBase string
	Insecure  bool // pull AgentBase over plain http
	// Lock pins the agent's Debian packages (without AgentBase); DebCache keeps their .debs.
	Lock, DebCache string
	Only           []string // image names to build; empty: all
}

// NewBuildOptions returns the defaults.
func NewBuildOptions() *BuildOptions {
	return &BuildOptions{Root: ".", Out: "bin/images", Platforms: append([]string(nil), DefaultPlatforms...),
		Lock: DefaultLock, DebCache: defaultDebCache()}
}

// defaultDebCache is pvrescue's cache directory (as the Makefile's CACHE_DIR) /debs.
func defaultDebCache() string {
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "pvrescue", "debs")
}

// AddFlags registers the options on fs.
func (o *BuildOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Root, "root", o.Root, "repository root (go build runs there)")
	fs.StringVar(&o.Out, "out", o.Out, "directory for the OCI image layouts (one per image)")
	fs.StringVar(&o.Version, "version", o.Version, "image tag (make images passes `git describe --tags --always --dirty`)")
	fs.Func("platforms", "comma-separated os/arch list (default "+strings.Join(DefaultPlatforms, ",")+")", func(s string) error {
		o.Platforms = splitList(s)
		return nil
	})
	fs.StringVar(&o.AgentBase, "agent-base", o.AgentBase, "multi-platform base image for the agent (with s3fs, fuse3, util-linux); empty: none")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "pull -agent-base over plain http")
	fs.StringVar(&o.Lock, "lock", o.Lock, "lockfile of the agent's Debian packages (make image-lock)")
	fs.StringVar(&o.DebCache, "deb-cache", o.DebCache, "directory the pinned .deb files are kept in, by sha256")
	fs.Func("only", "comma-separated image names to build (default: all three)", func(s string) error {
		o.Only = splitList(s)
		return nil
	})
}

// ErrInvalidOptions wraps every problem Validate finds.
var ErrInvalidOptions = errors.New("invalid options")

// Validate checks the options before anything is built.
func (o *BuildOptions) Validate() error {
	var problems []string
	if err := validTag(o.Version); err != nil {
		problems = append(problems, err.Error())
	}
	if o.Out == "" {
		problems = append(problems, "-out: must not be empty")
	}
	if len(o.Platforms) == 0 {
		problems = append(problems, "-platforms: at least one os/arch")
	}
	for _, p := range o.Platforms {
		if _, _, err := splitPlatform(p); err != nil {
			problems = append(problems, "-platforms: "+err.Error())
		}
	}
	if o.AgentBase != "" {
		if _, err := name.ParseReference(o.AgentBase); err != nil {
			problems = append(problems, fmt.Sprintf("-agent-base: %v", err))
		}
	} else if o.Lock == "" || o.DebCache == "" {
		problems = append(problems, "-lock and -deb-cache: required without -agent-base")
	}
	for _, n := range o.Only {
		if !slices.ContainsFunc(Specs(""), func(s Spec) bool { return s.Name == n }) {
			problems = append(problems, fmt.Sprintf("-only: no image %q", n))
		}
	}
	return joinProblems(problems)
}

// PushOptions configure `images push`.
type PushOptions struct {
	In       string // the directory `images build` wrote
	Version  string
	Registry string // host[:port][/path], e.g. 127.0.0.1:5000/pvrescue
	// Insecure talks plain http to a registry go-containerregistry would reach over https.
	// localhost, 127.0.0.0/8 and RFC 1918 addresses are reached over http without it.
	Insecure bool
	// Chart is the chart directory pushed beside the images as oci://Registry/<chart>, version
	// ChartVersion(Version); empty: images only.
	Chart string
}

// NewPushOptions returns the defaults.
func NewPushOptions() *PushOptions { return &PushOptions{In: "bin/images", Chart: DefaultChart} }

// AddFlags registers the options on fs.
func (o *PushOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.In, "in", o.In, "directory of the OCI image layouts written by `images build`")
	fs.StringVar(&o.Version, "version", o.Version, "the tag to push (as built)")
	fs.StringVar(&o.Registry, "registry", o.Registry, "registry and path, e.g. registry.example:5000/pvrescue")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "plain http (localhost and private addresses use http anyway)")
	fs.StringVar(&o.Chart, "chart", o.Chart, "chart directory pushed beside the images (oci://REGISTRY/<chart>, version from -version); empty: none")
}

// Validate checks the options before anything is pushed.
func (o *PushOptions) Validate() error {
	var problems []string
	if err := validTag(o.Version); err != nil {
		problems = append(problems, err.Error())
	}
	if o.Registry == "" {
		problems = append(problems, "-registry: required (make push REGISTRY=host:port/path)")
	} else if _, err := name.NewRepository(strings.TrimSuffix(o.Registry, "/")+"/pvrescue-webhook", name.StrictValidation); err != nil {
		problems = append(problems, fmt.Sprintf("-registry %q: %v", o.Registry, err))
	}
	if o.In == "" {
		problems = append(problems, "-in: must not be empty")
	}
	return joinProblems(problems)
}

func validTag(v string) error {
	if v == "" {
		return errors.New("-version: required")
	}
	if _, err := name.NewTag("example.invalid/x:"+v, name.StrictValidation); err != nil {
		return fmt.Errorf("-version %q is not a valid image tag: %w", v, err)
	}
	return nil
}

func splitPlatform(p string) (goos, goarch string, err error) {
	goos, goarch, ok := strings.Cut(p, "/")
	if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
		return "", "", fmt.Errorf("%q is not os/arch", p)
	}
	return goos, goarch, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func joinProblems(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidOptions, strings.Join(problems, "; "))
}

// runCommand parses a subcommand and its flags and runs it; tools gives what build runs, apt
// what lock asks.
func runCommand(ctx context.Context, args []string, out io.Writer, tools func(*BuildOptions) (Tools, error), apt Apt) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: want a subcommand, build, push or lock", ErrInvalidOptions)
	}
	fs := flag.NewFlagSet("images "+args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	switch args[0] {
	case "build":
		o := NewBuildOptions()
		o.AddFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		t, err := tools(o)
		if err != nil {
			return err
		}
		built, err := Build(ctx, o, t)
		if err != nil {
			return err
		}
		for _, b := range built {
			if _, err := fmt.Fprintf(out, "%s:%s  %s  %s  (%s)\n", b.Name, o.Version, b.Dir, b.Digest, strings.Join(o.Platforms, ", ")); err != nil {
				return err
			}
		}
		return nil
	case "push":
		o := NewPushOptions()
		o.AddFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		refs, err := Push(ctx, o)
		for _, r := range refs {
			if _, werr := fmt.Fprintln(out, "pushed", r); werr != nil && err == nil {
				err = werr
			}
		}
		if err == nil && o.Chart != "" {
			_, err = fmt.Fprintf(out, "install: helm install pvrescue oci://%s/pvrescue --version %s\n", strings.TrimSuffix(o.Registry, "/"), ChartVersion(o.Version))
		}
		return err
	case "lock":
		file, platforms := DefaultLock, slices.Clone(DefaultPlatforms)
		fs.StringVar(&file, "lock", file, "the lockfile to write")
		fs.Func("platforms", "comma-separated os/arch list (default "+strings.Join(DefaultPlatforms, ",")+")", func(s string) error {
			platforms = splitList(s)
			return nil
		})
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		l, err := WriteLock(ctx, apt, platforms, file)
		if err != nil {
			return err
		}
		for _, arch := range slices.Sorted(maps.Keys(l)) {
			if _, err := fmt.Fprintf(out, "%s: %d packages pinned in %s\n", arch, len(l[arch]), file); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown subcommand %q (build, push or lock)", ErrInvalidOptions, args[0])
	}
}
