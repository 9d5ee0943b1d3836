// Package localdisktest holds test support for nodeagent/localdisk: an in-memory host (FakeOS).
// It is imported by tests only, never by shipped code.
package localdisktest

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
)

// FakeOS is an in-memory localdisk.OS for tests. It enforces the same refusals as the real host and
// also records every call that would break a safety invariant in Violations, so a test can assert
// the reconciler never even tried.
type FakeOS struct {
	mu       sync.Mutex
	StateDir string
	DevDir   string
	// Files are regular files (state files and images) by path.
	Files map[string][]byte
	// Links are symlinks by path → content.
	Links map[string]string
	// Devices are block device nodes (a real disk) by path.
	Devices map[string]bool
	// Dirs are directories (for "path resolves to a directory" cases).
	Dirs map[string]bool
	// Loops by minor; an unbound loop has an empty BackingFile.
	Loops map[int]*localdisk.Loop
	// MaxMinor: Attach beyond it fails like a kernel without that many minors.
	MaxMinor int
	// Fail, when set, is asked before each operation; a non-nil error is returned instead of
	// doing it (crash injection).
	Fail func(op, arg string) error
	// Calls logs operations that changed something, e.g. "attach /s/a.img 101".
	Calls []string
	// Violations lists attempts that would break an invariant.
	Violations []string
	// ReadOnly makes every state-dir write fail (state directory not writable).
	ReadOnly bool
}

// NewFakeOS returns an empty fake host.
func NewFakeOS(stateDir, devDir string) *FakeOS {
	return &FakeOS{
		StateDir: stateDir, DevDir: devDir,
		Files: map[string][]byte{}, Links: map[string]string{}, Devices: map[string]bool{},
		Dirs: map[string]bool{}, Loops: map[int]*localdisk.Loop{}, MaxMinor: 1 << 20,
	}
}

var _ localdisk.OS = (*FakeOS)(nil)

func (f *FakeOS) fail(op, arg string) error {
	if f.Fail != nil {
		return f.Fail(op, arg)
	}
	return nil
}

func (f *FakeOS) violate(format string, args ...any) {
	f.Violations = append(f.Violations, fmt.Sprintf(format, args...))
}

func (f *FakeOS) checkState(path string) error {
	if !localdisk.InDir(f.StateDir, path) {
		f.violate("file op outside state dir: %s", path)
		return fmt.Errorf("%s: %w", path, localdisk.ErrOutsideStateDir)
	}
	if f.ReadOnly {
		return fmt.Errorf("%s: %w", path, fs.ErrPermission)
	}
	return nil
}

// Lstat implements localdisk.OS.
func (f *FakeOS) Lstat(path string) (localdisk.PathState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("lstat", path); err != nil {
		return localdisk.PathState{}, err
	}
	if t, ok := f.Links[path]; ok {
		return localdisk.PathState{Kind: localdisk.PathSymlink, LinkTarget: t}, nil
	}
	if n, err := localdisk.ParseLoopLinkTarget(f.DevDir, path); err == nil {
		if _, ok := f.Loops[n]; ok {
			return localdisk.PathState{Kind: localdisk.PathBlockDevice}, nil // devtmpfs has a node for every loop
		}
	}
	switch {
	case f.Devices[path]:
		return localdisk.PathState{Kind: localdisk.PathBlockDevice}, nil
	case f.Dirs[path]:
		return localdisk.PathState{Kind: localdisk.PathDir}, nil
	}
	if _, ok := f.Files[path]; ok {
		return localdisk.PathState{Kind: localdisk.PathOther}, nil
	}
	return localdisk.PathState{Kind: localdisk.PathAbsent}, nil
}

// ListLoops implements localdisk.OS.
func (f *FakeOS) ListLoops() ([]localdisk.Loop, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("listloops", ""); err != nil {
		return nil, err
	}
	var out []localdisk.Loop
	for _, l := range f.Loops {
		c := *l
		c.Holders = append([]string(nil), l.Holders...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Minor < out[j].Minor })
	return out, nil
}

// Attach implements localdisk.OS.
func (f *FakeOS) Attach(image string, minor int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("attach", image); err != nil {
		return err
	}
	if minor > f.MaxMinor {
		return fmt.Errorf("loop%d: no such device", minor)
	}
	if l, ok := f.Loops[minor]; ok && l.Bound() {
		return fmt.Errorf("loop%d: %w", minor, localdisk.ErrLoopBusy)
	}
	if _, ok := f.Files[image]; !ok {
		return fmt.Errorf("attach %s: %w", image, fs.ErrNotExist)
	}
	f.Loops[minor] = &localdisk.Loop{Minor: minor, BackingFile: image, ReadOnly: true}
	f.Calls = append(f.Calls, fmt.Sprintf("attach %s %d", image, minor))
	return nil
}

// Detach implements localdisk.OS.
func (f *FakeOS) Detach(minor int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("detach", fmt.Sprint(minor)); err != nil {
		return err
	}
	l, ok := f.Loops[minor]
	if !ok || !l.Bound() {
		return nil
	}
	if !localdisk.InDir(f.StateDir, l.BackingFile) {
		f.violate("detach of foreign loop%d (%s)", minor, l.BackingFile)
		return fmt.Errorf("loop%d: %w", minor, localdisk.ErrNotOurs)
	}
	if len(l.Holders) > 0 {
		f.violate("detach of held loop%d (%v)", minor, l.Holders)
	}
	for _, o := range f.Loops {
		if o.BackingIsDev && o.BackingMajor == localdisk.LoopMajor && int(o.BackingMinor) == minor {
			f.violate("detach of loop%d while loop%d is backed by it", minor, o.Minor)
		}
	}
	l.BackingFile, l.Deleted = "", false
	f.Calls = append(f.Calls, fmt.Sprintf("detach %d", minor))
	return nil
}

// MkdirAll implements localdisk.OS.
func (f *FakeOS) MkdirAll(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("mkdir", dir); err != nil {
		return err
	}
	if dir != f.StateDir {
		if err := f.checkState(dir); err != nil {
			return err
		}
	}
	if f.ReadOnly {
		return fmt.Errorf("%s: %w", dir, fs.ErrPermission)
	}
	return nil
}

// ReadDir implements localdisk.OS.
func (f *FakeOS) ReadDir(dir string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("readdir", dir); err != nil {
		return nil, err
	}
	var out []string
	for p := range f.Files {
		if filepath.Dir(p) == dir {
			out = append(out, filepath.Base(p))
		}
	}
	sort.Strings(out)
	return out, nil
}

// ReadFile implements localdisk.OS.
func (f *FakeOS) ReadFile(path string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.Files[path]
	if !ok {
		return nil, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
	}
	return append([]byte(nil), b...), nil
}

// WriteFileAtomic implements localdisk.OS.
func (f *FakeOS) WriteFileAtomic(path string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("writefile", path); err != nil {
		return err
	}
	if err := f.checkState(path); err != nil {
		return err
	}
	f.Files[path] = append([]byte(nil), data...)
	f.Calls = append(f.Calls, "write "+path)
	return nil
}

// FileSize implements localdisk.OS.
func (f *FakeOS) FileSize(path string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.Files[path]
	if !ok {
		return 0, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
	}
	return int64(len(b)), nil
}

// CreateImage implements localdisk.OS.
func (f *FakeOS) CreateImage(path string, size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("image", path); err != nil {
		return err
	}
	if err := f.checkState(path); err != nil {
		return err
	}
	f.Files[path] = make([]byte, size)
	f.Calls = append(f.Calls, "image "+path)
	return nil
}

// RemoveFile implements localdisk.OS.
func (f *FakeOS) RemoveFile(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("rm", path); err != nil {
		return err
	}
	if err := f.checkState(path); err != nil {
		return err
	}
	delete(f.Files, path)
	f.Calls = append(f.Calls, "rm "+path)
	return nil
}

// Symlink implements localdisk.OS.
func (f *FakeOS) Symlink(target, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("symlink", path); err != nil {
		return err
	}
	_, isLink := f.Links[path]
	_, isFile := f.Files[path]
	if isLink || isFile || f.Devices[path] || f.Dirs[path] {
		return fmt.Errorf("symlink %s: %w", path, fs.ErrExist)
	}
	if !strings.HasPrefix(target, f.DevDir+"/loop") {
		f.violate("symlink %s to non-loop %s", path, target)
	}
	f.Links[path] = target
	f.Calls = append(f.Calls, fmt.Sprintf("link %s -> %s", path, target))
	return nil
}

// RemoveSymlink implements localdisk.OS.
func (f *FakeOS) RemoveSymlink(path, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail("unlink", path); err != nil {
		return err
	}
	cur, ok := f.Links[path]
	if !ok {
		if f.Devices[path] || f.Dirs[path] || f.Files[path] != nil {
			f.violate("unlink of non-link %s", path)
			return fmt.Errorf("%s: %w", path, localdisk.ErrNotOurs)
		}
		return nil
	}
	if cur != target {
		f.violate("unlink of foreign link %s -> %s", path, cur)
		return fmt.Errorf("%s: %w", path, localdisk.ErrNotOurs)
	}
	n, err := localdisk.ParseLoopLinkTarget(f.DevDir, cur)
	if l, ok := f.Loops[n]; err != nil || ((!ok || !localdisk.InDir(f.StateDir, l.BackingFile)) && !f.recordedLink(path)) {
		// Ours: a link to a loop backed from the state dir, or a loop link a record names (a
		// stale fake whose loop someone detached or rebound).
		f.violate("unlink of link %s to a loop that is not ours (%s)", path, cur)
	}
	delete(f.Links, path)
	f.Calls = append(f.Calls, "unlink "+path)
	return nil
}

// Locked runs fn with the fake's lock held, for tests that inspect or change it while a
// controller runs.
func (f *FakeOS) Locked(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// recordedLink reports whether a record in the state directory names path as its link.
func (f *FakeOS) recordedLink(path string) bool {
	dir := filepath.Join(f.StateDir, localdisk.SubDir)
	for name, b := range f.Files {
		if filepath.Dir(name) != dir || !strings.HasSuffix(name, ".json") {
			continue
		}
		if link, err := localdisk.RecordedLink(b); err == nil && link == path {
			return true
		}
	}
	return false
}
