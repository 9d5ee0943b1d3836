package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync"
)

// Placed records, by kubelet path, the device of the mount we last put there (a driver's mount
// replayed, restaged or moved back from a bridge, or a bind of our bridge). A replayed mount
// carries the driver's source and type, not our fsname; to keep stacks bounded across repeated
// deaths (and agent restarts) a dead mount at a path whose device we recorded is provably the
// one we put there, and goes before the next. The record is one JSON file (<state>/s3/handed.json,
// named so by earlier agents), read at start and rewritten on every change.
type Placed struct {
	fs   FS
	file string

	mu  sync.Mutex
	dev map[string]string // by path
	// holds counts the Hold calls not yet released; while any is held, changes are kept in
	// memory (dirty) and written once by the last release.
	holds int
	dirty bool
}

// NewPlaced returns an empty record kept in file.
func NewPlaced(fsys FS, file string) *Placed {
	return &Placed{fs: fsys, file: file, dev: map[string]string{}}
}

// Load reads the record (missing file: empty).
func (p *Placed) Load() error {
	data, err := p.fs.ReadFile(p.file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	m := map[string]string{}
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("decode %s: %w", p.file, err)
	}
	p.mu.Lock()
	p.dev = m
	p.mu.Unlock()
	return nil
}

// Hold defers writing the record until the returned release: a restore pass records each
// target it binds, and rewriting the whole record per target made the binds of a pass O(N²)
// in its targets (0.8 ms a target at 100). What a crash before the release loses is the
// record of mounts a pass just put: bridge binds carry our fsname anyway, and the record is
// rebuilt as targets are restored again. release returns the write's error, if any.
func (p *Placed) Hold() (release func() error) {
	p.mu.Lock()
	p.holds++
	p.mu.Unlock()
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.holds--
			if p.holds == 0 && p.dirty {
				err = p.writeLocked()
			}
		})
		return err
	}
}

// saveLocked writes the record, or marks it to be written when held; p.mu is held.
func (p *Placed) saveLocked() error {
	if p.holds > 0 {
		p.dirty = true
		return nil
	}
	return p.writeLocked()
}

// writeLocked writes the record now; p.mu is held.
func (p *Placed) writeLocked() error {
	p.dirty = false
	data, err := json.Marshal(p.dev)
	if err != nil {
		return err
	}
	return p.fs.WriteFile(p.file, data, 0o600)
}

// Put remembers that the mount with device dev at path is one we put there.
func (p *Placed) Put(path, dev string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dev[path] = dev
	return p.saveLocked()
}

// Is reports whether m at path is a mount we put there.
func (p *Placed) Is(path string, m Mount) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dev[path] != "" && p.dev[path] == m.Dev
}

// Dev returns the device recorded at path ("" when none).
func (p *Placed) Dev(path string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dev[path]
}

// Forget drops the record of path.
func (p *Placed) Forget(path string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.dev[path]; !ok {
		return nil
	}
	delete(p.dev, path)
	return p.saveLocked()
}

// Prune drops the record of every path keep rejects, and writes the record when it changed.
func (p *Placed) Prune(keep func(path string) bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pruned := false
	for path := range p.dev {
		if !keep(path) {
			delete(p.dev, path)
			pruned = true
		}
	}
	if !pruned {
		return nil
	}
	return p.saveLocked()
}
