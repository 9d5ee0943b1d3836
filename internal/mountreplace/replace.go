package mountreplace

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// Mode is how the new mount was put in place.
type Mode string

const (
	// Beneath: attached beneath the old top, which was then detached; the depth is unchanged.
	Beneath Mode = "beneath"
	// Stacked: attached on top of the old mount, which stays beneath (the fallback).
	Stacked Mode = "stacked"
)

// Reasons for Stacked.
const (
	// ReasonUnsupported: the start-up probe found no MOVE_MOUNT_BENEATH (Linux < 6.5).
	ReasonUnsupported = "unsupported"
	// ReasonRefused: the kernel refused the beneath move at this target (EINVAL: a locked
	// mount, or propagation from a shared parent that would overmount the top).
	ReasonRefused = "refused"
	// ReasonSubmounts: the old mount has mounts on it; detaching it would take them along.
	ReasonSubmounts = "submounts"
)

var (
	// ErrTargetChanged: the target's top is not the planned mount (before, during or after).
	ErrTargetChanged = errors.New("target changed")
	// ErrRefused is wrapped by Kernel.MoveBeneath when the kernel refuses the move (EINVAL).
	ErrRefused = errors.New("kernel refused to mount beneath")
	// ErrSource: the live mount could not be cloned, or its descriptor not used.
	ErrSource = errors.New("source")
	// ErrAttrs: mount_setattr on the new mount failed.
	ErrAttrs = errors.New("mount attributes")
	// ErrMove: move_mount failed for another reason than a refusal.
	ErrMove = errors.New("move_mount")
	// ErrDetach: the old mount could not be detached; the new one is beneath it.
	ErrDetach = errors.New("detach")
	// ErrVerify: the mount table after a step is not what the step must produce.
	ErrVerify = errors.New("mount table after the move")
	// ErrInvalid: a request that cannot be carried out as given.
	ErrInvalid = errors.New("invalid request")
)

// Propagation is a mount's propagation type as mountinfo shows it.
type Propagation struct {
	Shared bool // shared:N — sends mount events to its peers
	Slave  bool // master:N — receives mount events from a peer group
}

func (p Propagation) String() string {
	switch {
	case p.Shared && p.Slave:
		return "shared+slave"
	case p.Shared:
		return "shared"
	case p.Slave:
		return "slave"
	}
	return "private"
}

// Attrs are the per-mount flags a replacement keeps.
type Attrs struct {
	ReadOnly, NoSuid, NoDev, NoExec bool
	// Slave makes the detached tree a slave of the peer group it was cloned from (the live
	// mount's), instead of private.
	Slave bool
}

// Union is a with every flag of b added.
func (a Attrs) Union(b Attrs) Attrs {
	return Attrs{ReadOnly: a.ReadOnly || b.ReadOnly, NoSuid: a.NoSuid || b.NoSuid, NoDev: a.NoDev || b.NoDev,
		NoExec: a.NoExec || b.NoExec, Slave: a.Slave || b.Slave}
}

// AttrsOf reads the flags and propagation a replacement of m must keep.
func AttrsOf(m mountinfo.Mount) Attrs {
	return Attrs{ReadOnly: m.ReadOnly(), NoSuid: m.HasOption("nosuid"), NoDev: m.HasOption("nodev"),
		NoExec: m.HasOption("noexec"), Slave: PropagationOf(m).Slave}
}

// PropagationOf reads m's propagation tags.
func PropagationOf(m mountinfo.Mount) Propagation {
	var p Propagation
	for _, o := range m.Optional {
		switch {
		case strings.HasPrefix(o, "shared:"):
			p.Shared = true
		case strings.HasPrefix(o, "master:"):
			p.Slave = true
		}
	}
	return p
}

// Kernel is the mount calls a replacement makes, in the calling thread's mount namespace.
type Kernel interface {
	// MountInfo is the calling thread's mountinfo.
	MountInfo() (string, error)
	// TopID is the mount ID at path (statx STATX_MNT_ID, no symlinks followed, no FUSE request).
	TopID(path string) (int, error)
	// Clone returns a detached clone of the mount at path (open_tree OPEN_TREE_CLONE).
	Clone(path string) (int, error)
	// TreeID is the mount ID of a detached tree.
	TreeID(tree int) (int, error)
	// SetAttrs sets exactly a on a detached tree (flags set and cleared, propagation).
	SetAttrs(tree int, a Attrs) error
	// SetPropagation changes an attached mount's propagation through its tree descriptor.
	SetPropagation(tree int, p Propagation) error
	// MoveBeneath attaches tree beneath the top mount at path, which must be mount top (else
	// ErrTargetChanged); a refusal by the kernel wraps ErrRefused.
	MoveBeneath(tree int, path string, top int) error
	// MoveOnTop attaches tree on top of the mount at path, which must be mount top.
	MoveOnTop(tree int, path string, top int) error
	// Detach lazily unmounts the top mount at path, which must be mount top.
	Detach(path string, top int) error
	// Close closes a descriptor Clone returned.
	Close(fd int) error
}

// Placement is where one attached mount sits, in mountinfo's IDs, and its propagation.
type Placement struct {
	ID, ParentID int
	MountPoint   string
	Propagation  Propagation
}

// ErrNoPlacement is wrapped by Placer.Placements when the kernel cannot tell (no statmount):
// the Replacer then reads the mount table.
var ErrNoPlacement = errors.New("placements need statmount")

// Placer is a Kernel that tells where two mounts sit without a read of the whole mount table
// (statmount, Linux 6.8): the check after a beneath move read it, a generation of every line
// under the kernel's mount lock (1.2 ms a replacement on a node with 100 pods).
type Placer interface {
	// Placements returns where the mount of tree and the top mount at target sit.
	Placements(tree int, target string) (ofTree, top Placement, err error)
}

// Support is what the start-up probe found.
type Support struct {
	// Beneath is true when the kernel mounts beneath a top mount.
	Beneath bool
	// Err is why not (nil when Beneath).
	Err error
}

func (s Support) String() string {
	if s.Beneath {
		return "mount beneath supported: dead mounts are replaced in place"
	}
	return fmt.Sprintf("mount beneath unavailable (%v): restored mounts are stacked on the dead ones", s.Err)
}

// Request is one replacement.
type Request struct {
	// Target is the path whose top mount is replaced, in the calling thread's namespace.
	Target string
	// Old is the mount ID the caller planned to replace; it must be the top at Target.
	Old int
	// Tree is a detached mount (open_tree OPEN_TREE_CLONE) to put in place; the caller keeps
	// it and closes it. When 0, LivePath is cloned (and the clone closed) here.
	Tree     int
	LivePath string
	// Add is added to the flags taken from the old mount (never cleared from them).
	Add Attrs
	// NoPeerGroup: the tree's source is in no peer group (not shared), so the new mount cannot
	// be a slave; it is private even where the old mount (or Add) is a slave, instead of failing
	// the check after the move.
	NoPeerGroup bool
	// Table is the mount table as the caller read it after choosing Old, or nil to read it
	// here: a read is a generation of every line under the kernel's mount lock, hundreds on a
	// busy node, and the caller just did one. Old's place and flags are taken from it; that Old
	// is still the top at Target is checked by the kernel calls as always.
	Table []mountinfo.Mount
}

// Result is what one replacement did.
type Result struct {
	Mode Mode
	// Reason says why Mode is Stacked; empty for Beneath.
	Reason string
	// Refusal is the kernel's error when Reason is ReasonRefused.
	Refusal error
	// Old and New are the mount IDs replaced and put in place.
	Old, New int
	// Attrs are the flags and propagation the new mount was given.
	Attrs Attrs
	// Propagation is the new mount's, as the table shows it once in place.
	Propagation Propagation
	Took        time.Duration
}

// Replacer runs replacements with Kernel, beneath when Support says the kernel can.
type Replacer struct {
	Kernel  Kernel
	Support Support
	// Now is the clock for Result.Took (time.Now when nil).
	Now func() time.Time
}

func (r Replacer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Replace puts the tree in place of req.Old at req.Target (see the package doc for the steps).
// On an error the Result says how far it went: New is 0 when nothing was attached.
func (r Replacer) Replace(req Request) (Result, error) {
	start := r.now()
	res := Result{Old: req.Old}
	if req.Target == "" || req.Old <= 0 || (req.Tree <= 0 && req.LivePath == "") {
		return res, fmt.Errorf("%w: target %q, old mount %d, tree %d, live path %q", ErrInvalid, req.Target, req.Old, req.Tree, req.LivePath)
	}
	target := filepath.Clean(req.Target)
	table, err := req.Table, error(nil)
	if table == nil {
		if table, err = r.table(); err != nil {
			return res, err
		}
	}
	old, ok := byID(table, req.Old)
	if !ok || old.MountPoint != target {
		return res, fmt.Errorf("%w: mount %d is not mounted at %s", ErrTargetChanged, req.Old, target)
	}
	if err := r.expectTop(target, req.Old); err != nil {
		return res, err
	}

	tree := req.Tree
	if tree <= 0 {
		if tree, err = r.Kernel.Clone(req.LivePath); err != nil {
			return res, fmt.Errorf("%w: clone %s: %w", ErrSource, req.LivePath, err)
		}
		defer func() { _ = r.Kernel.Close(tree) }()
	}
	res.Attrs = AttrsOf(old).Union(req.Add)
	if req.NoPeerGroup {
		res.Attrs.Slave = false
	}
	if err := r.Kernel.SetAttrs(tree, res.Attrs); err != nil {
		return res, fmt.Errorf("%w: detached tree for %s: %w", ErrAttrs, target, err)
	}
	newID, err := r.Kernel.TreeID(tree)
	if err != nil {
		return res, fmt.Errorf("%w: mount ID of the detached tree: %w", ErrSource, err)
	}

	switch {
	case !r.Support.Beneath:
		res.Reason = ReasonUnsupported
	case len(children(table, old.ID)) > 0:
		res.Reason = ReasonSubmounts
	default:
		err := r.Kernel.MoveBeneath(tree, target, old.ID)
		switch {
		case err == nil:
			res.Mode, res.New = Beneath, newID
			err = r.finishBeneath(target, old, tree, &res)
			res.Took = r.now().Sub(start)
			return res, err
		case errors.Is(err, ErrRefused):
			res.Reason, res.Refusal = ReasonRefused, err
		case errors.Is(err, ErrTargetChanged):
			return res, err
		default:
			return res, fmt.Errorf("%w: beneath %s: %w", ErrMove, target, err)
		}
	}

	// Fallback: on top of the old mount, as before the kernel could mount beneath.
	if err := r.Kernel.MoveOnTop(tree, target, old.ID); err != nil {
		if errors.Is(err, ErrTargetChanged) {
			return res, err
		}
		return res, fmt.Errorf("%w: onto %s: %w", ErrMove, target, err)
	}
	res.Mode, res.New = Stacked, newID
	if err := r.expectTop(target, newID); err != nil {
		return res, err
	}
	if table, err := r.table(); err == nil {
		if m, ok := byID(table, newID); ok {
			res.Propagation = PropagationOf(m)
		}
	}
	res.Took = r.now().Sub(start)
	return res, nil
}

// finishBeneath checks the tree is where the old top was, matches the old mount's propagation
// type, detaches the old top and checks the new mount is the top.
func (r Replacer) finishBeneath(target string, old mountinfo.Mount, tree int, res *Result) error {
	nm, om, err := r.placements(tree, target, res.New, old.ID)
	if err != nil {
		return err
	}
	switch {
	case nm.ID != res.New || om.ID != old.ID:
		return fmt.Errorf("%w: mounts %d (new) or %d (old, the top at %s) missing: found %d and %d", ErrVerify, res.New, old.ID, target, nm.ID, om.ID)
	case nm.ParentID != old.ParentID || nm.MountPoint != target:
		return fmt.Errorf("%w: new mount %d is on %d at %s, want on %d at %s", ErrVerify, nm.ID, nm.ParentID, nm.MountPoint, old.ParentID, target)
	case om.ParentID != nm.ID:
		return fmt.Errorf("%w: old mount %d is on %d, want on the new mount %d", ErrVerify, om.ID, om.ParentID, nm.ID)
	}
	// Shared as the old mount was; slave as the old mount or the caller says (a slave whose
	// master group emptied shows as private).
	want, got := Propagation{Shared: PropagationOf(old).Shared, Slave: res.Attrs.Slave}, nm.Propagation
	if want != got {
		// Attaching to a shared parent makes a mount shared; a private or slave old mount under
		// such a parent had been changed after it was mounted, and so is the new one.
		if err := r.Kernel.SetPropagation(tree, want); err != nil {
			return fmt.Errorf("%w: propagation %s of the new mount (want %s): %w", ErrAttrs, got, want, err)
		}
		if nm, _, err = r.placements(tree, target, res.New, old.ID); err != nil {
			return err
		}
		if got = nm.Propagation; got != want {
			return fmt.Errorf("%w: new mount %d is %s, want %s like the old one", ErrVerify, nm.ID, got, want)
		}
	}
	res.Propagation = got
	if err := r.Kernel.Detach(target, old.ID); err != nil {
		if errors.Is(err, ErrTargetChanged) {
			return err
		}
		return fmt.Errorf("%w: %s (mount %d): %w", ErrDetach, target, old.ID, err)
	}
	return r.expectTop(target, res.New)
}

// placements is where the mount of tree (ID newID) and the top at target (the old mount, ID
// oldID, while it is not detached) sit: by statmount where the Kernel is a Placer that
// answers, else from the mount table (a mount missing there has ID 0).
func (r Replacer) placements(tree int, target string, newID, oldID int) (ofTree, top Placement, err error) {
	if p, ok := r.Kernel.(Placer); ok {
		ofTree, top, err = p.Placements(tree, target)
		if !errors.Is(err, ErrNoPlacement) {
			return ofTree, top, err
		}
	}
	table, err := r.table()
	if err != nil {
		return Placement{}, Placement{}, err
	}
	place := func(id int) Placement {
		m, ok := byID(table, id)
		if !ok {
			return Placement{}
		}
		return Placement{ID: m.ID, ParentID: m.ParentID, MountPoint: m.MountPoint, Propagation: PropagationOf(m)}
	}
	return place(newID), place(oldID), nil
}

func (r Replacer) table() ([]mountinfo.Mount, error) {
	s, err := r.Kernel.MountInfo()
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	t, err := mountinfo.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("parse mountinfo: %w", err)
	}
	return t, nil
}

func (r Replacer) expectTop(target string, id int) error {
	top, err := r.Kernel.TopID(target)
	if err != nil {
		return fmt.Errorf("%w: statx %s: %w", ErrTargetChanged, target, err)
	}
	if top != id {
		return fmt.Errorf("%w: top of %s is mount %d, want %d", ErrTargetChanged, target, top, id)
	}
	return nil
}

func byID(table []mountinfo.Mount, id int) (mountinfo.Mount, bool) {
	for _, m := range table {
		if m.ID == id {
			return m, true
		}
	}
	return mountinfo.Mount{}, false
}

func children(table []mountinfo.Mount, id int) []int {
	var out []int
	for _, m := range table {
		if m.ParentID == id && m.ID != id {
			out = append(out, m.ID)
		}
	}
	return out
}
