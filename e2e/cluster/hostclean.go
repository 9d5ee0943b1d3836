package cluster

import (
	"path/filepath"
	"sort"
	"strings"
)

// MountPointsUnder returns the mount points in a /proc/self/mountinfo text that are at or below one
// of the roots, deepest first (the order they must be unmounted in). Duplicates (stacked mounts)
// are kept: each needs its own unmount.
func MountPointsUnder(mountinfo string, roots ...string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
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

// unescapeMountinfo undoes the octal escapes (\040 for space, …) of mountinfo fields.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

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
