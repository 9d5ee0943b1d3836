package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// ErrParse marks /proc content this program cannot read.
var ErrParse = errors.New("unexpected /proc content")

// ParseProcStat returns utime and stime (clock ticks) from one /proc/<pid>/stat line.
func ParseProcStat(line string) (utime, stime uint64, err error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("%w: no ')' in stat line", ErrParse)
	}
	// After "pid (comm)": state is field 3; utime and stime are fields 14 and 15.
	f := strings.Fields(line[i+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("%w: %d fields after comm", ErrParse, len(f))
	}
	if utime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%w: utime: %w", ErrParse, err)
	}
	if stime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("%w: stime: %w", ErrParse, err)
	}
	return utime, stime, nil
}

// ParseVmRSS returns the resident set size in bytes from /proc/<pid>/status content.
func ParseVmRSS(status string) (int64, error) {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("%w: VmRSS line %q", ErrParse, l)
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: VmRSS: %w", ErrParse, err)
			}
			return n * 1024, nil
		}
	}
	return 0, fmt.Errorf("%w: no VmRSS line", ErrParse)
}

// LoadAvg is the first three fields of /proc/loadavg, or an error note.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return strings.TrimSpace(string(b))
	}
	return strings.Join(f[:3], " ")
}

// Machine describes where the figures were taken.
type Machine struct {
	CPUs, Model, Kernel, Go, MemTotal, Others string
}

// DescribeMachine reads the host's description; failures become "unknown" rather than errors,
// since a missing line must not lose the figures.
func DescribeMachine() Machine {
	m := Machine{CPUs: "unknown", Model: "unknown", Kernel: "unknown", Go: "unknown", MemTotal: "unknown"}
	if out, err := exec.Command("nproc").Output(); err == nil {
		m.CPUs = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				m.MemTotal = strings.TrimSpace(v)
			}
		}
	}
	m.Others = busiest()
	return m
}

// busiest lists the processes with the most CPU time, to say what else shared the machine.
func busiest() string {
	out, err := exec.Command("ps", "-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	var items []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || len(items) >= 8 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err != nil || v < 1 {
			continue
		}
		items = append(items, f[1]+" "+f[0]+"%")
	}
	if len(items) == 0 {
		return "nothing above 1 % CPU (lifetime average, ps)"
	}
	return strings.Join(items, ", ") + " (ps %CPU, lifetime average)"
}
