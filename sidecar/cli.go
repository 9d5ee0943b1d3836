package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Exit codes shared by the subcommands (exec passes the command's own through).
const (
	ExitOK      = 0
	ExitRefused = 1 // guard under policy require found a fake or unreadable device
	ExitError   = 2 // bad command line or an operational failure
)

// Env is what a subcommand needs from the process around it.
type Env struct {
	Deps           Deps
	Stdout, Stderr io.Writer
	// Environ is passed to the command that exec runs.
	Environ []string
	// Executable locates the running binary (for install).
	Executable func() (string, error)
}

// NewEnv returns the environment of the real process: the helper's probe calls statfs in child
// processes of itself (see ChildStatfs).
func NewEnv() *Env {
	deps := RealDeps()
	self, err := os.Executable() // its own name, not "exe", in ps and in /proc/<pid>/comm
	if err != nil {
		self = "/proc/self/exe"
	}
	deps.ProbeMounts = ChildStatfs{Exe: self, Fallback: deps.Mounts}
	return &Env{Deps: deps, Stdout: os.Stdout, Stderr: os.Stderr, Environ: os.Environ(), Executable: os.Executable}
}

// Invocation is a parsed command line: the subcommand and its options (one of *InstallOptions,
// *GuardOptions, *ExecOptions, *ProbeOptions), already validated.
type Invocation struct {
	Command string
	Options any
}

const usage = `usage: pvrescue-sidecar COMMAND [flags]

commands:
  install --to DIR                         copy this binary to DIR/pvrescue-sidecar
  guard --device PATH=CLAIM... [--policy filter|require] [--out DIR] [--fake-size N]
                                           find fake devices, write DIR/devices.json and DIR/dev/
  exec [--devices FILE] -- CMD ARGS...     remove fake device nodes, then exec CMD
  probe [--timeout D] PATH...              statfs each mount; exit 1 when one is broken or hangs
`

// ErrUsage marks a command-line error.
var ErrUsage = errors.New("usage")

// Parse turns the arguments (without the program name) into an Invocation. Flag errors are
// printed to out by the flag package; -h gives flag.ErrHelp.
func Parse(args []string, out io.Writer) (Invocation, error) {
	if len(args) == 0 {
		say(out, "%s", usage)
		return Invocation{}, fmt.Errorf("%w: no command", ErrUsage)
	}
	var (
		opts interface {
			AddFlags(*flag.FlagSet)
			Validate() error
		}
		setArgs func([]string)
	)
	switch name := args[0]; name {
	case contract.CmdInstall:
		opts = NewInstallOptions()
	case contract.CmdGuard:
		opts = NewGuardOptions()
	case contract.CmdExec:
		o := NewExecOptions()
		opts, setArgs = o, func(a []string) { o.Command = a }
	case contract.CmdProbe:
		o := NewProbeOptions()
		opts, setArgs = o, func(a []string) { o.Paths = a }
	case cmdStatfs:
		o := &statfsOptions{}
		opts, setArgs = o, func(a []string) {
			if len(a) == 1 {
				o.Path = a[0]
			}
		}
	case "-h", "-help", "--help", "help":
		say(out, "%s", usage)
		return Invocation{}, flag.ErrHelp
	default:
		say(out, "%s", usage)
		return Invocation{}, fmt.Errorf("%w: unknown command %q", ErrUsage, name)
	}
	fs := flag.NewFlagSet("pvrescue-sidecar "+args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	opts.AddFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Invocation{}, err
		}
		return Invocation{}, fmt.Errorf("%w: %s: %w", ErrUsage, args[0], err)
	}
	if setArgs != nil {
		setArgs(fs.Args())
	} else if fs.NArg() > 0 {
		return Invocation{}, fmt.Errorf("%w: %s takes no arguments, got %s", ErrUsage, args[0], strings.Join(fs.Args(), " "))
	}
	if err := opts.Validate(); err != nil {
		return Invocation{}, fmt.Errorf("%w: %s: %w", ErrUsage, args[0], err)
	}
	return Invocation{Command: args[0], Options: opts}, nil
}

// Run executes a parsed invocation and returns the exit code.
func Run(ctx context.Context, inv Invocation, env *Env) int {
	switch o := inv.Options.(type) {
	case *InstallOptions:
		return RunInstall(o, env)
	case *GuardOptions:
		return RunGuard(o, env)
	case *ExecOptions:
		return RunExec(o, env)
	case *ProbeOptions:
		return RunProbe(ctx, o, env)
	case *statfsOptions:
		return runStatfs(o, env)
	default:
		say(env.Stderr, "pvrescue: nothing to run for %q\n", inv.Command)
		return ExitError
	}
}

// Main parses the arguments and runs the command; it is all that cmd/pvrescue-sidecar calls.
func Main(ctx context.Context, args []string, env *Env) int {
	inv, err := Parse(args, env.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		say(env.Stderr, "pvrescue-sidecar: %v\n", err)
		return ExitError
	}
	return Run(ctx, inv, env)
}

// say writes a message to the container's log (stdout or stderr). The helper has nowhere else
// to report that its own output failed, so that one error is dropped here.
func say(w io.Writer, format string, a ...any) {
	_, _ = fmt.Fprintf(w, format, a...)
}
