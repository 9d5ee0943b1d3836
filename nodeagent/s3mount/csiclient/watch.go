package csiclient

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// Watcher reports when a node plugin's socket (re)appears, so a restarted driver is
// replayed through at once instead of at the next periodic check.
type Watcher interface {
	// Watch calls changed whenever a socket is created in one of dirs, or in a directory created
	// in one of them later, until ctx ends. Missing dirs are skipped.
	Watch(ctx context.Context, dirs []string, changed func()) error
}

// PluginDirs are the directories whose sockets wake the check: kubelet's plugin-registration
// directory (<kubelet>/plugins_registry, where node-driver-registrar puts its socket once the
// driver answers), <kubelet>/plugins, and <kubelet>/plugins/<driver> of each replay driver.
func PluginDirs(kubeletDir string, drivers []string) []string {
	dirs := []string{filepath.Join(kubeletDir, "plugins_registry"), filepath.Join(kubeletDir, "plugins")}
	for _, d := range drivers {
		dirs = append(dirs, filepath.Dir(PluginSocket(kubeletDir, d)))
	}
	return dirs
}

// FSNotifyWatcher is the real Watcher (inotify on Linux).
type FSNotifyWatcher struct{}

func (FSNotifyWatcher) Watch(ctx context.Context, dirs []string, changed func()) error {
	log := logr.FromContextOrDiscard(ctx)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer func() { _ = w.Close() }() // the watch ends here; a close error changes nothing
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			log.V(1).Info("not watching plugin directory", "dir", d, "err", err.Error())
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.V(1).Info("plugin directory watch", "err", err.Error())
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !ev.Has(fsnotify.Create) {
				continue
			}
			if strings.HasSuffix(ev.Name, ".sock") {
				changed()
				continue
			}
			// A driver's directory created after we started (<kubelet>/plugins/<driver>): watch
			// it too when it is one we were asked for, and look at it now.
			for _, d := range dirs {
				if filepath.Clean(ev.Name) == filepath.Clean(d) {
					_ = w.Add(d)
					changed()
				}
			}
		}
	}
}
