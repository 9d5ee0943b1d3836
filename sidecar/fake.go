package sidecar

import (
	"fmt"
	"strings"
	"sync"
)

// FakeDevice is one entry of FakeDevices: a size, or an error such as ErrNoDeviceNode.
type FakeDevice struct {
	Size int64
	Err  error
}

// FakeDevices is a DeviceSizer over a map; paths not in the map give ErrNoDeviceNode.
type FakeDevices map[string]FakeDevice

// DeviceSize implements DeviceSizer.
func (f FakeDevices) DeviceSize(path string) (int64, error) {
	d, ok := f[path]
	if !ok {
		return 0, ErrNoDeviceNode
	}
	return d.Size, d.Err
}

// FakeFiles records removals; Errs makes a removal fail.
type FakeFiles struct {
	Errs    map[string]error
	Removed []string
}

// Remove implements Remover.
func (f *FakeFiles) Remove(path string) error {
	if err := f.Errs[path]; err != nil {
		return err
	}
	f.Removed = append(f.Removed, path)
	return nil
}

// FakeProcess records the exec instead of replacing the process. Paths maps command names to
// resolved paths (names with a slash resolve to themselves); ExecErr makes Exec fail.
type FakeProcess struct {
	Paths   map[string]string
	ExecErr error

	Executed bool
	Path     string
	Argv     []string
	Env      []string
}

// LookPath implements Execer.
func (f *FakeProcess) LookPath(file string) (string, error) {
	if p, ok := f.Paths[file]; ok {
		return p, nil
	}
	if strings.Contains(file, "/") {
		return file, nil
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
}

// Exec implements Execer; it returns nil where the real one would never return.
func (f *FakeProcess) Exec(path string, argv, env []string) error {
	if f.ExecErr != nil {
		return f.ExecErr
	}
	f.Executed, f.Path, f.Argv, f.Env = true, path, argv, env
	return nil
}

// FakeMounts answers Statfs from a map (missing paths are healthy). Paths in Hang block until
// Release is called, like a FUSE mount whose daemon is stopped.
type FakeMounts struct {
	Errs map[string]error
	Hang map[string]bool

	once    sync.Once
	release chan struct{}
}

// Statfs implements Statfser.
func (f *FakeMounts) Statfs(path string) error {
	f.init()
	if f.Hang[path] {
		<-f.release
	}
	return f.Errs[path]
}

// Release unblocks every hung Statfs.
func (f *FakeMounts) Release() {
	f.init()
	close(f.release)
}

func (f *FakeMounts) init() { f.once.Do(func() { f.release = make(chan struct{}) }) }
