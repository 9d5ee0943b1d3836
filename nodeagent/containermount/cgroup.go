package containermount

import (
	"strings"
)

// CgroupInfo is what a process's cgroup membership says about the pod and container it runs in.
type CgroupInfo struct {
	// PodUID is the pod's UID in its canonical dashed form (as in metadata.uid).
	PodUID string
	// ContainerID is the runtime's container ID (without "containerd://" or a "cri-containerd-"
	// prefix), or "" when the process sits in the pod's cgroup itself.
	ContainerID string
}

// ParseCgroup reads the content of /proc/<pid>/cgroup and finds the pod the process belongs to.
// It understands both cgroup drivers under cgroup v1 and v2:
//
//	cgroupfs: .../kubepods/burstable/pod<uid>/<containerid>
//	systemd:  .../kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
//
// and paths shortened by a cgroup namespace. ok is false for a process outside any pod.
func ParseCgroup(content string) (info CgroupInfo, ok bool) {
	for _, line := range strings.Split(content, "\n") {
		// hierarchy-ID:controller-list:cgroup-path; the path may itself hold ':'.
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if info, ok := parseCgroupPath(parts[2]); ok {
			return info, true
		}
	}
	return CgroupInfo{}, false
}

func parseCgroupPath(path string) (CgroupInfo, bool) {
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		uid, ok := podSegmentUID(seg)
		if !ok {
			continue
		}
		info := CgroupInfo{PodUID: uid}
		if i+1 < len(segs) {
			info.ContainerID = containerIDFromSegment(segs[i+1])
		}
		return info, true
	}
	return CgroupInfo{}, false
}

// podSegmentUID recognises "pod<uid>" (cgroupfs) and "kubepods[-<qos>]-pod<uid_>.slice" (systemd).
func podSegmentUID(seg string) (string, bool) {
	var raw string
	switch {
	case strings.HasSuffix(seg, ".slice"):
		s := strings.TrimSuffix(seg, ".slice")
		i := strings.LastIndex(s, "-pod")
		if i < 0 || !strings.HasPrefix(s, "kubepods") {
			return "", false
		}
		raw = s[i+len("-pod"):]
	case strings.HasPrefix(seg, "pod"):
		raw = strings.TrimPrefix(seg, "pod")
	default:
		return "", false
	}
	uid := strings.ReplaceAll(raw, "_", "-")
	if !looksLikeUID(uid) {
		return "", false
	}
	return strings.ToLower(uid), true
}

// looksLikeUID accepts a UUID (8-4-4-4-12 hex) or the 32 hex digits kubelet uses as the UID of
// a static pod.
func looksLikeUID(s string) bool {
	hex := 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
			hex++
		case c == '-':
		default:
			return false
		}
	}
	if hex != 32 {
		return false
	}
	if !strings.Contains(s, "-") {
		return true
	}
	groups := strings.Split(s, "-")
	if len(groups) != 5 {
		return false
	}
	for i, want := range []int{8, 4, 4, 4, 12} {
		if len(groups[i]) != want {
			return false
		}
	}
	return true
}

// containerIDFromSegment strips the runtime's decoration from a container's cgroup directory.
func containerIDFromSegment(seg string) string {
	id := strings.TrimSuffix(seg, ".scope")
	for _, p := range []string{"cri-containerd-", "crio-", "cri-o-", "docker-", "containerd-"} {
		if strings.HasPrefix(id, p) {
			id = strings.TrimPrefix(id, p)
			break
		}
	}
	// systemd's runc path form "<slice>:cri-containerd:<id>" never appears in /proc, but a
	// colon-joined name is not an ID either.
	if i := strings.LastIndex(id, ":"); i >= 0 {
		id = id[i+1:]
	}
	return id
}

// NormalizeUID returns a pod UID in the form ParseCgroup reports.
func NormalizeUID(uid string) string {
	return strings.ToLower(strings.ReplaceAll(uid, "_", "-"))
}

// TrimContainerID strips the "<runtime>://" scheme of a containerStatuses[].containerID.
func TrimContainerID(id string) string {
	if i := strings.Index(id, "://"); i >= 0 {
		return id[i+3:]
	}
	return id
}
