package localdisk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
)

// Sentinel errors for bad input: reported, never acted upon.
var (
	ErrRelativePath = errors.New("path is not absolute and clean")
	ErrNotUnderDev  = errors.New("path is outside the allowed device directory")
	ErrPathIsDir    = errors.New("path resolves to a directory")
	ErrPathAppeared = errors.New("path appeared while the fake was being linked")
)

// SubDir is the directory under the agent's state directory holding fake images and records.
const SubDir = "localdisk"

// ReconcilerOptions are the knobs of one Reconciler.
type ReconcilerOptions struct {
	// StateDir is the agent's state directory; a loop is ours only if its backing file is inside it.
	StateDir string
	// DevDir holds the loop device nodes (/dev).
	DevDir string
	// PathPrefix: PV paths must lie under it (default /dev).
	PathPrefix string
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
	PV      string    `json:"pv"`
	Path    string    `json:"path"`
	Created time.Time `json:"created"`
}

// Reconciler makes the host match the wanted volumes in one idempotent pass. It keeps no state
// between passes: the state directory, the loops' backing files and the links are the truth, so
// a fresh Reconciler after a crash or restart converges the same way.
type Reconciler struct {
	host Host
	opts ReconcilerOptions
	now  func() time.Time
}

// NewReconciler validates opts and returns a Reconciler.
func NewReconciler(host Host, opts ReconcilerOptions, now func() time.Time) (*Reconciler, error) {
	if opts.PathPrefix == "" {
		opts.PathPrefix = "/dev"
	}
	if opts.DevDir == "" {
		opts.DevDir = "/dev"
	}
	if opts.LoopSearchLimit <= 0 {
		opts.LoopSearchLimit = 256
	}
	if !filepath.IsAbs(opts.StateDir) || filepath.Clean(opts.StateDir) != opts.StateDir {
		return nil, fmt.Errorf("state dir %q: %w", opts.StateDir, ErrRelativePath)
	}
	if opts.FakeSize <= 0 || opts.FirstLoopMinor < 0 {
		return nil, fmt.Errorf("fake size %d and first loop %d must be positive", opts.FakeSize, opts.FirstLoopMinor)
	}
	if now == nil {
		now = time.Now
	}
	return &Reconciler{host: host, opts: opts, now: now}, nil
}

func (r *Reconciler) dir() string { return filepath.Join(r.opts.StateDir, SubDir) }

// ImagePath is the fake image of a PV.
func (r *Reconciler) ImagePath(pv string) string { return filepath.Join(r.dir(), pv+".img") }

func (r *Reconciler) recordPath(pv string) string { return filepath.Join(r.dir(), pv+".json") }

// ValidatePath reports bad input in a PV's local path.
func ValidatePath(prefix, p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%q: %w", p, ErrRelativePath)
	}
	if !InDir(prefix, p) {
		return fmt.Errorf("%q not under %s: %w", p, prefix, ErrNotUnderDev)
	}
	return nil
}

type hostView struct {
	loops   map[int]Loop
	byImage map[string]Loop // our loops by backing image
}

func (r *Reconciler) view() (hostView, error) {
	loops, err := r.host.ListLoops()
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

// ourLink reports the loop minor when st is a link to one of our loops backed by image
// (image == "" accepts any of our images).
func (r *Reconciler) ourLink(v hostView, st PathState, image string) (int, bool) {
	if st.Kind != PathSymlink {
		return 0, false
	}
	n, err := ParseLoopLinkTarget(r.opts.DevDir, st.LinkTarget)
	if err != nil {
		return 0, false
	}
	l, ok := v.loops[n]
	if !ok || !l.Bound() || !InDir(r.dir(), l.BackingFile) {
		return 0, false
	}
	if image != "" && l.BackingFile != image {
		return 0, false
	}
	return n, true
}

func (r *Reconciler) readRecords() (map[string]record, []string, []string, error) {
	names, err := r.host.ReadDir(r.dir())
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
			pv := strings.TrimSuffix(n, ".json")
			rec := record{PV: pv}
			if b, err := r.host.ReadFile(filepath.Join(r.dir(), n)); err == nil {
				// A corrupt record still names the PV (file name); without a path the link
				// cannot be found, so only the loop and image are cleaned up.
				if json.Unmarshal(b, &rec) != nil || rec.PV != pv {
					rec = record{PV: pv}
				}
			}
			recs[pv] = rec
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
		if err := r.host.RemoveFile(tmp); err != nil {
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
	// Orphans: an image without a record can only be a leftover of an interrupted retire.
	for _, img := range images {
		pv := strings.TrimSuffix(filepath.Base(img), ".img")
		if _, ok := recs[pv]; ok || inUse[img] {
			continue
		}
		if err := r.dropImage(v, img); err != nil && !errors.Is(err, errHeld) {
			res.Errors = append(res.Errors, err)
		}
	}
	// Our loops whose image file is gone (deleted while attached) and that no record explains.
	for img, l := range v.byImage {
		pv := strings.TrimSuffix(filepath.Base(img), ".img")
		if _, ok := recs[pv]; ok || inUse[img] {
			continue
		}
		if _, err := r.host.FileSize(img); err == nil {
			continue // an orphan image: handled above
		}
		if h := r.held(v, l.Minor); len(h) > 0 {
			log.V(1).Info("orphan loop still held", "loop", l.Minor, "holders", h)
			continue
		}
		if err := r.host.Detach(l.Minor); err != nil {
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
		if err := r.host.Detach(l.Minor); err != nil {
			return fmt.Errorf("detach loop%d: %w", l.Minor, err)
		}
	}
	if err := r.host.RemoveFile(img); err != nil {
		return fmt.Errorf("remove image: %w", err)
	}
	return nil
}

func (r *Reconciler) syncVolume(ctx context.Context, v *hostView, recs map[string]record, vol Volume, create bool) VolumeStatus {
	out := VolumeStatus{Volume: vol, Loop: -1}
	if err := ValidatePath(r.opts.PathPrefix, vol.Path); err != nil {
		out.State, out.Err = StateInvalid, err
		return out
	}
	st, err := r.host.Lstat(vol.Path)
	if err != nil {
		out.State, out.Err = StateInvalid, fmt.Errorf("lstat %s: %w", vol.Path, err)
		return out
	}
	image := r.ImagePath(vol.PV)
	switch {
	case st.Kind == PathAbsent:
		if !create {
			out.State = StateMissing
			return out
		}
		n, err := r.ensureFake(ctx, v, recs, vol)
		if err != nil {
			out.State, out.Err = StateMissing, err
			return out
		}
		out.State, out.Loop, out.Created = StateFaked, n, true
	case st.Kind == PathDir || st.ResolvesToDir:
		out.State, out.Err = StateInvalid, fmt.Errorf("%q: %w", vol.Path, ErrPathIsDir)
	default:
		if n, ok := r.ourLink(*v, st, image); ok {
			if _, ok := recs[vol.PV]; !ok {
				// Our loop and image but no record: re-create it so later retires know the path.
				rec := record{PV: vol.PV, Path: vol.Path, Created: r.now().UTC()}
				if err := r.writeRecord(rec); err == nil {
					recs[vol.PV] = rec
				}
			}
			out.State, out.Loop = StateFaked, n
			return out
		}
		out.State = StatePresent
	}
	return out
}

func (r *Reconciler) writeRecord(rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := r.host.WriteFileAtomic(r.recordPath(rec.PV), b); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// ensureFake does, idempotently and in this order: record, image, loop, link.
func (r *Reconciler) ensureFake(ctx context.Context, v *hostView, recs map[string]record, vol Volume) (int, error) {
	log := logr.FromContextOrDiscard(ctx)
	if err := r.host.MkdirAll(r.dir()); err != nil {
		return -1, fmt.Errorf("state dir %s: %w", r.dir(), err)
	}
	if rec, ok := recs[vol.PV]; !ok || rec.Path != vol.Path {
		rec = record{PV: vol.PV, Path: vol.Path, Created: r.now().UTC()}
		if err := r.writeRecord(rec); err != nil {
			return -1, err
		}
		recs[vol.PV] = rec
	}
	image := r.ImagePath(vol.PV)
	l, attached := v.byImage[image]
	if !attached {
		size, err := r.host.FileSize(image)
		if err != nil || size != r.opts.FakeSize {
			// Absent, or a torn leftover: (re)write it. It is not attached, so nobody reads it.
			if err := r.host.CreateImage(image, r.opts.FakeSize); err != nil {
				return -1, fmt.Errorf("create image: %w", err)
			}
		}
		n, err := r.attach(v, image)
		if err != nil {
			return -1, err
		}
		l = Loop{Minor: n, BackingFile: image}
		v.loops[n], v.byImage[image] = l, l
		log.Info("attached fake image", "pv", vol.PV, "loop", n)
	}
	target := LoopDevPath(r.opts.DevDir, l.Minor)
	if err := r.host.Symlink(target, vol.Path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return -1, fmt.Errorf("%s: %w", vol.Path, ErrPathAppeared)
		}
		return -1, fmt.Errorf("link %s: %w", vol.Path, err)
	}
	return l.Minor, nil
}

func (r *Reconciler) attach(v *hostView, image string) (int, error) {
	first := r.opts.FirstLoopMinor
	for n := first; n < first+r.opts.LoopSearchLimit; n++ {
		if l, ok := v.loops[n]; ok && l.Bound() {
			continue
		}
		err := r.host.Attach(image, n)
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
	if rec.Path != "" && !returned && ValidatePath(r.opts.PathPrefix, rec.Path) == nil {
		st, err := r.host.Lstat(rec.Path)
		if err != nil {
			out.Err = fmt.Errorf("lstat %s: %w", rec.Path, err)
			return out
		}
		if _, ours := r.ourLink(v, st, image); ours {
			if err := r.host.RemoveSymlink(rec.Path, st.LinkTarget); err != nil {
				out.Err = fmt.Errorf("remove link %s: %w", rec.Path, err)
				return out
			}
		}
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
	if err := r.host.RemoveFile(r.recordPath(rec.PV)); err != nil {
		out.Err = fmt.Errorf("remove record: %w", err)
		return out
	}
	out.Done = true
	return out
}
