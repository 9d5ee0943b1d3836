package csiclient

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestPluginDirs(t *testing.T) {
	got := PluginDirs("/var/lib/kubelet", []string{"ru.yandex.s3.csi", "csi-s3"})
	want := []string{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins",
		"/var/lib/kubelet/plugins/ru.yandex.s3.csi", "/var/lib/kubelet/plugins/csi-s3"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A socket created in a watched directory wakes the check, also in a driver's directory that
// appears only after the watch started; other files do not.
func TestFSNotifyWatcherWakesOnSockets(t *testing.T) {
	kubelet := t.TempDir()
	dirs := PluginDirs(kubelet, []string{"drv"})
	for _, d := range dirs[:2] {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	woke := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- FSNotifyWatcher{}.Watch(ctx, dirs, func() { woke <- struct{}{} }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case <-woke:
			if !want {
				t.Errorf("%s: woke, want not", what)
			}
		case <-time.After(300 * time.Millisecond):
			if want {
				t.Errorf("%s: did not wake within 300ms", what)
			}
		}
	}
	// Give the watcher time to add its watches (nothing is signalled before it did).
	time.Sleep(100 * time.Millisecond)
	write := func(p string) {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dirs[0], "drv-reg.sock"))
	expect("registration socket", true)
	write(filepath.Join(dirs[0], "notes.txt"))
	expect("plain file", false)
	if err := os.Mkdir(dirs[2], 0o755); err != nil {
		t.Fatal(err)
	}
	expect("driver directory created", true)
	time.Sleep(50 * time.Millisecond)
	write(filepath.Join(dirs[2], "csi.sock"))
	expect("driver socket in the new directory", true)
}
