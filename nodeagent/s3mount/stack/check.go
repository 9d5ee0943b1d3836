package stack

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// ResultOK is the result label of pvrescue_s3_result_checks_total for a mount that passed the
// check; a refusal's label is its Event reason (contract.ReasonReplayResult*), which says what
// the driver (or our bridge) produced.
const ResultOK = "OK"

// ErrResultRefused is wrapped by every refusal of Rules.Check (a *ResultError).
var ErrResultRefused = errors.New("mount refused before binding it over a kubelet path")

// ResultError is a refusal of Rules.Check: Reason is one of contract.ReasonReplayResult*.
type ResultError struct {
	Reason string
	Path   string
	Detail string
}

func (e *ResultError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Reason, e.Path, e.Detail)
}

func (e *ResultError) Unwrap() error { return ErrResultRefused }

// Check is what Rules.Check compares a candidate mount with.
type Check struct {
	// Dead are the mounts at the kubelet path the candidate is to cover (their devices are the
	// dead filesystem, or our own binds); the candidate's device must be none of them.
	Dead []Mount
	// FUSETypes are the accepted filesystem types: the dead driver mount's FUSE type and the
	// driver profile's (empty entries ignored).
	FUSETypes []string
	// Answered, when set, remembers the candidates that answered statfs in this restore pass
	// (see Answers); nil: every check asks the candidate's daemon.
	Answered *Answers
}

// Answers remembers, for one restore pass, the candidate mounts that answered statfs. A pass
// binds one bridge mount over each of its dead targets; asking the bridge's daemon again for
// each target queued a FUSE request behind the pods' own reads (1.7 ms a target at 100 pods,
// the largest single step of a bind). A mount is known by its ID and device: both are the
// same only for the mount that answered while it stays attached (an ID is reused only after
// its mount is gone, and a FUSE device only after its connection ended), and a pass lasts
// seconds. Safe for concurrent use; a nil *Answers remembers nothing.
type Answers struct {
	mu  sync.Mutex
	ids map[answerKey]bool
}

type answerKey struct {
	id  int
	dev string
}

// NewAnswers returns an empty memory for one pass.
func NewAnswers() *Answers { return &Answers{ids: map[answerKey]bool{}} }

// Has reports whether m answered earlier in the pass.
func (a *Answers) Has(m Mount) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[answerKey{m.ID, m.Dev}]
}

func (a *Answers) add(m Mount) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[answerKey{m.ID, m.Dev}] = true
}

// CheckFor builds the check for covering the kubelet path dst with a mount of a driver whose
// profile mounts profileFUSEType: every mount at dst is a dead one; accepted types are the
// lowest driver mount's there (not ours) and the profile's.
func CheckFor(table Table, dst, profileFUSEType string) Check {
	stack := table.Stack(dst)
	c := Check{Dead: stack, FUSETypes: []string{profileFUSEType}}
	for _, m := range stack {
		if _, ours := PVFromFSName(m.Source); !ours && IsFUSE(m.FSType) {
			c.FUSETypes = append(c.FUSETypes, m.FSType)
			break
		}
	}
	return c
}

// Check is the one check before anything is bound over a kubelet path (a replayed publish, a
// restaged globalmount, a bridge, a move back to the driver): source must be a mount point (not
// a directory of the node's filesystem: its device differs from the mount it sits on), of an
// accepted FUSE type, with a device other than the dead ones, answering statfs. It returns the
// candidate mount, or a *ResultError; the caller then binds nothing and leaves the dead mount
// where it is.
func (r *Rules) Check(ctx context.Context, source string, c Check) (Mount, error) {
	table, err := r.Mounter.MountTable()
	if err != nil {
		return Mount{}, err
	}
	return r.checkIn(ctx, table, source, c)
}

// checkIn is Check on a mount table the caller has just read.
func (r *Rules) checkIn(ctx context.Context, table Table, source string, c Check) (Mount, error) {
	m, err := r.inspect(ctx, table, source, c)
	result := ResultOK
	var re *ResultError
	if errors.As(err, &re) {
		result = re.Reason
	} else if err != nil {
		return Mount{}, err
	}
	if r.Checks != nil {
		r.Checks.WithLabelValues(result).Inc()
	}
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("refused to bind a mount over a kubelet path", "source", source, "reason", re.Reason, "detail", re.Detail)
	}
	return m, err
}

func (r *Rules) inspect(ctx context.Context, table Table, source string, c Check) (Mount, error) {
	refuse := func(reason, format string, args ...any) (Mount, error) {
		return Mount{}, &ResultError{Reason: reason, Path: source, Detail: fmt.Sprintf(format, args...)}
	}
	stack := table.Stack(source)
	if len(stack) == 0 {
		return refuse(contract.ReasonReplayResultNotVisible, "nothing is mounted there (the driver mounted where the node does not see it, or not at all)")
	}
	top := stack[len(stack)-1]
	if parent, ok := table.ByID(stack[0].ParentID); ok && parent.Dev == top.Dev {
		return refuse(contract.ReasonReplayResultNotVisible, "a directory of the node's own filesystem (%s, device %s, as the mount it sits on)", top.FSType, top.Dev)
	}
	if slices.ContainsFunc(c.Dead, func(d Mount) bool { return d.Dev == top.Dev }) {
		return refuse(contract.ReasonReplayResultSameDevice, "device %s is already at the kubelet path (the dead mount's, or ours)", top.Dev)
	}
	if !IsFUSE(top.FSType) || !slices.Contains(c.FUSETypes, top.FSType) {
		return refuse(contract.ReasonReplayResultWrongFilesystem, "filesystem %q (source %q), want %s", top.FSType, top.Source, strings.Join(nonEmpty(c.FUSETypes), " or "))
	}
	if c.Answered.Has(top) {
		return top, nil
	}
	if err := r.statfs(ctx, source); err != nil {
		return refuse(contract.ReasonReplayResultNotAnswering, "statfs: %v", err)
	}
	c.Answered.add(top)
	return top, nil
}

// nonEmpty returns the distinct non-empty entries of s, sorted.
func nonEmpty(s []string) []string {
	out := slices.DeleteFunc(slices.Clone(s), func(x string) bool { return x == "" })
	slices.Sort(out)
	return slices.Compact(out)
}
