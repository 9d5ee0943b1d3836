package cluster

import (
	"path/filepath"
	"sort"
	"strings"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// MountPointsUnder returns the mount points in a /proc/self/mountinfo text that are at or below one
// of the roots, deepest first (the order they must be unmounted in). Duplicates (stacked mounts)
// are kept: each needs its own unmount.
func MountPointsUnder(table string, roots ...string) []string {
	var out []string
	for _, m := range mountinfo.ParseLenient(table) {
		mp := m.MountPoint
		for _, r := range roots {
			r = filepath.Clean(r)
			if mp == r || strings.HasPrefix(mp, r+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// UnderAny reports whether p is one of roots or below one of them.
func UnderAny(p string, roots ...string) bool {
	p = strings.TrimSuffix(strings.TrimSpace(p), " (deleted)")
	for _, r := range roots {
		r = filepath.Clean(r)
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// ForeignLoopBacking reports whether a loop device's backing-file name is one the e2e cluster's
// workloads leave when they open files in their own mount namespaces: "/" (kubelet's device lock on
// a bind-mounted device node) or "/localdisk/…" (the agent's fake images, see nodeagent/localdisk).
func ForeignLoopBacking(back string) bool {
	back = strings.TrimSuffix(strings.TrimSpace(back), " (deleted)")
	return back == "/" || strings.HasPrefix(back, "/"+localdiskSubDir+"/")
}

// localdiskSubDir is nodeagent/localdisk.SubDir, the agent's directory for fake images.
const localdiskSubDir = "localdisk"
