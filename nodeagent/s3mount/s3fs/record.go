package s3fs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// A bridge's s3fs must outlive the agent container (see doc.go, "Bridges outlive the agent"). It
// is started detached, moved into a cgroup of ours outside the container's, and recorded in
// <state>/s3/bridges/<pv>.json (pid and start time, and the cgroup) so that the next agent
// recognises it as its own, supervises it, and stops it when the bridge retires.

// ErrProcessGone is returned by ProcessStarter.Adopt when the recorded process no longer runs
// (or its pid now names another program).
var ErrProcessGone = errors.New("recorded process is gone")

// BridgeRecord is what the agent keeps of one bridge's s3fs across its own restarts.
type BridgeRecord struct {
	Proc ProcID `json:"proc"`
	// Cgroup is the group (relative to every hierarchy's root) the process was moved into; ""
	// when moving it failed.
	Cgroup string `json:"cgroup,omitempty"`
	// PV is the PV's full name (the file is named by PVComponent, a hashed form when long).
	PV string `json:"pv,omitempty"`
}

// BridgeCgroup is the cgroup of one bridge process under the configured parent group: one per
// process, so that the exit of a replaced bridge never races its successor for the group.
func BridgeCgroup(parent, pvName string, pid int) string {
	if parent == "" {
		return ""
	}
	return fmt.Sprintf("%s/%s-%d", parent, PVComponent(pvName), pid)
}

// parseBridgeCgroup returns the PV component and pid of a bridge's group name (BridgeCgroup's
// last element, "<pv>-<pid>").
func parseBridgeCgroup(name string) (pv string, pid int, ok bool) {
	pv, pid, ok = cutPID(name, '-')
	// A PV's name (and so its component) starts and ends with a letter or digit.
	if !ok || !alnum(pv[0]) || !alnum(pv[len(pv)-1]) {
		return "", 0, false
	}
	return pv, pid, true
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// readBridgeRecord reads pv's record; ok=false when there is none.
func (s *Supervisor) readRecord(pvName string) (BridgeRecord, bool, error) {
	data, err := s.os.FS.ReadFile(s.layout.BridgeRecordFile(pvName))
	if errors.Is(err, fs.ErrNotExist) {
		return BridgeRecord{}, false, nil
	}
	if err != nil {
		return BridgeRecord{}, false, err
	}
	var rec BridgeRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return BridgeRecord{}, false, fmt.Errorf("decode %s: %w", s.layout.BridgeRecordFile(pvName), err)
	}
	if rec.Proc.Pid <= 0 {
		return BridgeRecord{}, false, fmt.Errorf("decode %s: no pid", s.layout.BridgeRecordFile(pvName))
	}
	return rec, true, nil
}

func (s *Supervisor) writeRecord(pvName string, rec BridgeRecord) error {
	rec.PV = pvName
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return s.os.FS.WriteFile(s.layout.BridgeRecordFile(pvName), data, 0o600)
}

// PVFromBridgeRecord returns the PV of a record file name ("<pv>.json"), or ok=false; for a long
// PV name, its PVComponent (which Layout maps back to the same files; the record holds the full
// name).
func PVFromBridgeRecord(name string) (string, bool) {
	pv, ok := strings.CutSuffix(name, ".json")
	return pv, ok && pv != "" && !strings.HasPrefix(pv, ".")
}

// ParseProcStat returns the start time (field 22, clock ticks after boot) from the content of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may itself hold spaces and
// parentheses, so fields are counted after its last ')'.
func ParseProcStat(content string) (startTime uint64, state string, err error) {
	i := strings.LastIndexByte(content, ')')
	if i < 0 {
		return 0, "", fmt.Errorf("proc stat: no command name")
	}
	f := strings.Fields(content[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, "", fmt.Errorf("proc stat: %d fields after the command name, want >= 20", len(f))
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("proc stat: start time %q: %w", f[19], err)
	}
	return st, f[0], nil
}

// CgroupDirs returns, for group, its directory in every cgroup hierarchy of table (the mount
// table of the process whose view of the hierarchies is used), each mount point prefixed with
// root (e.g. /proc/1/root to reach the host's hierarchies from a container). v1 hierarchies
// (fstype cgroup) and the v2 one (cgroup2) are all returned; a hierarchy mounted twice counts
// once.
func CgroupDirs(table stack.Table, root, group string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range table {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		if seen[m.Dev] || m.Root != "/" {
			continue // a second mount of a hierarchy, or a sub-tree of it (a cgroup namespace)
		}
		seen[m.Dev] = true
		out = append(out, filepath.Join(root, m.MountPoint, group))
	}
	return out
}

// CgroupMount is one cgroup hierarchy mounted in a mount namespace.
type CgroupMount struct {
	// Root is the hierarchy path shown at MountPoint ("/" for the whole hierarchy; a container
	// on cgroup v1 sees its own cgroup's directory bound there).
	Root, MountPoint, FSType string
	// Options are the mount's super options without rw/ro: for v1 the controllers and a
	// name=..., what a new mount of the same hierarchy needs.
	Options []string
}

// ParseCgroupMounts returns the cgroup and cgroup2 mounts of a mountinfo content, one per
// hierarchy: the first mount point seen of each, with the mount on top there (a later mount at
// the same point covers the earlier one).
func ParseCgroupMounts(content string) []CgroupMount {
	var out []CgroupMount
	seen := map[string]bool{}
	at := map[string]int{} // mount point → index in out
	for _, line := range strings.Split(content, "\n") {
		mi, super, err := mountinfo.ParseLineSuper(line)
		if err != nil || (mi.FSType != "cgroup" && mi.FSType != "cgroup2") {
			continue
		}
		var opts []string
		for _, o := range strings.Split(super, ",") {
			if o != "rw" && o != "ro" && o != "" {
				opts = append(opts, o)
			}
		}
		key := mi.FSType + " " + strings.Join(opts, ",")
		if mi.FSType == "cgroup2" {
			key, opts = "cgroup2", nil // its super options (nsdelegate, ...) are not needed to mount it
		}
		m := CgroupMount{Root: mi.Root, MountPoint: mi.MountPoint, FSType: mi.FSType, Options: opts}
		if i, ok := at[m.MountPoint]; ok {
			out[i] = m
			continue
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		at[m.MountPoint] = len(out)
		out = append(out, m)
	}
	return out
}
