//go:build linux

package s3fs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// setLimits on directory trees laid out as the kernel shows each kind of hierarchy (plain files
// here: what it reads and writes, not the kernel's answers). The node test limits real v1
// groups; this machine has no v2 cpu controller, so the v2 paths are checked here. Every kind
// gets the kernel's default CPU weight back (earlier agents wrote 9548).
func TestSetLimitsFiles(t *testing.T) {
	type file struct{ path, content string }
	half := Limits{CPUMillis: 500, MemoryBytes: 256 << 20}
	cases := []struct {
		name   string
		files  []file // under the hierarchy's root; "g" is the parent, "g/b" the group limited
		atRoot bool   // g is the hierarchy's root
		limits Limits
		err    string
		want   []file // after the call
	}{
		{
			name:   "v1 cpu hierarchy: quota over the period, the weight back to the default",
			files:  []file{{"g/b/cpu.shares", "9548"}, {"g/b/cpu.cfs_quota_us", "-1"}, {"g/b/cpu.cfs_period_us", "100000"}},
			limits: half,
			want:   []file{{"g/b/cpu.shares", "1024"}, {"g/b/cpu.cfs_quota_us", "50000"}, {"g/b/cpu.cfs_period_us", "100000"}},
		},
		{
			name:  "v1 cpu hierarchy, no limit: quota -1, default weight",
			files: []file{{"g/b/cpu.shares", "9548"}, {"g/b/cpu.cfs_quota_us", "50000"}, {"g/b/cpu.cfs_period_us", "100000"}},
			want:  []file{{"g/b/cpu.shares", "1024"}, {"g/b/cpu.cfs_quota_us", "-1"}},
		},
		{
			name:   "v1 memory hierarchy",
			files:  []file{{"g/b/memory.limit_in_bytes", "9223372036854771712"}},
			limits: half,
			want:   []file{{"g/b/memory.limit_in_bytes", "268435456"}},
		},
		{
			name:   "v1 hierarchy of other controllers: left alone",
			files:  []file{{"g/b/pids.max", "max"}},
			limits: half,
			want:   []file{{"g/b/pids.max", "max"}},
		},
		{
			name: "v2, the parent hands cpu and memory down already",
			files: []file{{"g/cgroup.controllers", "cpuset cpu io memory pids"}, {"g/cgroup.subtree_control", "cpu memory"},
				{"g/b/cgroup.controllers", "cpu memory"}, {"g/b/cpu.max", "max 100000"}, {"g/b/memory.max", "max"}, {"g/b/cpu.weight", "365"}},
			limits: half,
			want:   []file{{"g/b/cpu.max", "50000 100000"}, {"g/b/memory.max", "268435456"}, {"g/b/cpu.weight", "100"}, {"g/cgroup.subtree_control", "cpu memory"}},
		},
		{
			name:   "v2, a level of ours that does not hand them down yet: enabled",
			files:  []file{{"g/cgroup.controllers", "cpu memory"}, {"g/cgroup.subtree_control", ""}, {"g/b/cgroup.controllers", ""}},
			limits: half,
			want:   []file{{"g/cgroup.subtree_control", "+memory"}, {"g/b/cpu.max", "50000 100000"}, {"g/b/memory.max", "268435456"}},
		},
		{
			name:   "hybrid node: the unified hierarchy has no controllers (v1 holds them): left alone",
			files:  []file{{"g/cgroup.controllers", ""}, {"g/cgroup.subtree_control", ""}, {"g/b/cgroup.controllers", ""}},
			atRoot: true,
			limits: half,
			want:   []file{{"g/cgroup.subtree_control", ""}},
		},
		{
			name:   "v2, the node's root does not hand cpu down: not ours to change",
			files:  []file{{"g/cgroup.controllers", "cpu memory"}, {"g/cgroup.subtree_control", "memory"}, {"g/b/cgroup.controllers", "memory"}},
			atRoot: true,
			limits: half,
			err:    "does not enable cpu",
			want:   []file{{"g/cgroup.subtree_control", "memory"}},
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
			hroot := root
			if tc.atRoot {
				hroot = filepath.Join(root, "g")
			}
			err := setLimits(hroot, filepath.Join(root, "g"), filepath.Join(root, "g", "b"), tc.limits)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("setLimits = %v; want an error containing %q", err, tc.err)
			}
			for _, f := range tc.want {
				got, err := os.ReadFile(filepath.Join(root, f.path))
				if err != nil || string(got) != f.content {
					t.Errorf("%s = %q (%v), want %q", f.path, got, err, f.content)
				}
			}
		})
	}
}
