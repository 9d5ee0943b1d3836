//go:build node

package sidecar

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

const mib = 1 << 20

func TestHelperIsStatic(t *testing.T) {
	bin := buildHelper(t)
	out := run(t, "go", "version", "-m", bin)
	if !strings.Contains(out, "build\tCGO_ENABLED=0") {
		t.Errorf("go version -m does not show CGO_ENABLED=0:\n%s", out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read only
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: it is dynamically linked", bin)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", bin, libs)
	}
	fi, _ := os.Stat(bin)
	t.Logf("pvrescue-sidecar: static, %.1f MiB", float64(fi.Size())/mib)
}

// podDevices builds a temporary stand-in for a pod's /dev: block nodes for real loop devices
// (64 MiB and 512 bytes), a missing node, a regular file and a character device.
func podDevices(t *testing.T) (devDir string, specs []DeviceSpec, want []Device) {
	tmp := t.TempDir()
	devDir = filepath.Join(tmp, "dev")
	if err := os.Mkdir(devDir, 0o755); err != nil {
		t.Fatal(err)
	}
	realLoop := attachLoop(t, tmp, 64*mib)
	fakeLoop := attachLoop(t, tmp, 512)
	mknodLike(t, filepath.Join(devDir, "data1"), realLoop)
	mknodLike(t, filepath.Join(devDir, "data2"), fakeLoop)
	if err := os.WriteFile(filepath.Join(devDir, "data4"), []byte("not a disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	mknodChar(t, filepath.Join(devDir, "data5"))
	p := func(n string) string { return filepath.Join(devDir, n) }
	specs = []DeviceSpec{{p("data1"), "claimA"}, {p("data2"), "claimB"}, {p("data3"), "claimC"}, {p("data4"), "claimD"}, {p("data5"), "claimE"}, {realLoop, "claimF"}}
	want = []Device{
		{Path: p("data1"), Claim: "claimA", Size: 64 * mib},
		{Path: p("data2"), Claim: "claimB", Size: 512, Fake: true},
		{Path: p("data3"), Claim: "claimC", Error: "no such device node"},
		{Path: p("data4"), Claim: "claimD", Error: "not a block device: regular file"},
		{Path: p("data5"), Claim: "claimE", Error: "not a block device: character device"},
		{Path: realLoop, Claim: "claimF", Size: 64 * mib}, // the host node itself works too
	}
	return devDir, specs, want
}

func guardArgs(specs []DeviceSpec, policy, out, termLog string) []string {
	args := []string{contract.CmdGuard}
	for _, s := range specs {
		args = append(args, contract.FlagDevice, s.Path+"="+s.Claim)
	}
	return append(args, contract.FlagPolicy, policy, contract.FlagOut, out, contract.FlagFakeSize, "512", "--termination-log", termLog)
}

func readReportFile(t *testing.T, dir string) Report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, contract.DevicesFile))
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("devices.json: %v\n%s", err, data)
	}
	return r
}

func TestGuardOnRealDevices(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildHelper(t)
	devDir, specs, want := podDevices(t)

	t.Run("filter", func(t *testing.T) {
		out, termLog := t.TempDir(), filepath.Join(t.TempDir(), "termination-log")
		res := runHelper(t, bin, nil, guardArgs(specs, contract.PolicyFilter, out, termLog)...)
		if res.code != 0 {
			t.Fatalf("guard exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
		}
		got := readReportFile(t, out)
		if d := cmp.Diff(Report{Version: 1, Policy: "filter", FakeSize: 512, Devices: want}, got); d != "" {
			t.Errorf("devices.json (-want +got):\n%s", d)
		}
		// The filtered view: exactly the real block devices, each link leading to a 64 MiB disk.
		view := readView(t, out)
		wantView := map[string]string{"data1": filepath.Join(devDir, "data1"), filepath.Base(specs[5].Path): specs[5].Path}
		if d := cmp.Diff(wantView, view); d != "" {
			t.Errorf("filtered view (-want +got):\n%s", d)
		}
		for name := range view {
			size, err := RealDeps().Devices.DeviceSize(filepath.Join(out, contract.FilteredDevDir, name))
			if err != nil || size != 64*mib {
				t.Errorf("%s/%s: size %d, %v; want a 64 MiB block device", contract.FilteredDevDir, name, size, err)
			}
		}
		msg, err := os.ReadFile(termLog)
		wantMsg := fmt.Sprintf("1 fake device filtered: %s/data2 (claim claimB); 3 devices unreadable: "+
			"%[1]s/data3 (claim claimC): no such device node, %[1]s/data4 (claim claimD): not a block device: regular file, "+
			"%[1]s/data5 (claim claimE): not a block device: character device", devDir)
		if err != nil || string(msg) != wantMsg {
			t.Errorf("termination message = %q, %v\nwant %q", msg, err, wantMsg)
		}
		if !strings.Contains(res.stdout, wantMsg) {
			t.Errorf("stdout lacks the summary:\n%s", res.stdout)
		}
		t.Logf("guard (6 devices, subprocess) took %s", res.took)
	})

	t.Run("require", func(t *testing.T) {
		out, termLog := t.TempDir(), filepath.Join(t.TempDir(), "termination-log")
		res := runHelper(t, bin, nil, guardArgs(specs[:2], contract.PolicyRequire, out, termLog)...)
		wantMsg := fmt.Sprintf("refused by policy require: 1 fake device: %s/data2 (claim claimB)", devDir)
		if res.code != ExitRefused {
			t.Errorf("guard --policy require exit %d, want %d", res.code, ExitRefused)
		}
		if strings.TrimSpace(res.stderr) != wantMsg {
			t.Errorf("stderr = %q, want %q", res.stderr, wantMsg)
		}
		if msg, err := os.ReadFile(termLog); err != nil || string(msg) != wantMsg {
			t.Errorf("termination message = %q, %v; want %q", msg, err, wantMsg)
		}
		// The report is still written, for whoever looks into the shared volume.
		if got := readReportFile(t, out); len(got.Devices) != 2 || !got.Devices[1].Fake || got.Policy != "require" {
			t.Errorf("devices.json = %+v", got)
		}
	})

	t.Run("require with real devices only", func(t *testing.T) {
		out, termLog := t.TempDir(), filepath.Join(t.TempDir(), "termination-log")
		res := runHelper(t, bin, nil, guardArgs([]DeviceSpec{specs[0]}, contract.PolicyRequire, out, termLog)...)
		if res.code != 0 {
			t.Errorf("exit %d, stderr %s", res.code, res.stderr)
		}
		if msg, _ := os.ReadFile(termLog); string(msg) != "1 device real, none fake" {
			t.Errorf("termination message = %q", msg)
		}
	})
}

func TestGuardSixteenDevices(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildHelper(t)
	tmp := t.TempDir()
	devDir := filepath.Join(tmp, "dev")
	if err := os.Mkdir(devDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var specs []DeviceSpec
	var want []Device
	wantView := map[string]string{}
	attachStart := time.Now()
	for i := range 16 {
		size := int64(64 * mib)
		if i%2 == 1 {
			size = 512
		}
		node := filepath.Join(devDir, fmt.Sprintf("data%d", i))
		mknodLike(t, node, attachLoop(t, tmp, size))
		specs = append(specs, DeviceSpec{node, fmt.Sprintf("claim-%d", i)})
		want = append(want, Device{Path: node, Claim: fmt.Sprintf("claim-%d", i), Size: size, Fake: size == 512})
		if size != 512 {
			wantView[filepath.Base(node)] = node
		}
	}
	t.Logf("attached 16 loop devices in %s", time.Since(attachStart))

	// In process: the cost of the guard's own work.
	o := NewGuardOptions()
	o.Devices = specs
	start := time.Now()
	r := Inspect(RealDeps().Devices, o)
	inspectTook := time.Since(start)
	if d := cmp.Diff(Report{Version: 1, Policy: "filter", FakeSize: 512, Devices: want}, r); d != "" {
		t.Fatalf("Inspect (-want +got):\n%s", d)
	}

	// As the init container runs it: a fresh process.
	out := t.TempDir()
	var took []time.Duration
	for range 5 {
		res := runHelper(t, bin, nil, guardArgs(specs, contract.PolicyFilter, out, filepath.Join(out, "termination-log"))...)
		if res.code != 0 {
			t.Fatalf("exit %d: %s", res.code, res.stderr)
		}
		took = append(took, res.took)
	}
	if d := cmp.Diff(Report{Version: 1, Policy: "filter", FakeSize: 512, Devices: want}, readReportFile(t, out)); d != "" {
		t.Errorf("devices.json (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantView, readView(t, out)); d != "" {
		t.Errorf("filtered view (-want +got):\n%s", d)
	}
	msg, _ := os.ReadFile(filepath.Join(out, "termination-log"))
	if !strings.HasPrefix(string(msg), "8 fake devices filtered: ") {
		t.Errorf("termination message = %q", msg)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("guard over 16 loop devices: in-process Inspect %s; whole process (exec to exit, writing devices.json and dev/) min %s, median %s, max %s over %d runs",
		inspectTook, took[0], took[len(took)/2], took[len(took)-1], len(took))
	if took[len(took)/2] > 2*time.Second {
		t.Errorf("guard took a median %s for 16 devices; it should take milliseconds", took[len(took)/2])
	}
}

func TestInstallRealBinary(t *testing.T) {
	bin := buildHelper(t)
	to := filepath.Join(t.TempDir(), "pvrescue", "bin")
	res := runHelper(t, bin, nil, contract.CmdInstall, contract.FlagTo, to)
	if res.code != 0 {
		t.Fatalf("install exit %d: %s", res.code, res.stderr)
	}
	installed := filepath.Join(to, contract.HelperBinaryName)
	fi, err := os.Stat(installed)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed binary: %v, %v", fi, err)
	}
	// The copy works on its own (it is what the probe and the exec wrapper run).
	if res := runHelper(t, installed, nil, contract.CmdProbe, contract.FlagTimeout, "2s", "/"); res.code != 0 || res.stdout != "/: ok\n" {
		t.Errorf("installed copy: probe / exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}
