package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrExited is wrapped by errors about a component process that ended while it should be running.
var ErrExited = errors.New("process exited")

// Process is one component of the cluster running as a child process, with its output in a log file.
type Process struct {
	Name string
	Log  string

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// StartProcess starts bin with args, logging to dir/<name>.log and recording its pid in
// dir/<name>.pid so that `demo-down` can find it from another process.
// The process leads its own process group: stopping it stops its children too (containerd shims
// excepted: they re-parent on purpose, see Cluster.Down).
func StartProcess(dir, name, bin string, args []string, env []string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) //nolint:gosec // component logs are for whoever debugs the run
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close() // the start error is the one to report
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	// The start time guards KillRecorded against a pid reused by an unrelated process.
	rec := fmt.Sprintf("%d %s", cmd.Process.Pid, startTime(cmd.Process.Pid))
	if err := os.WriteFile(filepath.Join(dir, name+".pid"), []byte(rec), 0o644); err != nil {
		_ = p.Stop(time.Second)
		_ = f.Close() // the start error is the one to report
		return nil, fmt.Errorf("record pid of %s: %w", name, err)
	}
	go func() {
		err := cmd.Wait()
		_ = f.Close() // the pid-file error is the one to report
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, with its exit error and the tail of its log.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return fmt.Errorf("%s: %w (%v); last lines of %s:\n%s", p.Name, ErrExited, p.err, p.Log, Tail(p.Log, 15)) //nolint:errorlint // p.err is nil after a clean exit; ErrExited is what callers match
	default:
		return nil
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace, and waits for the end.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not end after SIGKILL", p.Name, p.cmd.Process.Pid)
	}
}

// Kill sends SIGKILL to the process group at once (a crash, as opposed to Stop).
func (p *Process) Kill() error { return p.Stop(0) }

// Tail returns the last n lines of a file, for failure messages.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	return TailLines(b, n)
}

// TailLines returns the last n lines of b.
func TailLines(b []byte, n int) string {
	lines := strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// KillRecorded kills (SIGKILL, whole group) every process whose pid file is in dir and removes the
// pid files. It is how `demo-down` and a crashed test's next run find what was left running.
// With names, only those components are killed.
func KillRecorded(dir string, names ...string) []string {
	var killed []string
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	if len(names) > 0 {
		files = nil
		for _, n := range names {
			files = append(files, filepath.Join(dir, n+".pid"))
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		f2 := strings.Fields(string(b))
		if len(f2) != 2 {
			_ = os.Remove(f) // a stale pid file; best effort
			continue
		}
		pid, err := strconv.Atoi(f2[0])
		if err == nil && pid > 1 && startTime(pid) == f2[1] {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed = append(killed, strings.TrimSuffix(filepath.Base(f), ".pid"))
			waitGone(pid, 10*time.Second)
		}
		_ = os.Remove(f) // handled (or stale) pid file; best effort
	}
	return killed
}

func waitGone(pid int, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
		time.Sleep(50 * time.Millisecond)
	}
}

// startTime is field 22 of /proc/PID/stat (clock ticks since boot), "" when unreadable.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	return StatStartTime(string(b))
}

// StatStartTime parses the start time out of a /proc/PID/stat line. The command name (field 2)
// may hold spaces and parentheses, so fields are counted from the last ')'.
func StatStartTime(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(stat[i+1:])
	// After ")" come fields 3..; the start time is field 22.
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
