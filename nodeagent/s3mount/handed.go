package s3mount

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// The replay binds the driver's new mount over a dead target; that bind carries the driver's
// source and type, not our fsname. To keep stacks bounded across repeated deaths (and agent
// restarts), the device of every mount handed back is recorded per target in
// <state>/s3/handed.json; a dead mount at a target whose device we recorded is provably the bind
// we made, and goes before the next.

func (l Layout) handedFile() string { return filepath.Join(l.Root(), "handed.json") }

// loadHanded reads the record (missing file: empty).
func (r *Restorer) loadHanded() error {
	data, err := r.os.FS.ReadFile(r.layout.handedFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	m := map[string]string{}
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("decode %s: %w", r.layout.handedFile(), err)
	}
	r.mu.Lock()
	r.handed = m
	r.mu.Unlock()
	return nil
}

// saveHandedLocked writes the record; r.mu is held.
func (r *Restorer) saveHandedLocked() error {
	data, err := json.Marshal(r.handed)
	if err != nil {
		return err
	}
	return r.os.FS.WriteFile(r.layout.handedFile(), data, 0o600)
}

// recordHanded remembers that the mount with device dev at target is one we handed back.
func (r *Restorer) recordHanded(target, dev string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handed[target] = dev
	return r.saveHandedLocked()
}

// isHanded reports whether m at target is a mount we handed back.
func (r *Restorer) isHanded(target string, m MountInfo) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handed[target] != "" && r.handed[target] == m.Dev
}

// handedDev returns the device recorded at target ("" when none).
func (r *Restorer) handedDev(target string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handed[target]
}

// forgetHanded drops the record of target.
func (r *Restorer) forgetHanded(target string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.handed[target]; !ok {
		return nil
	}
	delete(r.handed, target)
	return r.saveHandedLocked()
}
