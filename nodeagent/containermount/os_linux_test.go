//go:build linux

package containermount

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A foreign namespace's mount table is read with a byte cap: a tenant's namespace holding
// thousands of mounts costs the agent at most MaxForeignMountInfo bytes, and is not read past it.
func TestMountInfoUpToCapsTheRead(t *testing.T) {
	root := t.TempDir()
	line := "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
	write := func(pid, n int) {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "mountinfo"), []byte(strings.Repeat(line, n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(10, 3)
	write(11, MaxForeignMountInfo/len(line)+1) // just above the cap
	p := RealProcFS{Root: root}
	got, err := p.MountInfoUpTo(10, MaxForeignMountInfo)
	if err != nil || got != strings.Repeat(line, 3) {
		t.Fatalf("small table: %q, %v", got, err)
	}
	if _, err := p.MountInfoUpTo(11, MaxForeignMountInfo); !errors.Is(err, ErrMountInfoTooLarge) {
		t.Fatalf("table above the cap: err = %v, want ErrMountInfoTooLarge", err)
	}
	var _ MountInfoCapped = p
}
