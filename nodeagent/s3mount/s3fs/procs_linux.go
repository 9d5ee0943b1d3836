//go:build linux

package s3fs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/ossthread"
)

// NewProcs returns the real ProcessStarter.
func NewProcs() ProcessStarter { return realProcs{} }

type realProcs struct{}

// tailMax bounds what Output returns.
const tailMax = 4096

// Start starts spec detached: a new session (no controlling terminal, not in the agent's process
// group), stdin /dev/null, stdout and stderr to the log file; Go opens every other descriptor
// close-on-exec, so nothing else of the agent is inherited. The process is still the agent's
// child while the agent lives (it reaps and supervises it); when the agent dies it is
// reparented to the nearest subreaper (the container's shim) or init, which reap it.
func (realProcs) Start(spec ProcSpec) (Process, error) {
	logf, err := os.OpenFile(spec.LogFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: open log %s: %w", ErrS3fs, spec.LogFile, err)
	}
	defer func() { _ = logf.Close() }()          // the child keeps its own copy; ours is only closed
	cmd := exec.Command(spec.Path, spec.Args...) //nolint:gosec // the configured s3fs, its arguments built by s3fs.Args through the allowlists
	cmd.Dir, cmd.Env = spec.Dir, spec.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := startIn(cmd, spec.NetNS); err != nil {
		return nil, fmt.Errorf("%w: start %s: %w", ErrS3fs, spec.Path, err)
	}
	start, _, _ := procStat(cmd.Process.Pid) // 0 when unreadable
	p := &childProcess{cmd: cmd, id: ProcID{Pid: cmd.Process.Pid, StartTime: start}, log: spec.LogFile, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// startIn starts cmd in network namespace netns ("": ours). The child inherits the namespace
// of the thread that forks it: a thread of its own (never the main thread, retired afterwards:
// internal/ossthread) joins netns and starts cmd (the log file is an *os.File, so Start runs no
// copying goroutine elsewhere).
func startIn(cmd *exec.Cmd, netns string) error {
	if netns == "" {
		return cmd.Start()
	}
	var started bool
	err := ossthread.Enter(netns, unix.CLONE_NEWNET, func() error {
		started = true
		return cmd.Start()
	})
	if err != nil && !started {
		return fmt.Errorf("%w: %w", ErrNetNS, err)
	}
	return err
}

func procStat(pid int) (uint64, string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	return ParseProcStat(string(b))
}

// Adopt opens a pidfd on the recorded process and checks, after opening it, that the pid still
// names the same process (start time) running with mention among its arguments: a pidfd then
// stays bound to that very process, so signals through it never reach a successor of the pid.
func (realProcs) Adopt(id ProcID, mention string) (Process, error) {
	fd, err := unix.PidfdOpen(id.Pid, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: pid %d: %w", ErrProcessGone, id.Pid, err)
	}
	fail := func(why string) (Process, error) {
		_ = unix.Close(fd) // a pidfd we only opened: closing it cannot fail in a way that matters
		return nil, fmt.Errorf("%w: pid %d: %s", ErrProcessGone, id.Pid, why)
	}
	st, state, err := procStat(id.Pid)
	switch {
	case err != nil:
		return fail(err.Error())
	case st != id.StartTime:
		return fail("started at another time (pid reused)")
	case state == "Z" || state == "X":
		return fail("exited")
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", id.Pid))
	if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), mention) {
		return fail("command line does not name " + mention)
	}
	p := &adoptedProcess{fd: fd, id: id, done: make(chan struct{})}
	go p.watch()
	return p, nil
}

type childProcess struct {
	cmd  *exec.Cmd
	id   ProcID
	log  string
	done chan struct{}
	err  error
}

func (p *childProcess) ID() ProcID     { return p.id }
func (p *childProcess) Output() string { return tail(p.log) }
func (p *childProcess) Wait() error {
	<-p.done
	return p.err
}

func (p *childProcess) Kill(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last tailMax bytes of a file.
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // read only
	if st, err := f.Stat(); err == nil && st.Size() > tailMax {
		_, _ = f.Seek(-tailMax, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, tailMax))
	return strings.TrimSpace(string(b))
}

// adoptedProcess is a bridge an earlier agent started: not our child (its parent reaps it), so
// it is watched and signalled through a pidfd.
type adoptedProcess struct {
	id   ProcID
	done chan struct{}

	mu     sync.Mutex
	fd     int
	closed bool
}

func (p *adoptedProcess) watch() {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}} //nolint:gosec // the kernel keeps file descriptors below 2^31
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil || !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.mu.Lock()
	p.closed = true
	_ = unix.Close(p.fd) // the process has exited; the pidfd is only released
	p.mu.Unlock()
	close(p.done)
}

func (p *adoptedProcess) ID() ProcID     { return p.id }
func (p *adoptedProcess) Output() string { return "" }
func (p *adoptedProcess) Wait() error {
	<-p.done
	return nil
}

func (p *adoptedProcess) signal(sig unix.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		_ = unix.PidfdSendSignal(p.fd, sig, nil, 0)
	}
}

func (p *adoptedProcess) Kill(grace time.Duration) {
	p.signal(unix.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.signal(unix.SIGKILL)
		<-p.done
	}
}

// fsSpace returns the size in bytes of the filesystem holding path and the space in MB a process
// may still write on it (statvfs f_bavail, what s3fs compares with ensure_diskfree); 0 and -1
// when it cannot be read.
func fsSpace(path string) (sizeBytes, availMB int64) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, -1
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize >> 20 //nolint:gosec // block counts of a real filesystem fit an int64
}
