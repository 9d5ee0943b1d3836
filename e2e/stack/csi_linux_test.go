//go:build linux

package stack

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestProcsInCgroup(t *testing.T) {
	proc := t.TempDir()
	add := func(pid, comm, cgroup, stat string) {
		t.Helper()
		d := filepath.Join(proc, pid)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range map[string]string{"comm": comm + "\n", "cgroup": cgroup, "stat": stat} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	const ours = "4:memory:/kubepods/besteffort/pod1234/abcdef0123\n"
	add("10", "csi-s3-test", ours, "10 (csi-s3-test) S 1 10")
	add("11", "s3fs", ours, "11 (s3fs) S 10 11")
	add("12", "s3fs", ours, "12 (s3fs) Z 10 12")
	add("13", "s3fs", "4:memory:/kubepods/besteffort/pod1234/ffff\n", "13 (s3fs) S 1 13")
	add("14", "s3fs", ours, "14 (s3 fs) x) S 10 14")
	if got, want := ProcsInCgroup(proc, "abcdef0123", "s3fs"), []int{11, 14}; !reflect.DeepEqual(got, want) {
		t.Errorf("s3fs in the container: %v, want %v (zombie 12 and the other container's 13 left out; 14's state read after the last ')')", got, want)
	}
	if got, want := ProcsInCgroup(proc, "abcdef0123", ""), []int{10, 11, 14}; !reflect.DeepEqual(got, want) {
		t.Errorf("all in the container: %v, want %v", got, want)
	}
}
