package s3fs

import (
	"errors"
	"time"

	"github.com/pvrescue/pvrescue/internal/config"
)

// ProcID names one process across agent restarts: its pid and its start time (clock ticks
// after boot, field 22 of /proc/<pid>/stat), so a reused pid is never taken for it.
type ProcID struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
}

// Process is a started (or adopted) s3fs.
type Process interface {
	ID() ProcID
	// Wait blocks until the process exits and returns its error (nil for an adopted process,
	// whose exit status belongs to its parent).
	Wait() error
	// Kill sends SIGTERM, then SIGKILL after grace, and returns once the process has exited.
	Kill(grace time.Duration)
	// Output returns the tail of the process's stderr and stdout.
	Output() string
}

// ProcSpec says how to start a bridge's s3fs.
type ProcSpec struct {
	Path string
	Args []string
	// Dir is the working directory; Env the whole environment.
	Dir string
	Env []string
	// LogFile receives stdout and stderr (truncated at start). A file, not a pipe: a pipe to the
	// agent would break (SIGPIPE, EPIPE) when the agent exits, and the bridge must outlive it.
	LogFile string
	// NetNS, when set, is the network namespace (a /proc/<pid>/ns/net path) the program runs in.
	NetNS string
}

// ErrNetNS is returned by ProcessStarter.Start when the program's network namespace cannot be
// joined (seen on the demo cluster: /proc/1/ns/net gives EACCES without CAP_SYS_PTRACE).
var ErrNetNS = errors.New("cannot join network namespace")

// ProcessStarter starts the programs the restorer supervises and takes over those an earlier
// agent started.
type ProcessStarter interface {
	// Start starts a program detached from the agent: its own session, stdin /dev/null,
	// stdout/stderr to spec.LogFile, no other inherited file descriptor.
	Start(spec ProcSpec) (Process, error)
	// Adopt returns a handle on a process an earlier agent started; ErrProcessGone when id no
	// longer names a live process whose command line has the argument mention.
	Adopt(id ProcID, mention string) (Process, error)
}

// Cgroups places processes into cgroups of ours outside the agent container's: the container
// runtime kills every process of the container's cgroup when the container ends (runc for
// containers sharing the host's PID namespace), and the bridges must survive that.
type Cgroups interface {
	// Place moves process pid (every thread) into group, a path relative to the root of every
	// cgroup hierarchy of the node (cgroup v1: each one; v2: the unified one).
	Place(pid int, group string) error
	// Remove removes the (empty) group from every hierarchy; a missing group is no error. The
	// kernel refuses to remove a group that still has processes (EBUSY).
	Remove(group string) error
	// Children returns the names of parent's child groups in any hierarchy, sorted; none when
	// parent does not exist.
	Children(parent string) ([]string, error)
	// SetLimits creates group (in every hierarchy) and sets its CPU and memory limits, with the
	// kernel's default CPU weight; a zero limit is none. Set a parent's before its children's:
	// cgroup v1 refuses a child's CPU quota above its parent's.
	SetLimits(group string, l Limits) error
	// Usage reads group's CPU time used so far and memory in use.
	Usage(group string) (Usage, error)
}

// Limits are a group's CPU and memory limits (0: none).
type Limits struct {
	// CPUMillis is the CPU time per period, in thousandths of a core.
	CPUMillis int64
	// MemoryBytes is the memory limit.
	MemoryBytes int64
}

// Usage is what a group used: CPU time since it was made, memory now.
type Usage struct {
	CPUNanos    int64
	MemoryBytes int64
}

// BridgeLimits returns the limits of all bridges together and of each from the configuration.
func BridgeLimits(cfg *config.Config) (all, each Limits) {
	bl := cfg.S3.BridgeLimits
	return Limits{CPUMillis: bl.All.CPU.MilliValue(), MemoryBytes: bl.All.Memory.Value()},
		Limits{CPUMillis: bl.PerBridge.CPU.MilliValue(), MemoryBytes: bl.PerBridge.Memory.Value()}
}
