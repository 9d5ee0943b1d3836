package containermount

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ErrNotRuntimeNamespace: a mount namespace of the pod's processes that the runtime did not make
// for a container — one a process of the container made itself (unshare -Urm), or a container
// init whose namespaces are not owned as the runtime makes them. Nothing is attached there: a
// clone put in from the agent's namespace would not be locked, and the namespace's owner could
// remount it writable. The container's liveness probe remains the fallback.
var ErrNotRuntimeNamespace = errors.New("mount namespace not made by the runtime")

// ProcStat is what /proc/<pid>/stat says of a process's lineage.
type ProcStat struct {
	PPid int
	// StartTime is the process's start in clock ticks after boot (field 22).
	StartTime uint64
}

// ParseStat reads /proc/<pid>/stat. The command name (field 2) is in parentheses and holds
// whatever the process chose, spaces and parentheses included, so the fields are counted after
// its last ')'; the kernel separates them by one space.
func ParseStat(content string) (ProcStat, error) {
	i := strings.LastIndexByte(content, ')')
	if i < 0 || i+2 > len(content) || content[i+1] != ' ' {
		return ProcStat{}, fmt.Errorf("stat: no command name in %q", content)
	}
	// rest[0] is field 3 (state), rest[1] field 4 (ppid), rest[19] field 22 (starttime).
	rest := strings.Split(strings.TrimRight(content[i+2:], "\n"), " ")
	if len(rest) < 20 {
		return ProcStat{}, fmt.Errorf("stat: %d fields after the command name, want at least 20", len(rest))
	}
	ppid, err := strconv.Atoi(rest[1])
	if err != nil {
		return ProcStat{}, fmt.Errorf("stat: ppid %q: %w", rest[1], err)
	}
	start, err := strconv.ParseUint(rest[19], 10, 64)
	if err != nil {
		return ProcStat{}, fmt.Errorf("stat: starttime %q: %w", rest[19], err)
	}
	return ProcStat{PPid: ppid, StartTime: start}, nil
}

// ContainerInits picks, for each container of the pod (the container ID of its cgroup; the pod's
// own cgroup counts as one), the process the runtime started: the oldest (StartTime); among
// equally old ones (the clock ticks in 10 ms) the one whose parent is not in the container (the
// runtime's shim), then the lowest pid. Every other process whose mount namespace differs from
// its container init's is returned in nested: a namespace a process of the container made. Both
// lists are ordered by pid.
func ContainerInits(procs []Proc) (inits, nested []Proc) {
	byCtr := map[string][]Proc{}
	for _, p := range procs {
		byCtr[p.Cgroup.ContainerID] = append(byCtr[p.Cgroup.ContainerID], p)
	}
	for _, ps := range byCtr {
		in := map[int]bool{}
		for _, p := range ps {
			in[p.Pid] = true
		}
		best := ps[0]
		for _, p := range ps[1:] {
			if olderInit(p, best, in) {
				best = p
			}
		}
		inits = append(inits, best)
		for _, p := range ps {
			if p.Pid != best.Pid && p.MountNS != best.MountNS {
				nested = append(nested, p)
			}
		}
	}
	sort.Slice(inits, func(i, j int) bool { return inits[i].Pid < inits[j].Pid })
	sort.Slice(nested, func(i, j int) bool { return nested[i].Pid < nested[j].Pid })
	return inits, nested
}

// olderInit reports whether a is a better init candidate than b.
func olderInit(a, b Proc, in map[int]bool) bool {
	if a.StartTime != b.StartTime {
		return a.StartTime < b.StartTime
	}
	if ao, bo := !in[a.PPid], !in[b.PPid]; ao != bo {
		return ao
	}
	return a.Pid < b.Pid
}

// podSandbox is the pod's oldest container init: the sandbox, which the runtime starts before
// any container of the pod (Proc{} for none).
func podSandbox(inits []Proc) Proc {
	var best Proc
	for i, p := range inits {
		if i == 0 || p.StartTime < best.StartTime || (p.StartTime == best.StartTime && p.Pid < best.Pid) {
			best = p
		}
	}
	return best
}

// RuntimeMade checks, from the kernel alone, that init's mount namespace is one the runtime made
// for its container: it is owned by init's user namespace; that user namespace is the pod's,
// its sandbox's (podSandbox), which the runtime gives every container of the pod; and the pod's
// is the agent's own (the host's) or a child of it (hostUsers: false: the runtime makes it from
// the host's). The pod spec is no input: a tenant writes hostUsers. A container whose init
// itself went into namespaces of its own making (an entrypoint that is `unshare -Urm …`) fails:
// its user namespace is not the sandbox's.
func RuntimeMade(init, sandbox Proc, agentUser uint64) error {
	switch {
	case init.MountNSOwner == 0 || init.UserNS == 0 || sandbox.UserNS == 0 || agentUser == 0:
		return fmt.Errorf("%w: the owners of pid %d's namespaces are unknown", ErrNotRuntimeNamespace, init.Pid)
	case init.MountNSOwner != init.UserNS:
		return fmt.Errorf("%w: pid %d's mount namespace is owned by user namespace %d, not by its own user namespace %d",
			ErrNotRuntimeNamespace, init.Pid, init.MountNSOwner, init.UserNS)
	case init.UserNS != sandbox.UserNS:
		return fmt.Errorf("%w: pid %d is in user namespace %d, not the pod's %d (its sandbox's, pid %d)",
			ErrNotRuntimeNamespace, init.Pid, init.UserNS, sandbox.UserNS, sandbox.Pid)
	case init.UserNS != agentUser && init.UserNSParent != agentUser:
		return fmt.Errorf("%w: pid %d's user namespace %d is nested in %d, not made from the host's %d",
			ErrNotRuntimeNamespace, init.Pid, init.UserNS, init.UserNSParent, agentUser)
	}
	return nil
}
