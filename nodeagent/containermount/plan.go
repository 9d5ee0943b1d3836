package containermount

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Sentinel errors of planning; each maps to a metrics reason.
var (
	// ErrOutsideVolume: a container mount of the dead connection shows a directory that is not
	// below the pod target's root, so its offset inside the volume is unknown.
	ErrOutsideVolume = errors.New("mount root is outside the volume's root")
	// ErrDeletedRoot: the directory a mount shows was deleted ("//deleted" in mountinfo).
	ErrDeletedRoot = errors.New("mount root was deleted")
)

// Offset returns where a container's mount sits inside the volume: its mountinfo root relative to
// the root of the pod's (dead) target mount. "" is the volume root; "sub/dir" a subPath.
// It never returns a path that leaves the volume.
func Offset(deadRoot, mountRoot string) (string, error) {
	if strings.HasSuffix(mountRoot, "//deleted") || strings.HasSuffix(deadRoot, "//deleted") {
		return "", fmt.Errorf("%w: %q", ErrDeletedRoot, mountRoot)
	}
	if !path.IsAbs(deadRoot) || !path.IsAbs(mountRoot) {
		return "", fmt.Errorf("%w: root %q of dead target %q is not absolute", ErrOutsideVolume, mountRoot, deadRoot)
	}
	base, m := path.Clean(deadRoot), path.Clean(mountRoot)
	if base == m {
		return "", nil
	}
	prefix := base
	if prefix != "/" {
		prefix += "/"
	}
	if !strings.HasPrefix(m, prefix) {
		return "", fmt.Errorf("%w: %q is not below %q", ErrOutsideVolume, mountRoot, deadRoot)
	}
	return strings.TrimPrefix(m, prefix), nil
}

// Proc is what the remounter knows about one process on the node.
type Proc struct {
	Pid int
	// MountNS and UserNS are namespace inode numbers (from /proc/<pid>/ns/{mnt,user}).
	MountNS uint64
	UserNS  uint64
	Cgroup  CgroupInfo
	// PPid and StartTime come from /proc/<pid>/stat (ContainerInits).
	PPid      int
	StartTime uint64
	// MountNSOwner is the user namespace owning MountNS (NS_GET_USERNS); UserNSParent is
	// UserNS's parent (NS_GET_PARENT; 0 for the host's). RuntimeMade checks them.
	MountNSOwner, UserNSParent uint64
}

// Namespace is one distinct mount namespace of a pod, with every process of the pod in it.
type Namespace struct {
	Inode uint64
	// Pids in ascending order; the first that is still alive is entered.
	Pids []int
	// ContainerIDs of the processes in it, sorted, without duplicates.
	ContainerIDs []string
	UserNS       uint64
}

// GroupByNamespace picks the processes of the pod podUID and groups them by mount namespace,
// skipping the namespaces in skip (the host's and the agent's own). The result is ordered by
// lowest pid, so a pass is deterministic.
func GroupByNamespace(procs []Proc, podUID string, skip ...uint64) []Namespace {
	want := NormalizeUID(podUID)
	byNS := map[uint64]*Namespace{}
	for _, p := range procs {
		if p.Cgroup.PodUID != want || p.MountNS == 0 {
			continue
		}
		skipped := false
		for _, s := range skip {
			if s != 0 && p.MountNS == s {
				skipped = true
			}
		}
		if skipped {
			continue
		}
		ns := byNS[p.MountNS]
		if ns == nil {
			ns = &Namespace{Inode: p.MountNS, UserNS: p.UserNS}
			byNS[p.MountNS] = ns
		}
		ns.Pids = append(ns.Pids, p.Pid)
		if id := p.Cgroup.ContainerID; id != "" && !contains(ns.ContainerIDs, id) {
			ns.ContainerIDs = append(ns.ContainerIDs, id)
		}
	}
	out := make([]Namespace, 0, len(byNS))
	for _, ns := range byNS {
		sort.Ints(ns.Pids)
		sort.Strings(ns.ContainerIDs)
		out = append(out, *ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pids[0] < out[j].Pids[0] })
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Target is one dead mount inside a container to be covered by the live one.
type Target struct {
	// MountPoint is the path inside the container.
	MountPoint string
	// Offset is the directory inside the volume the container's mount shows ("" = the root).
	Offset string
	// DeadMountID is the mountinfo ID of the mount a lookup of MountPoint reached when planning
	// (the dead mount, or the live ancestor it is hidden under); the attach is refused if the
	// path no longer reaches that mount.
	DeadMountID int
	// ReadOnly, NoSuid, NoDev, NoExec copy the dead mount's per-mount flags onto the new one.
	ReadOnly, NoSuid, NoDev, NoExec bool
	// Slave: the new mount receives propagation from the live mount's peer group — the dead
	// mount received it (master:N or shared:N) or the pod spec asks for it (HostToContainer,
	// Bidirectional; CheckPlan).
	Slave bool
	// Nest: MountPoint is hidden under a live mount of the volume on an ancestor (DeadMountID
	// names it): the clone is attached inside that live mount, nothing is replaced.
	Nest bool
	// Reprotect: a lookup of MountPoint already reaches a live mount of the volume — propagated
	// in from the host (HostToContainer) — but it is writable while the container's dead mount
	// beneath it was read-only. Nothing is attached: that live mount (DeadMountID names it) is
	// made read-only in place, so the restore never turns a read-only volume writable.
	Reprotect bool
}

// Plan is what one container namespace needs.
type Plan struct {
	Targets []Target
	// Live are the mount points of the volume left alone: a lookup there reaches a live mount
	// (or something else mounted over the dead one).
	Live []string
	// Skipped are dead mounts that cannot be fixed safely (ErrOutsideVolume, ErrDeletedRoot),
	// keyed by mount point.
	Skipped map[string]error
}

// PlanNamespace finds, in a container's mount table, every mount point of the dead connection
// deadDev that a lookup still resolves to the dead connection, and the offset inside the volume
// each shows. It also finds mount points of the dead connection hidden under a live mount of
// the volume (liveDev) made on an ancestor — a subPath nested under the volume's own mount
// point, once the outer one is live again — so they can be put back inside it. Mount points
// where something else is reached are counted as Live and left alone — except a live mount of
// the volume that propagated in writable over a read-only dead one, which is planned as a
// Reprotect target (made read-only in place).
func PlanNamespace(table MountTable, deadDev, deadRoot, liveDev string) Plan {
	p := Plan{Skipped: map[string]error{}}
	seen := map[string]bool{}
	for _, m := range table {
		if m.Dev != deadDev || seen[m.MountPoint] {
			continue
		}
		seen[m.MountPoint] = true
		reached, _ := table.Reach(m.MountPoint)
		var dead Mount
		nested := false
		switch {
		case reached.MountPoint == m.MountPoint && reached.Dev == deadDev:
			dead = reached // the dead mount is what a lookup reaches
		case reached.MountPoint != m.MountPoint && reached.Dev == liveDev && liveDev != deadDev:
			dead = topDead(table, m.MountPoint, deadDev) // hidden under a live ancestor: nest it again
			nested = true
		case reached.MountPoint == m.MountPoint && reached.Dev == liveDev && liveDev != deadDev &&
			!reached.ReadOnly() && topDead(table, m.MountPoint, deadDev).ReadOnly():
			// Live by propagation, but writable over a read-only container mount.
			p.Targets = append(p.Targets, Target{MountPoint: m.MountPoint, DeadMountID: reached.ID, ReadOnly: true, Reprotect: true})
			continue
		default:
			p.Live = append(p.Live, m.MountPoint)
			continue
		}
		off, err := Offset(deadRoot, dead.Root)
		if err != nil {
			p.Skipped[m.MountPoint] = err
			continue
		}
		p.Targets = append(p.Targets, Target{
			MountPoint:  m.MountPoint,
			Offset:      off,
			DeadMountID: reached.ID,
			ReadOnly:    dead.ReadOnly(),
			NoSuid:      dead.HasOption("nosuid"),
			NoDev:       dead.HasOption("nodev"),
			NoExec:      dead.HasOption("noexec"),
			Slave:       receivesPropagation(dead),
			Nest:        nested,
		})
	}
	// Outer mount points first; an inner one hidden by fixing its ancestor is planned again, now
	// inside the live ancestor, by the next round.
	sort.SliceStable(p.Targets, func(i, j int) bool {
		return depth(p.Targets[i].MountPoint) < depth(p.Targets[j].MountPoint)
	})
	return p
}

// topDead returns the uppermost mount of the dead connection at mountPoint.
func topDead(table MountTable, mountPoint, deadDev string) Mount {
	var out Mount
	for _, m := range table.Stack(mountPoint) {
		if m.Dev == deadDev {
			out = m
		}
	}
	return out
}

func depth(p string) int { return strings.Count(path.Clean(p), "/") }

// ExpectedRoot is the mountinfo root the new mount must show: the live mount's root joined with
// the offset.
func ExpectedRoot(liveRoot, offset string) string {
	return path.Join(liveRoot, offset)
}

// NamespaceInode parses the target of a /proc/<pid>/ns/<type> link ("mnt:[4026531840]").
func NamespaceInode(link string) (uint64, error) {
	_, rest, ok := strings.Cut(link, ":[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return 0, fmt.Errorf("not a namespace link: %q", link)
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a namespace link: %q: %w", link, err)
	}
	return n, nil
}

func receivesPropagation(m Mount) bool {
	for _, o := range m.Optional {
		if strings.HasPrefix(o, "master:") || strings.HasPrefix(o, "shared:") {
			return true
		}
	}
	return false
}
