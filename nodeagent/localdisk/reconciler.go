package localdisk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/pvrescue/pvrescue/internal/statename"
)

// Sentinel errors for bad input: reported, never acted upon.
var (
	ErrRelativePath = errors.New("path is not absolute and clean")
	ErrNotUnderDev  = errors.New("path is outside the allowed PV path roots")
	ErrPathIsDir    = errors.New("path resolves to a directory")
	ErrPathAppeared = errors.New("path appeared while the fake was being linked")
	// ErrKernelName: the missing path is a kernel device name (/dev/sdb, /dev/nvme0n1); kernel
	// names are reassigned across reboots and devtmpfs will not create the returning disk's node
	// over a link, so it is never faked, only reported.
	ErrKernelName = errors.New("kernel device names are never faked")
	// ErrNotUnderLinkRoot: the first missing component of the path's link chain is outside the
	// link roots (an admin's link in a discovery directory is never changed).
	ErrNotUnderLinkRoot = errors.New("first missing link is outside the link roots")
	// ErrDirNotVisible: the first missing component's directory does not exist where the agent
	// looks — typically a path root (a discovery directory) not mounted into the agent's
	// container. Wrapped together with ErrNotUnderLinkRoot.
	ErrDirNotVisible = errors.New("its directory is not visible to the agent: mount the path root into the agent's container")
	// ErrLinkLoop: the path's link chain is too long or loops.
	ErrLinkLoop = errors.New("too many levels of symbolic links")
)

// Default roots: where PV paths may lie, and where the agent may put a fake link.
var (
	DefaultPathRoots = []string{"/dev/disk", "/mnt/disks", "/mnt/fast-disks"}
	DefaultLinkRoots = []string{"/dev/disk/by-id", "/dev/disk/by-path", "/dev/disk/by-uuid"}
)

const maxLinkHops = 40

// SubDir is the directory under the agent's state directory holding fake images and records.
const SubDir = "localdisk"

// ReconcilerOptions are the knobs of one Reconciler.
type ReconcilerOptions struct {
	// StateDir is the agent's state directory; a loop is ours only if its backing file is inside it.
	StateDir string
	// DevDir holds the loop device nodes (/dev).
	DevDir string
	// PathRoots: PV paths must lie under one of them (or be a kernel device name, which is
	// followed but never faked). Default DefaultPathRoots.
	PathRoots []string
	// LinkRoots: a fake link is only made at a path under one of them. Default DefaultLinkRoots.
	LinkRoots []string
	// FakeSize is the exact size of a fake image in bytes.
	FakeSize int64
	// FirstLoopMinor and LoopSearchLimit bound the loop numbers the agent may take.
	FirstLoopMinor  int
	LoopSearchLimit int
}

// Volume is a PV of this node that the agent watches.
type Volume struct {
	PV   string
	Path string
	// MayFake: a new fake may be made for it (every pod on this node using it carries the
	// guard). An existing fake is kept either way.
	MayFake bool
}

// State is what one pass found for a watched volume.
type State int

const (
	// StatePresent: something that is not ours is at the path (the real disk, normally).
	StatePresent State = iota
	// StateMissing: the path is absent and no fake was made (creation gated off or failed).
	StateMissing
	// StateFaked: the path is a link to our loop.
	StateFaked
	// StateInvalid: bad input; nothing was touched.
	StateInvalid
)

func (s State) String() string {
	return [...]string{"Present", "Missing", "Faked", "Invalid"}[s]
}

// VolumeStatus is the outcome of one pass for one watched volume.
type VolumeStatus struct {
	Volume
	State State
	// Loop is the fake's loop minor when Faked.
	Loop int
	// Link is where the fake link is (Faked), or the first missing component (Missing).
	Link string
	// Created: the link was made during this pass.
	Created bool
	// Err explains Invalid, or why a Missing path got no fake.
	Err error
}

// RetireStatus is the outcome for a fake that is no longer wanted.
type RetireStatus struct {
	PV, Path string
	// Loop is the minor, -1 when no loop was attached.
	Loop int
	// DiskReturned: the path now holds something else; otherwise the PV is gone or not watched.
	DiskReturned bool
	// Held: the loop is still held (kubelet's device lock, a holder); retried next pass.
	Held bool
	// Done: loop detached, image and record removed.
	Done bool
	// Created is when the fake was made (from the record).
	Created time.Time
	Err     error
}

// Result of one pass.
type Result struct {
	Volumes []VolumeStatus
	Retired []RetireStatus
	// Errors are problems not tied to one volume (listing loops, orphans).
	Errors []error
}

// record is the state file written before anything else for a fake, so that a crash at any later
// step leaves enough to finish or undo it.
type record struct {
	PV   string `json:"pv"`
	Path string `json:"path"`
	// Link is where the fake link was made: Path itself, or the first missing component of its
	// link chain (empty in records of older agents: Path).
	Link    string    `json:"link,omitempty"`
	Created time.Time `json:"created"`
}

func (rec record) link() string {
	if rec.Link != "" {
		return rec.Link
	}
	return rec.Path
}

// RecordedLink returns the link a record file (<stateDir>/localdisk/<pv>.json) names: a fake
// host tells the links a record vouches for the same way the reconciler does.
func RecordedLink(data []byte) (string, error) {
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return "", fmt.Errorf("parse record: %w", err)
	}
	return rec.link(), nil
}

// Reconciler makes the host match the wanted volumes in one idempotent pass. It keeps no state
// between passes: the state directory, the loops' backing files and the links are the truth, so
// a fresh Reconciler after a crash or restart converges the same way.
type Reconciler struct {
	os   OS
	opts ReconcilerOptions
	now  func() time.Time
}

// NewReconciler validates opts and returns a Reconciler; zero roots, DevDir and LoopSearchLimit
// get Options' defaults.
func NewReconciler(os OS, opts ReconcilerOptions, now func() time.Time) (*Reconciler, error) {
	d := Options{PathRoots: opts.PathRoots, LinkRoots: opts.LinkRoots, DevDir: opts.DevDir, LoopSearchLimit: opts.LoopSearchLimit}.withDefaults()
	opts.PathRoots, opts.LinkRoots, opts.DevDir, opts.LoopSearchLimit = d.PathRoots, d.LinkRoots, d.DevDir, d.LoopSearchLimit
	if !filepath.IsAbs(opts.StateDir) || filepath.Clean(opts.StateDir) != opts.StateDir {
		return nil, fmt.Errorf("state dir %q: %w", opts.StateDir, ErrRelativePath)
	}
	if opts.FakeSize <= 0 || opts.FirstLoopMinor < 0 {
		return nil, fmt.Errorf("fake size %d and first loop %d must be positive", opts.FakeSize, opts.FirstLoopMinor)
	}
	if now == nil {
		now = time.Now
	}
	return &Reconciler{os: os, opts: opts, now: now}, nil
}

func (r *Reconciler) dir() string { return filepath.Join(r.opts.StateDir, SubDir) }

// stateReserve is what a state file's temporary name adds around it ("." and ".tmp").
const stateReserve = len(".") + len(".tmp")

// ImagePath is the fake image of a PV. The file name is the PV name when short (every name
// records of earlier agents used), else a bounded hashed form (statename.Component).
func (r *Reconciler) ImagePath(pv string) string { return filepath.Join(r.dir(), stem(pv)+".img") }

func (r *Reconciler) recordPath(pv string) string { return filepath.Join(r.dir(), stem(pv)+".json") }

// stem is the part of a PV's state file names before the suffix, one for all of them (bounded
// for the longest suffix) so a record and its image always share it.
func stem(pv string) string { return statename.Component(pv, "", stateReserve+len(".json")) }

// ValidatePath reports bad input in a PV's local path: it must be absolute and clean, and lie
// under one of roots or be a kernel device name in devDir.
func ValidatePath(roots []string, devDir, p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%q: %w", p, ErrRelativePath)
	}
	if !InAnyDir(roots, p) && !IsKernelName(devDir, p) {
		return fmt.Errorf("%q not under %s: %w", p, strings.Join(roots, ", "), ErrNotUnderDev)
	}
	return nil
}

// IsKernelName reports whether p is a kernel device name: a path in devDir itself
// (/dev/sdb, /dev/nvme0n1, /dev/mapper/x) rather than under devDir/disk, where udev's stable
// links live.
func IsKernelName(devDir, p string) bool {
	return InDir(devDir, p) && p != devDir && !InDir(filepath.Join(devDir, "disk"), p)
}

// InAnyDir reports whether p lies in one of dirs.
func InAnyDir(dirs []string, p string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return InDir(d, p) })
}

type hostView struct {
	loops   map[int]Loop
	byImage map[string]Loop // our loops by backing image
}

func (r *Reconciler) view() (hostView, error) {
	loops, err := r.os.ListLoops()
	if err != nil {
		return hostView{}, fmt.Errorf("list loops: %w", err)
	}
	v := hostView{loops: map[int]Loop{}, byImage: map[string]Loop{}}
	for _, l := range loops {
		v.loops[l.Minor] = l
		// Only our own subdirectory: a stricter reading of "ours" than the whole state dir.
		if l.Bound() && InDir(r.dir(), l.BackingFile) {
			v.byImage[l.BackingFile] = l
		}
	}
	return v, nil
}

// held reports what keeps loop n busy: sysfs holders, or another loop backed by it (kubelet's
// device lock is a loop whose backing file is a node of our loop).
func (r *Reconciler) held(v hostView, n int) []string {
	l := v.loops[n]
	out := append([]string(nil), l.Holders...)
	for _, o := range v.loops {
		if o.Minor == n || !o.Bound() {
			continue
		}
		if (o.BackingIsDev && o.BackingMajor == LoopMajor && int(o.BackingMinor) == n) ||
			o.BackingFile == LoopDevPath(r.opts.DevDir, n) {
			out = append(out, fmt.Sprintf("loop%d", o.Minor))
		}
	}
	return out
}

// ourLink reports the loop minor when st is a link to one of our loops backed by image (a
// PV's ImagePath, so a bound loop inside our state directory).
func (r *Reconciler) ourLink(v hostView, st PathState, image string) (int, bool) {
	if st.Kind != PathSymlink {
		return 0, false
	}
	n, err := ParseLoopLinkTarget(r.opts.DevDir, st.LinkTarget)
	if l, ok := v.loops[n]; err != nil || !ok || l.BackingFile != image {
		return 0, false
	}
	return n, true
}

func (r *Reconciler) readRecords() (map[string]record, []string, []string, error) {
	names, err := r.os.ReadDir(r.dir())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read state dir: %w", err)
	}
	recs := map[string]record{}
	var images, temps []string
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".tmp"):
			// A state file or image torn by a crash mid-write; never attached (only final
			// names are).
			temps = append(temps, filepath.Join(r.dir(), n))
		case strings.HasSuffix(n, ".json") && !strings.HasPrefix(n, "."):
			// The record names its PV; the file name is that name, or its bounded hashed form
			// for a long one. A corrupt record still keys by the file's stem, which maps back to
			// the same files: without a path the link cannot be found, so only the loop and
			// image are cleaned up.
			st := strings.TrimSuffix(n, ".json")
			rec := record{PV: st}
			if b, err := r.os.ReadFile(filepath.Join(r.dir(), n)); err == nil {
				if json.Unmarshal(b, &rec) != nil || rec.PV == "" || filepath.Base(r.recordPath(rec.PV)) != n {
					rec = record{PV: st}
				}
			}
			recs[rec.PV] = rec
		case strings.HasSuffix(n, ".img") && !strings.HasPrefix(n, "."):
			images = append(images, filepath.Join(r.dir(), n))
		}
	}
	return recs, images, temps, nil
}

// Sync runs one pass. create gates the making of new fakes (the node label); retiring and
// reporting always happen.
func (r *Reconciler) Sync(ctx context.Context, vols []Volume, create bool) Result {
	log := logr.FromContextOrDiscard(ctx)
	var res Result
	v, err := r.view()
	if err != nil {
		res.Errors = append(res.Errors, err)
		return res
	}
	recs, images, temps, err := r.readRecords()
	if err != nil {
		res.Errors = append(res.Errors, err)
		return res
	}
	for _, tmp := range temps {
		if err := r.os.RemoveFile(tmp); err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("remove leftover %s: %w", tmp, err))
		}
	}
	sort.Slice(vols, func(i, j int) bool { return vols[i].PV < vols[j].PV })
	watched := map[string]bool{}
	inUse := map[string]bool{} // images that back an active fake
	for _, vol := range vols {
		watched[vol.PV] = true
		st := r.syncVolume(ctx, &v, recs, vol, create)
		if st.State == StateFaked {
			inUse[r.ImagePath(vol.PV)] = true
		}
		if st.State == StatePresent {
			if rec, ok := recs[vol.PV]; ok {
				res.Retired = append(res.Retired, r.retire(ctx, v, rec, true))
			}
		}
		res.Volumes = append(res.Volumes, st)
	}
	var gone []string
	for pv := range recs {
		if !watched[pv] {
			gone = append(gone, pv)
		}
	}
	sort.Strings(gone)
	for _, pv := range gone {
		res.Retired = append(res.Retired, r.retire(ctx, v, recs[pv], false))
	}
	recorded := map[string]bool{} // stems of the records' files
	for pv := range recs {
		recorded[stem(pv)] = true
	}
	explained := func(img string) bool { return recorded[strings.TrimSuffix(filepath.Base(img), ".img")] || inUse[img] }
	// Orphans: an image without a record can only be a leftover of an interrupted retire.
	for _, img := range images {
		if explained(img) {
			continue
		}
		if err := r.dropImage(v, img); err != nil && !errors.Is(err, errHeld) {
			res.Errors = append(res.Errors, err)
		}
	}
	// Our loops whose image file is gone (deleted while attached) and that no record explains.
	for img, l := range v.byImage {
		if explained(img) {
			continue
		}
		if _, err := r.os.FileSize(img); err == nil {
			continue // an orphan image: handled above
		}
		if h := r.held(v, l.Minor); len(h) > 0 {
			log.V(1).Info("orphan loop still held", "loop", l.Minor, "holders", h)
			continue
		}
		if err := r.os.Detach(l.Minor); err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("detach orphan loop%d: %w", l.Minor, err))
		}
	}
	return res
}

var errHeld = errors.New("loop is held")

// dropImage detaches the image's loop when unheld, then removes the image.
func (r *Reconciler) dropImage(v hostView, img string) error {
	if l, ok := v.byImage[img]; ok {
		if len(r.held(v, l.Minor)) > 0 {
			return errHeld
		}
		if err := r.os.Detach(l.Minor); err != nil {
			return fmt.Errorf("detach loop%d: %w", l.Minor, err)
		}
	}
	if err := r.os.RemoveFile(img); err != nil {
		return fmt.Errorf("remove image: %w", err)
	}
	return nil
}

// chainResult is where a PV path's link chain ends.
type chainResult struct {
	// missing is the first component of the chain that does not exist ("" when it ends).
	missing string
	// ours is the link in the chain that points at this PV's fake loop ("" when none).
	ours string
	loop int
	// dir: the chain ends in a directory.
	dir bool
}

// walk follows p through its link chain. A link recorded as this PV's fake that points at a loop
// in our range is ours even when the loop was detached or rebound by someone else: such a stale
// link is removed (it may now lead to another device) and the walk reports the path as missing.
func (r *Reconciler) walk(v hostView, rec *record, image, p string) (chainResult, error) {
	cur := p
	for range maxLinkHops {
		st, err := r.os.Lstat(cur)
		if err != nil {
			return chainResult{}, fmt.Errorf("lstat %s: %w", cur, err)
		}
		switch {
		case st.Kind == PathAbsent:
			return chainResult{missing: cur}, nil
		case st.Kind == PathDir:
			return chainResult{dir: true}, nil
		case st.Kind != PathSymlink:
			return chainResult{}, nil
		}
		if n, ok := r.ourLink(v, st, image); ok {
			return chainResult{ours: cur, loop: n}, nil
		}
		if rec != nil && rec.link() == cur && r.inRange(st.LinkTarget) {
			// Ours by record, but its loop no longer backs our image.
			if err := r.os.RemoveSymlink(cur, st.LinkTarget); err != nil {
				return chainResult{}, fmt.Errorf("remove stale link %s: %w", cur, err)
			}
			return chainResult{missing: cur}, nil
		}
		next := st.LinkTarget
		if !filepath.IsAbs(next) {
			next = filepath.Join(filepath.Dir(cur), next)
		}
		cur = filepath.Clean(next)
	}
	return chainResult{}, fmt.Errorf("%s: %w", p, ErrLinkLoop)
}

// inRange reports whether target is /dev/loopN with N in the agent's loop range.
func (r *Reconciler) inRange(target string) bool {
	n, err := ParseLoopLinkTarget(r.opts.DevDir, target)
	return err == nil && n >= r.opts.FirstLoopMinor && n < r.opts.FirstLoopMinor+r.opts.LoopSearchLimit
}

// fakeable reports why a fake link may not be made at m.
func (r *Reconciler) fakeable(m string) error {
	switch {
	case IsKernelName(r.opts.DevDir, m):
		return fmt.Errorf("%s: %w", m, ErrKernelName)
	case !InAnyDir(r.opts.LinkRoots, m):
		err := fmt.Errorf("%s not under %s: %w", m, strings.Join(r.opts.LinkRoots, ", "), ErrNotUnderLinkRoot)
		if st, lerr := r.os.Lstat(filepath.Dir(m)); lerr == nil && st.Kind == PathAbsent {
			return fmt.Errorf("%w; %s: %w", err, filepath.Dir(m), ErrDirNotVisible)
		}
		return err
	}
	return nil
}

func (r *Reconciler) syncVolume(ctx context.Context, v *hostView, recs map[string]record, vol Volume, create bool) VolumeStatus {
	out := VolumeStatus{Volume: vol, Loop: -1}
	invalid := func(err error) VolumeStatus {
		out.State, out.Err = StateInvalid, err
		return out
	}
	if err := ValidatePath(r.opts.PathRoots, r.opts.DevDir, vol.Path); err != nil {
		return invalid(err)
	}
	image := r.ImagePath(vol.PV)
	var recp *record
	if rec, ok := recs[vol.PV]; ok {
		recp = &rec
		if rec.Path != "" && rec.Path != vol.Path {
			// The PV was recreated with a new path: the old link must not outlive the record.
			if err := r.dropLink(*v, rec, image); err != nil {
				return invalid(err)
			}
		}
	}
	ch, err := r.walk(*v, recp, image, vol.Path)
	if err != nil {
		return invalid(err)
	}
	switch {
	case ch.dir:
		return invalid(fmt.Errorf("%q: %w", vol.Path, ErrPathIsDir))
	case ch.ours != "":
		if rec, ok := recs[vol.PV]; !ok || rec.Path != vol.Path || rec.link() != ch.ours {
			// Our loop and image but no (or an outdated) record: rewrite it so later retires
			// know the link.
			nrec := record{PV: vol.PV, Path: vol.Path, Link: ch.ours, Created: r.now().UTC()}
			if ok {
				nrec.Created = rec.Created
			}
			if err := r.writeRecord(nrec); err == nil {
				recs[vol.PV] = nrec
			}
		}
		out.State, out.Loop, out.Link = StateFaked, ch.loop, ch.ours
	case ch.missing != "":
		out.State, out.Link = StateMissing, ch.missing
		if err := r.fakeable(ch.missing); err != nil {
			out.Err = err
			return out
		}
		if !create || !vol.MayFake {
			return out
		}
		n, err := r.ensureFake(ctx, v, recs, vol, ch.missing)
		if err != nil {
			out.Err = err
			return out
		}
		out.State, out.Loop, out.Created, out.Link = StateFaked, n, true, ch.missing
	default:
		out.State = StatePresent
	}
	return out
}

// dropLink removes rec's link while it is still a link to our loop (attached to our image, or,
// by the record, any loop of our range).
func (r *Reconciler) dropLink(v hostView, rec record, image string) error {
	l := rec.link()
	if l == "" || !filepath.IsAbs(l) || filepath.Clean(l) != l || (!InAnyDir(r.opts.LinkRoots, l) && !InAnyDir(r.opts.PathRoots, l)) {
		return nil
	}
	st, err := r.os.Lstat(l)
	if err != nil {
		return fmt.Errorf("lstat %s: %w", l, err)
	}
	if _, ours := r.ourLink(v, st, image); !ours && (st.Kind != PathSymlink || !r.inRange(st.LinkTarget)) {
		return nil
	}
	if err := r.os.RemoveSymlink(l, st.LinkTarget); err != nil {
		return fmt.Errorf("remove link %s: %w", l, err)
	}
	return nil
}

// reserved lists the loop minors that a recorded link still points at: never given to another
// fake, even when unbound, so a path never leads to a different device.
func (r *Reconciler) reserved(recs map[string]record) map[int]bool {
	out := map[int]bool{}
	for _, rec := range recs {
		l := rec.link()
		if l == "" || !filepath.IsAbs(l) {
			continue
		}
		if st, err := r.os.Lstat(l); err == nil && st.Kind == PathSymlink {
			if n, err := ParseLoopLinkTarget(r.opts.DevDir, st.LinkTarget); err == nil {
				out[n] = true
			}
		}
	}
	return out
}

func (r *Reconciler) writeRecord(rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := r.os.WriteFileAtomic(r.recordPath(rec.PV), b); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// ensureFake does, idempotently and in this order: record, image, loop, link.
func (r *Reconciler) ensureFake(ctx context.Context, v *hostView, recs map[string]record, vol Volume, link string) (int, error) {
	log := logr.FromContextOrDiscard(ctx)
	if err := r.os.MkdirAll(r.dir()); err != nil {
		return -1, fmt.Errorf("state dir %s: %w", r.dir(), err)
	}
	if rec, ok := recs[vol.PV]; !ok || rec.Path != vol.Path || rec.link() != link {
		rec = record{PV: vol.PV, Path: vol.Path, Link: link, Created: r.now().UTC()}
		if err := r.writeRecord(rec); err != nil {
			return -1, err
		}
		recs[vol.PV] = rec
	}
	image := r.ImagePath(vol.PV)
	l, attached := v.byImage[image]
	if !attached {
		size, err := r.os.FileSize(image)
		if err != nil || size != r.opts.FakeSize {
			// Absent, or a torn leftover: (re)write it. It is not attached, so nobody reads it.
			if err := r.os.CreateImage(image, r.opts.FakeSize); err != nil {
				return -1, fmt.Errorf("create image: %w", err)
			}
		}
		n, err := r.attach(v, image, r.reserved(recs))
		if err != nil {
			return -1, err
		}
		l = Loop{Minor: n, BackingFile: image}
		v.loops[n], v.byImage[image] = l, l
		log.Info("attached fake image", "pv", vol.PV, "loop", n)
	}
	target := LoopDevPath(r.opts.DevDir, l.Minor)
	if err := r.os.Symlink(target, link); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return -1, fmt.Errorf("%s: %w", link, ErrPathAppeared)
		}
		return -1, fmt.Errorf("link %s: %w", link, err)
	}
	return l.Minor, nil
}

func (r *Reconciler) attach(v *hostView, image string, reserved map[int]bool) (int, error) {
	first := r.opts.FirstLoopMinor
	for n := first; n < first+r.opts.LoopSearchLimit; n++ {
		if l, ok := v.loops[n]; (ok && l.Bound()) || reserved[n] {
			continue
		}
		err := r.os.Attach(image, n)
		if errors.Is(err, ErrLoopBusy) {
			continue // bound since we listed: never take it
		}
		if err != nil {
			return -1, fmt.Errorf("attach %s to loop%d: %w", image, n, err)
		}
		return n, nil
	}
	return -1, fmt.Errorf("loop%d..loop%d: %w", first, first+r.opts.LoopSearchLimit-1, ErrNoFreeLoop)
}

// retire undoes a fake: the link if it is still ours (PV gone), then the loop once unheld, then
// the image, and the record last so an interrupted retire is resumed.
func (r *Reconciler) retire(ctx context.Context, v hostView, rec record, returned bool) RetireStatus {
	log := logr.FromContextOrDiscard(ctx)
	image := r.ImagePath(rec.PV)
	out := RetireStatus{PV: rec.PV, Path: rec.Path, Loop: -1, DiskReturned: returned, Created: rec.Created}
	l, attached := v.byImage[image]
	if attached {
		out.Loop = l.Minor
	}
	// Checked by content even when the disk returned: a link of ours elsewhere (an older path of
	// the PV) must not outlive the record.
	if err := r.dropLink(v, rec, image); err != nil {
		out.Err = err
		return out
	}
	if attached {
		if h := r.held(v, l.Minor); len(h) > 0 {
			out.Held = true
			log.V(1).Info("fake still held; retrying later", "pv", rec.PV, "loop", l.Minor, "holders", h)
			return out
		}
	}
	if err := r.dropImage(v, image); err != nil {
		out.Err = err
		return out
	}
	if err := r.os.RemoveFile(r.recordPath(rec.PV)); err != nil {
		out.Err = fmt.Errorf("remove record: %w", err)
		return out
	}
	out.Done = true
	return out
}

// Records returns the PVs named by the state directory's records, with their paths ("" when a
// record is unreadable).
func (r *Reconciler) Records() (map[string]string, error) {
	recs, _, _, err := r.readRecords()
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(recs))
	for pv, rec := range recs {
		out[pv] = rec.Path
	}
	return out, nil
}
