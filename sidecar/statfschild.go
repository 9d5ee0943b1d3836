package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// cmdStatfs is the probe's child: `pvrescue-sidecar statfs PATH` answers one statfs on stdout.
// It is not part of the contract with the webhook and not in the usage text.
const cmdStatfs = "statfs"

// ChildStatfs runs each statfs in a child process (Exe statfs PATH) instead of a thread of the
// probe. A FUSE daemon that has read the statfs request and hangs holds the caller in an
// uninterruptible wait, beyond the reach of SIGKILL, until it answers; were that caller a thread
// of the probe, the probe could not exit, kubelet would count a timeout (a failure: the
// container restarted onto the same hung mount) and every later probe would stay behind it too.
// The child holds no descriptor of the probe's (its stdout is its own pipe, stderr /dev/null),
// so the probe reports the timeout and exits while the child waits on, orphaned; it dies once the
// daemon answers or the connection is aborted (SIGKILL on its parent's death is already pending).
type ChildStatfs struct {
	// Exe is the helper binary (os.Executable in the helper).
	Exe string
	// Fallback calls statfs here when no child can be started (e.g. the pids limit is reached).
	Fallback Statfser
}

// Statfs implements Statfser.
func (c ChildStatfs) Statfs(path string) error {
	cmd := exec.Command(c.Exe, cmdStatfs, path) //nolint:gosec // G204: the helper re-runs itself
	cmd.SysProcAttr = childProcAttr()
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return fmt.Errorf("statfs in a child process: %w", err)
	case err != nil:
		return c.Fallback.Statfs(path)
	}
	return ParseStatfsAnswer(string(out))
}

// StatfsAnswer is the child's line on stdout: "ok", or "errno N" for statfs's error.
func StatfsAnswer(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok\n"
	case errors.As(err, &errno):
		return "errno " + strconv.Itoa(int(errno)) + "\n"
	default:
		return "error " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
	}
}

// ParseStatfsAnswer turns the child's line back into statfs's result (a syscall.Errno, so
// DescribeError names it as for a statfs in the probe itself).
func ParseStatfsAnswer(s string) error {
	line := strings.TrimSuffix(s, "\n")
	switch {
	case line == "ok":
		return nil
	case strings.HasPrefix(line, "errno "):
		n, err := strconv.Atoi(strings.TrimPrefix(line, "errno "))
		if err != nil || n <= 0 {
			return fmt.Errorf("statfs child: malformed answer %q", s)
		}
		return syscall.Errno(n)
	case strings.HasPrefix(line, "error "):
		return errors.New(strings.TrimPrefix(line, "error "))
	default:
		return fmt.Errorf("statfs child: malformed answer %q", s)
	}
}

// statfsOptions is `statfs PATH`.
type statfsOptions struct{ Path string }

// AddFlags registers no flag.
func (o *statfsOptions) AddFlags(*flag.FlagSet) {}

// Validate checks the options.
func (o *statfsOptions) Validate() error {
	if o.Path == "" {
		return errors.New("statfs takes exactly one path")
	}
	return nil
}

// runStatfs is the child's side: statfs in this process, the answer on stdout.
func runStatfs(o *statfsOptions, env *Env) int {
	say(env.Stdout, "%s", StatfsAnswer(env.Deps.Mounts.Statfs(o.Path)))
	return ExitOK
}
