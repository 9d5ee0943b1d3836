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

// writeLocked writes the record; p.mu is held.
func (p *Placed) writeLocked() error {
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
	return p.writeLocked()
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
	return p.writeLocked()
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
	return p.writeLocked()
}
