package sidecar

import (
	"errors"
	"flag"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Exit codes of `exec` when the command cannot be started, as a shell reports them.
const (
	ExitCommandNotFound = 127
	ExitCannotExecute   = 126
)

// ExecOptions configures `exec -- CMD ARGS...`.
type ExecOptions struct {
	DevicesFile string
	Command     []string
}

// NewExecOptions returns the defaults.
func NewExecOptions() *ExecOptions {
	return &ExecOptions{DevicesFile: filepath.Join(DefaultDir, contract.DevicesFile)}
}

// AddFlags registers the exec's flags.
func (o *ExecOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.DevicesFile, flagName(contract.FlagDevicesFile), o.DevicesFile, "the guard's report; when absent the command just runs")
}

// Validate checks the options.
func (o *ExecOptions) Validate() error {
	if len(o.Command) == 0 || o.Command[0] == "" {
		return errors.New("no command: use exec [flags] -- CMD [ARG]")
	}
	return nil
}

// RemoveFakes removes the device nodes that the report marks fake. It returns the paths removed
// and whether a fake node it should have removed is still there.
// Before removing, it measures the node again and leaves it alone unless it is still a block
// device of the fake size: the wrapper must never delete a real disk, even if the app container's
// devices differ from the guard's. Problems are told on stderr; they never stop the application.
func RemoveFakes(r Report, deps Deps, stderr io.Writer) (removed []string, failed bool) {
	for _, d := range r.Devices {
		if !d.Fake {
			continue
		}
		size, err := deps.Devices.DeviceSize(d.Path)
		switch {
		case errors.Is(err, ErrNoDeviceNode):
			continue // already gone (a restarted container)
		case err != nil:
			say(stderr, "pvrescue: not removing fake device %s (claim %s): %v\n", d.Path, d.Claim, err)
			failed = true
			continue
		case size != r.FakeSize:
			say(stderr, "pvrescue: not removing %s (claim %s): its size is now %d bytes, not the fake size %d\n", d.Path, d.Claim, size, r.FakeSize)
			continue
		}
		if err := deps.Files.Remove(d.Path); err != nil {
			say(stderr, "pvrescue: cannot remove fake device %s (claim %s): %v; the application still sees it\n", d.Path, d.Claim, err)
			failed = true
			continue
		}
		say(stderr, "pvrescue: removed fake device %s (claim %s)\n", d.Path, d.Claim)
		removed = append(removed, d.Path)
	}
	return removed, failed
}

// RunExec removes the fake device nodes, then replaces the process with the command. It only
// returns when the command could not be started (or with a fake Execer).
func RunExec(o *ExecOptions, env *Env) int {
	r, err := ReadReport(o.DevicesFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No guard ran for this pod: nothing to filter.
	case err != nil:
		say(env.Stderr, "pvrescue: %v; starting the command without filtering devices\n", err)
	default:
		if _, failed := RemoveFakes(r, env.Deps, env.Stderr); failed {
			say(env.Stderr, "pvrescue: %s lists the real devices only\n", filepath.Join(filepath.Dir(o.DevicesFile), contract.FilteredDevDir))
		}
	}
	path, err := env.Deps.Process.LookPath(o.Command[0])
	if err != nil {
		say(env.Stderr, "pvrescue: %v\n", err)
		return ExitCommandNotFound
	}
	if err := env.Deps.Process.Exec(path, o.Command, env.Environ); err != nil {
		say(env.Stderr, "pvrescue: exec %s: %v\n", path, err)
		return ExitCannotExecute
	}
	return 0
}
