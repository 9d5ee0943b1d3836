package sidecar

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestInstall(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	content := bytes.Repeat([]byte("\x7fELF binary"), 10000)
	if err := os.WriteFile(src, content, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "shared", "bin") // created when missing
	for range 2 {                              // a second install (restarted init container) replaces the first
		dst, err := Install(src, dir)
		if err != nil {
			t.Fatal(err)
		}
		if dst != filepath.Join(dir, "pvrescue-sidecar") {
			t.Errorf("installed at %s", dst)
		}
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("installed content differs (%d bytes, %v)", len(got), err)
		}
		fi, err := os.Stat(dst)
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("mode = %v, %v; want 0755", fi.Mode(), err)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Errorf("%d files in %s, want only the binary (no temp files left)", len(ents), dir)
		}
	}
}

func TestInstallMissingSource(t *testing.T) {
	dir := t.TempDir()
	if _, err := Install(filepath.Join(dir, "nope"), dir); err == nil {
		t.Fatal("want an error for a missing source")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %d files behind", len(ents))
	}
}

func TestRunInstall(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "self")
	if err := os.WriteFile(src, []byte("me"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &out, Executable: func() (string, error) { return src, nil }}
	if code := RunInstall(&InstallOptions{To: filepath.Join(tmp, "bin")}, env); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	if got, _ := os.ReadFile(filepath.Join(tmp, "bin", "pvrescue-sidecar")); string(got) != "me" {
		t.Errorf("installed %q", got)
	}
}
