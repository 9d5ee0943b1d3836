package s3mount

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
)

// Event reasons (on the pod) when a mount is refused before anything is bound over a kubelet
// path; they say what the driver (or our bridge) produced. Each is also the result label of
// pvrescue_s3_result_checks_total (ResultOK when the mount passed).
const (
	// EventReplayResultNotVisible: nothing is mounted at the path, or only a directory of the
	// node's own filesystem: the driver mounted where the node does not see it (a path outside
	// what its container mounts), or not at all.
	EventReplayResultNotVisible = "ReplayResultNotVisible"
	// EventReplayResultWrongFilesystem: the mount is not of the dead mount's FUSE type (nor the
	// driver profile's).
	EventReplayResultWrongFilesystem = "ReplayResultWrongFilesystem"
	// EventReplayResultSameDevice: the mount is the dead filesystem again (same device).
	EventReplayResultSameDevice = "ReplayResultSameDevice"
	// EventReplayResultNotAnswering: the mount does not answer statfs.
	EventReplayResultNotAnswering = "ReplayResultNotAnswering"

	ResultOK = "OK"
)

// ourFUSETypes are the mount types of our own s3fs bridges: with our fsname= option s3fs
// mounts as plain "fuse" (seen on the node), some builds as "fuse.s3fs".
var ourFUSETypes = []string{"fuse", "fuse.s3fs"}

// ErrResultRefused is wrapped by every refusal of checkMount (a *ResultError).
var ErrResultRefused = errors.New("mount refused before binding it over a kubelet path")

// ResultError is a refusal of checkMount: Reason is one of the EventReplayResult* reasons.
type ResultError struct {
	Reason string
	Path   string
	Detail string
}

func (e *ResultError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Reason, e.Path, e.Detail)
}

func (e *ResultError) Unwrap() error { return ErrResultRefused }

// mountCheck is what checkMount compares a candidate mount with.
type mountCheck struct {
	// dead are the mounts at the kubelet path the candidate is to cover (their devices are the
	// dead filesystem, or our own binds); the candidate's device must be none of them.
	dead []MountInfo
	// fuseTypes are the accepted filesystem types: the dead driver mount's FUSE type and the
	// driver profile's (empty entries ignored).
	fuseTypes []string
}

// checkMount is the one check before anything is bound over a kubelet path (a replayed publish,
// a restaged globalmount, a bridge, a hand-back to the driver): source must be a mount point
// (not a directory of the node's filesystem: its device differs from the mount it sits on), of
// an accepted FUSE type, with a device other than the dead ones, answering statfs. It returns
// the candidate mount, or a *ResultError; the caller then binds nothing and leaves the dead
// mount where it is.
func (r *Restorer) checkMount(ctx context.Context, source string, c mountCheck) (MountInfo, error) {
	m, err := r.inspectMount(ctx, source, c)
	result := ResultOK
	var re *ResultError
	if errors.As(err, &re) {
		result = re.Reason
	} else if err != nil {
		return MountInfo{}, err
	}
	r.metrics.ResultChecks.WithLabelValues(result).Inc()
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("refused to bind a mount over a kubelet path", "source", source, "reason", re.Reason, "detail", re.Detail)
	}
	return m, err
}

func (r *Restorer) inspectMount(ctx context.Context, source string, c mountCheck) (MountInfo, error) {
	table, err := r.os.Mounter.MountTable()
	if err != nil {
		return MountInfo{}, err
	}
	refuse := func(reason, format string, args ...any) (MountInfo, error) {
		return MountInfo{}, &ResultError{Reason: reason, Path: source, Detail: fmt.Sprintf(format, args...)}
	}
	stack := table.Stack(source)
	if len(stack) == 0 {
		return refuse(EventReplayResultNotVisible, "nothing is mounted there (the driver mounted where the node does not see it, or not at all)")
	}
	top := stack[len(stack)-1]
	if parent, ok := mountByID(table, stack[0].ParentID); ok && parent.Dev == top.Dev {
		return refuse(EventReplayResultNotVisible, "a directory of the node's own filesystem (%s, device %s, as the mount it sits on)", top.FSType, top.Dev)
	}
	if slices.ContainsFunc(c.dead, func(d MountInfo) bool { return d.Dev == top.Dev }) {
		return refuse(EventReplayResultSameDevice, "device %s is already at the kubelet path (the dead mount's, or ours)", top.Dev)
	}
	if !isFUSE(top.FSType) || !slices.Contains(c.fuseTypes, top.FSType) {
		return refuse(EventReplayResultWrongFilesystem, "filesystem %q (source %q), want %s", top.FSType, top.Source, strings.Join(nonEmpty(c.fuseTypes), " or "))
	}
	if err := r.os.Statfs.Statfs(ctx, source, r.cfg.S3.StatfsTimeout.Duration); err != nil {
		return refuse(EventReplayResultNotAnswering, "statfs: %v", err)
	}
	return top, nil
}

func mountByID(t MountTable, id int) (MountInfo, bool) {
	for _, m := range t {
		if m.ID == id {
			return m, true
		}
	}
	return MountInfo{}, false
}

func isFUSE(fsType string) bool { return fsType == "fuse" || strings.HasPrefix(fsType, "fuse.") }

// nonEmpty returns the distinct non-empty entries of s, sorted.
func nonEmpty(s []string) []string {
	out := slices.DeleteFunc(slices.Clone(s), func(x string) bool { return x == "" })
	slices.Sort(out)
	return slices.Compact(out)
}

// checkFor builds the check for covering the kubelet path dst with a mount of pv's driver:
// every mount at dst is a dead one; accepted types are the lowest driver mount's there (not
// ours) and the profile's.
func (r *Restorer) checkFor(dst, driver string, table MountTable) mountCheck {
	stack := table.Stack(dst)
	c := mountCheck{dead: stack, fuseTypes: []string{r.cfg.S3.Profile(driver).FUSEType}}
	for _, m := range stack {
		if _, ours := PVFromFSName(m.Source); !ours && isFUSE(m.FSType) {
			c.fuseTypes = append(c.fuseTypes, m.FSType)
			break
		}
	}
	return c
}

// refused reports a refusal on the pods it concerns: an Event whose reason says what the driver
// produced (the dead mount stays as it is).
func (r *Restorer) refused(ts []target, err error) {
	var re *ResultError
	if !errors.As(err, &re) {
		return
	}
	r.metrics.Failures.WithLabelValues(re.Reason).Inc()
	for _, t := range ts {
		r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, re.Reason,
			"S3 volume %s: not bound over the dead mount, which stays: %s", t.pv, re.Detail)
	}
}
