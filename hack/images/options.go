package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
}

// NewBuildOptions returns the defaults.
func NewBuildOptions() *BuildOptions {
	return &BuildOptions{Root: ".", Out: "bin/images", Platforms: append([]string(nil), DefaultPlatforms...)}
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
}

// NewPushOptions returns the defaults.
func NewPushOptions() *PushOptions { return &PushOptions{In: "bin/images"} }

// AddFlags registers the options on fs.
func (o *PushOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.In, "in", o.In, "directory of the OCI image layouts written by `images build`")
	fs.StringVar(&o.Version, "version", o.Version, "the tag to push (as built)")
	fs.StringVar(&o.Registry, "registry", o.Registry, "registry and path, e.g. registry.example:5000/pvrescue")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "plain http (localhost and private addresses use http anyway)")
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

// runCommand parses a subcommand and its flags and runs it; compile builds the binaries.
func runCommand(ctx context.Context, args []string, out io.Writer, compile Compiler) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: want a subcommand, build or push", ErrInvalidOptions)
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
		built, err := Build(ctx, o, compile)
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
		return err
	default:
		return fmt.Errorf("%w: unknown subcommand %q (build or push)", ErrInvalidOptions, args[0])
	}
}
