//go:build linux

package s3fs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// setCPUWeight on directory trees laid out as the kernel shows each kind of hierarchy (plain
// files here: what it reads and writes, not the kernel's answers). The node test weighs real
// v1 groups; this machine has no v2 cpu controller, so the v2 paths are checked here.
func TestSetCPUWeightFiles(t *testing.T) {
	type file struct{ path, content string }
	cases := []struct {
		name   string
		files  []file // under the hierarchy's root; "g" is the parent, "g/b" the group weighed
		atRoot bool   // g is the hierarchy's root
		ok     bool
		err    string
		want   []file // after the call
	}{
		{
			name:  "v1 cpu hierarchy: cpu.shares",
			files: []file{{"g/b/cpu.shares", "1024"}},
			ok:    true,
			want:  []file{{"g/b/cpu.shares", "9548"}},
		},
		{
			name:  "v1 hierarchy without cpu: left alone",
			files: []file{{"g/b/memory.limit_in_bytes", "max"}},
		},
		{
			name:  "v2, the parent hands cpu down already: cpu.weight converted",
			files: []file{{"g/cgroup.controllers", "cpuset cpu io memory pids"}, {"g/cgroup.subtree_control", "cpu"}, {"g/b/cpu.weight", "100"}},
			ok:    true,
			want:  []file{{"g/b/cpu.weight", "365"}, {"g/cgroup.subtree_control", "cpu"}},
		},
		{
			name:  "v2, a level of ours that does not hand cpu down yet: enabled, then weighed",
			files: []file{{"g/cgroup.controllers", "cpu memory"}, {"g/cgroup.subtree_control", ""}, {"g/b/cgroup.controllers", ""}},
			ok:    true,
			want:  []file{{"g/cgroup.subtree_control", "+cpu"}, {"g/b/cpu.weight", "365"}},
		},
		{
			name:   "v2, the node's root does not hand cpu down: not ours to change",
			files:  []file{{"g/cgroup.controllers", "cpu memory"}, {"g/cgroup.subtree_control", "memory"}, {"g/b/cgroup.controllers", "memory"}},
			atRoot: true,
			err:    "does not enable cpu",
			want:   []file{{"g/cgroup.subtree_control", "memory"}},
		},
		{
			name:  "v2 without the cpu controller: left alone",
			files: []file{{"g/cgroup.controllers", "memory pids"}, {"g/b/cgroup.controllers", "memory"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f.path)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(f.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ok, err := setCPUWeight(filepath.Join(root, "g"), filepath.Join(root, "g", "b"), tc.atRoot, 9548)
			if ok != tc.ok || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("setCPUWeight = %v, %v; want %v, error containing %q", ok, err, tc.ok, tc.err)
			}
			for _, f := range tc.want {
				got, err := os.ReadFile(filepath.Join(root, f.path))
				if err != nil || string(got) != f.content {
					t.Errorf("%s = %q (%v), want %q", f.path, got, err, f.content)
				}
			}
			if !tc.ok { // nothing weighed: no weight file made
				for _, name := range []string{"cpu.weight", "cpu.shares"} {
					if _, err := os.Stat(filepath.Join(root, "g", "b", name)); err == nil {
						t.Errorf("g/b/%s written where the hierarchy has no cpu controller to weigh by", name)
					}
				}
			}
		})
	}
}
