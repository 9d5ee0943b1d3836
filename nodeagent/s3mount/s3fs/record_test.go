package s3fs

import (
	"slices"
	"strings"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

func TestParseProcStat(t *testing.T) {
	tail := " 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 4 0 987654 1000000 200"
	cases := []struct {
		name, in  string
		start     uint64
		state     string
		wantError bool
	}{
		{"plain", "1234 (s3fs) S" + tail, 987654, "S", false},
		{"spaces and parens in the name", "1234 (my (odd) prog) R" + tail, 987654, "R", false},
		{"zombie", "1234 (s3fs) Z" + tail, 987654, "Z", false},
		{"truncated", "1234 (s3fs) S 1 1 0", 0, "", true},
		{"no name", "1234 s3fs S" + tail, 0, "", true},
		{"bad number", "1234 (s3fs) S" + strings.Replace(tail, "987654", "x", 1), 0, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, state, err := ParseProcStat(c.in)
			if (err != nil) != c.wantError {
				t.Fatalf("err = %v, want error %v", err, c.wantError)
			}
			if st != c.start || state != c.state {
				t.Errorf("got (%d, %q), want (%d, %q)", st, state, c.start, c.state)
			}
		})
	}
}

func TestCgroupDirs(t *testing.T) {
	const v1 = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:33 / /mnt/devices-again rw,relatime - cgroup cgroup rw,devices
51 23 0:29 /kubepods/pod1 /mnt/sub rw,relatime - cgroup cgroup rw,cpu
`
	const v2 = `30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
`
	cases := []struct {
		name, table, root, group string
		want                     []string
	}{
		{"v1 every hierarchy once, no sub-trees", v1, "/proc/1/root", "pvrescue/s3/pv-a-7", []string{
			"/proc/1/root/sys/fs/cgroup/cpu/pvrescue/s3/pv-a-7",
			"/proc/1/root/sys/fs/cgroup/cpuset/pvrescue/s3/pv-a-7",
			"/proc/1/root/sys/fs/cgroup/devices/pvrescue/s3/pv-a-7",
			"/proc/1/root/sys/fs/cgroup/systemd/pvrescue/s3/pv-a-7",
			"/proc/1/root/sys/fs/cgroup/unified/pvrescue/s3/pv-a-7",
		}},
		{"v2", v2, "/", "g", []string{"/sys/fs/cgroup/g"}},
		{"none", "22 1 8:1 / / rw - ext4 /dev/vda rw\n", "/", "g", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			table, err := stack.ParseMountInfo(c.table)
			if err != nil {
				t.Fatal(err)
			}
			if got := CgroupDirs(table, c.root, c.group); !slices.Equal(got, c.want) {
				t.Errorf("got %q\nwant %q", got, c.want)
			}
		})
	}
}

// A cgroup v1 container's view (its own cgroup bound at each hierarchy) and the host's.
func TestParseCgroupMounts(t *testing.T) {
	const ctr = `454 453 0:56 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
478 454 0:29 /kubepods/pod1/c1 /sys/fs/cgroup/cpu rw,nosuid shared:16 - cgroup cgroup rw,cpu
481 454 0:32 /kubepods/pod1/c1 /sys/fs/cgroup/memory rw,nosuid shared:19 - cgroup cgroup rw,memory
486 454 0:37 /kubepods/pod1/c1 /sys/fs/cgroup/systemd rw,nosuid shared:26 - cgroup cgroup rw,name=systemd
487 454 0:38 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
488 454 0:29 /kubepods/pod1/c1 /mnt/cpu-again rw - cgroup cgroup rw,cpu
489 487 0:38 /kubepods/pod1/c1 /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
`
	got := ParseCgroupMounts(ctr)
	want := []CgroupMount{
		{Root: "/kubepods/pod1/c1", MountPoint: "/sys/fs/cgroup/cpu", FSType: "cgroup", Options: []string{"cpu"}},
		{Root: "/kubepods/pod1/c1", MountPoint: "/sys/fs/cgroup/memory", FSType: "cgroup", Options: []string{"memory"}},
		{Root: "/kubepods/pod1/c1", MountPoint: "/sys/fs/cgroup/systemd", FSType: "cgroup", Options: []string{"name=systemd"}},
		// covered by a bind of the container's group: the top one counts
		{Root: "/kubepods/pod1/c1", MountPoint: "/sys/fs/cgroup/unified", FSType: "cgroup2"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i].Root != want[i].Root || got[i].MountPoint != want[i].MountPoint || got[i].FSType != want[i].FSType ||
			!slices.Equal(got[i].Options, want[i].Options) {
			t.Errorf("[%d] got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseBridgeCgroup(t *testing.T) {
	cases := []struct {
		in      string
		pv      string
		pid     int
		ours    bool
		comment string
	}{
		{"pv-a-42", "pv-a", 42, true, "a PV name with dashes"},
		{BridgeCgroup("p", "pvc-0a1b", 7)[len("p/"):], "pvc-0a1b", 7, true, "what BridgeCgroup names"},
		{BridgeCgroup("p", strings.Repeat("long-name.", 30)+"x", 9)[len("p/"):], PVComponent(strings.Repeat("long-name.", 30) + "x"), 9, true, "a long PV's hashed component"},
		{"pv-a-0", "", 0, false, "no pid 0"},
		{"pv-a--3", "", 0, false, "no negative pid"},
		{"-42", "", 0, false, "no PV"},
		{"pv-a", "", 0, false, "no pid"},
		{"keep", "", 0, false, "no dash"},
		{"pv-a-42x", "", 0, false, "not a number"},
	}
	for _, c := range cases {
		pv, pid, ok := parseBridgeCgroup(c.in)
		if pv != c.pv || pid != c.pid || ok != c.ours {
			t.Errorf("%s: parseBridgeCgroup(%q) = %q, %d, %v; want %q, %d, %v", c.comment, c.in, pv, pid, ok, c.pv, c.pid, c.ours)
		}
	}
}
