package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pvrescue/pvrescue/internal/contract"
)

func TestParseDeviceSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    DeviceSpec
		wantErr bool
	}{
		{in: "/dev/data1=claimA", want: DeviceSpec{"/dev/data1", "claimA"}},
		{in: "/dev/xvdb=my-claim.v2", want: DeviceSpec{"/dev/xvdb", "my-claim.v2"}},
		{in: "/dev/odd=name=claim", want: DeviceSpec{"/dev/odd=name", "claim"}}, // last '=' splits
		{in: "/dev/data1", wantErr: true},
		{in: "/dev/data1=", wantErr: true},
		{in: "=claim", wantErr: true},
		{in: "dev/data1=claim", wantErr: true},
		{in: "/dev/../data1=claim", wantErr: true},
		{in: "/dev/data1/=claim", wantErr: true},
		{in: "/=claim", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseDeviceSpec(tt.in)
		if tt.wantErr {
			if !errors.Is(err, ErrInvalidDeviceSpec) {
				t.Errorf("ParseDeviceSpec(%q) error = %v, want ErrInvalidDeviceSpec", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDeviceSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestGuardOptionsValidate(t *testing.T) {
	ok := func(mut func(*GuardOptions)) *GuardOptions {
		o := NewGuardOptions()
		o.Devices = []DeviceSpec{{"/dev/data1", "a"}, {"/dev/data2", "b"}}
		mut(o)
		return o
	}
	tests := []struct {
		name    string
		o       *GuardOptions
		wantErr bool
	}{
		{"defaults with devices", ok(func(*GuardOptions) {}), false},
		{"require", ok(func(o *GuardOptions) { o.Policy = contract.PolicyRequire }), false},
		{"no devices", ok(func(o *GuardOptions) { o.Devices = nil }), true},
		{"duplicate path", ok(func(o *GuardOptions) { o.Devices = append(o.Devices, DeviceSpec{"/dev/data1", "c"}) }), true},
		{"same base name", ok(func(o *GuardOptions) { o.Devices = append(o.Devices, DeviceSpec{"/dev/x/data1", "c"}) }), true},
		{"bad policy", ok(func(o *GuardOptions) { o.Policy = "strict" }), true},
		{"empty out", ok(func(o *GuardOptions) { o.Out = "" }), true},
		{"zero fake size", ok(func(o *GuardOptions) { o.FakeSize = 0 }), true},
	}
	for _, tt := range tests {
		if err := tt.o.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("%s: Validate() = %v, wantErr %v", tt.name, err, tt.wantErr)
		}
	}
}

// fakeGuardDevices covers every kind of device the guard can meet.
func fakeGuardDevices() (FakeDevices, []DeviceSpec) {
	devs := FakeDevices{
		"/dev/data1": {Size: 64 << 20},
		"/dev/data2": {Size: 512},
		"/dev/data3": {Size: 1024}, // near the fake size but not it
		"/dev/file":  {Err: fmt.Errorf("%w: regular file", ErrNotBlockDevice)},
		"/dev/null0": {Err: fmt.Errorf("%w: character device", ErrNotBlockDevice)},
		"/dev/empty": {Size: 0},
		"/dev/perm":  {Err: syscall.EACCES},
	}
	specs := []DeviceSpec{
		{"/dev/data1", "c1"}, {"/dev/data2", "c2"}, {"/dev/data3", "c3"}, {"/dev/gone", "c4"},
		{"/dev/file", "c5"}, {"/dev/null0", "c6"}, {"/dev/empty", "c7"}, {"/dev/perm", "c8"},
	}
	return devs, specs
}

func TestInspect(t *testing.T) {
	devs, specs := fakeGuardDevices()
	o := NewGuardOptions()
	o.Devices = specs
	got := Inspect(devs, o)
	want := Report{Version: 1, Policy: "filter", FakeSize: 512, Devices: []Device{
		{Path: "/dev/data1", Claim: "c1", Size: 64 << 20},
		{Path: "/dev/data2", Claim: "c2", Size: 512, Fake: true},
		{Path: "/dev/data3", Claim: "c3", Size: 1024},
		{Path: "/dev/gone", Claim: "c4", Error: "no such device node"},
		{Path: "/dev/file", Claim: "c5", Error: "not a block device: regular file"},
		{Path: "/dev/null0", Claim: "c6", Error: "not a block device: character device"},
		{Path: "/dev/empty", Claim: "c7", Error: "block device has size 0"},
		{Path: "/dev/perm", Claim: "c8", Error: "permission denied"},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Inspect (-want +got):\n%s", d)
	}
	o.FakeSize = 1024 // the fake size is configurable
	got = Inspect(devs, o)
	if got.Devices[1].Fake || !got.Devices[2].Fake {
		t.Errorf("with fake size 1024: %+v", got.Devices[:3])
	}
}

// readView lists the filtered view as name -> link target.
func readView(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, contract.FilteredDevDir))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, contract.FilteredDevDir, e.Name()))
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", e.Name(), err)
		}
		got[e.Name()] = target
	}
	return got
}

func TestWriteReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pvrescue")
	devs, specs := fakeGuardDevices()
	o := NewGuardOptions()
	o.Devices = specs
	r := Inspect(devs, o)
	if err := WriteReport(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(filepath.Join(dir, contract.DevicesFile))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(r, back); d != "" {
		t.Errorf("devices.json (-want +got):\n%s", d)
	}
	want := map[string]string{"data1": "/dev/data1", "data3": "/dev/data3"}
	if d := cmp.Diff(want, readView(t, dir)); d != "" {
		t.Errorf("filtered view (-want +got):\n%s", d)
	}

	// A second run where data1 has become fake must not leave its old link behind.
	devs["/dev/data1"] = FakeDevice{Size: 512}
	if err := WriteReport(dir, Inspect(devs, o)); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"data3": "/dev/data3"}, readView(t, dir)); d != "" {
		t.Errorf("filtered view after rerun (-want +got):\n%s", d)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if d := cmp.Diff([]string{"dev", "devices.json"}, names); d != "" {
		t.Errorf("leftover files in %s (-want +got):\n%s", dir, d)
	}
}

func TestRunGuard(t *testing.T) {
	devs := FakeDevices{"/dev/data1": {Size: 1 << 30}, "/dev/data2": {Size: 512}}
	tests := []struct {
		name       string
		policy     string
		wantCode   int
		wantMsg    string
		wantStdout string
		wantStderr string
	}{
		{"filter", contract.PolicyFilter, ExitOK, "1 fake device filtered: /dev/data2 (claim b)",
			"/dev/data1 (claim a): 1073741824 bytes, real\n/dev/data2 (claim b): 512 bytes, fake\n1 fake device filtered: /dev/data2 (claim b)\n", ""},
		{"require", contract.PolicyRequire, ExitRefused, "refused by policy require: 1 fake device: /dev/data2 (claim b)",
			"/dev/data1 (claim a): 1073741824 bytes, real\n/dev/data2 (claim b): 512 bytes, fake\n", "refused by policy require: 1 fake device: /dev/data2 (claim b)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			o := NewGuardOptions()
			o.Devices = []DeviceSpec{{"/dev/data1", "a"}, {"/dev/data2", "b"}}
			o.Policy = tt.policy
			o.Out = filepath.Join(tmp, "out")
			o.TerminationLog = filepath.Join(tmp, "termination-log")
			var stdout, stderr bytes.Buffer
			code := RunGuard(o, &Env{Deps: Deps{Devices: devs}, Stdout: &stdout, Stderr: &stderr})
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d", code, tt.wantCode)
			}
			msg, err := os.ReadFile(o.TerminationLog)
			if err != nil || string(msg) != tt.wantMsg {
				t.Errorf("termination message = %q, %v; want %q", msg, err, tt.wantMsg)
			}
			if stdout.String() != tt.wantStdout || stderr.String() != tt.wantStderr {
				t.Errorf("stdout = %q, stderr = %q; want %q, %q", stdout.String(), stderr.String(), tt.wantStdout, tt.wantStderr)
			}
			if d := cmp.Diff(map[string]string{"data1": "/dev/data1"}, readView(t, o.Out)); d != "" {
				t.Errorf("filtered view (-want +got):\n%s", d)
			}
		})
	}
}

func TestRunGuardOutputsUnwritable(t *testing.T) {
	tmp := t.TempDir()
	blocker := filepath.Join(tmp, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o := NewGuardOptions()
	o.Devices = []DeviceSpec{{"/dev/data1", "a"}}
	o.Out = filepath.Join(blocker, "out") // a directory under a regular file cannot be created
	o.TerminationLog = ""
	var stdout, stderr bytes.Buffer
	code := RunGuard(o, &Env{Deps: Deps{Devices: FakeDevices{"/dev/data1": {Size: 4096}}}, Stdout: &stdout, Stderr: &stderr})
	if code != ExitError || stderr.Len() == 0 {
		t.Errorf("exit code = %d, stderr %q; want %d and a message", code, stderr.String(), ExitError)
	}
}

func TestRunGuardTerminationLogUnwritableIsNotFatal(t *testing.T) {
	tmp := t.TempDir()
	o := NewGuardOptions()
	o.Devices = []DeviceSpec{{"/dev/data1", "a"}}
	o.Out = filepath.Join(tmp, "out")
	o.TerminationLog = filepath.Join(tmp, "missing-dir", "termination-log")
	var stdout, stderr bytes.Buffer
	code := RunGuard(o, &Env{Deps: Deps{Devices: FakeDevices{"/dev/data1": {Size: 4096}}}, Stdout: &stdout, Stderr: &stderr})
	if code != ExitOK {
		t.Errorf("exit code = %d, want 0", code)
	}
	if !bytes.Contains(stderr.Bytes(), []byte("write termination message")) {
		t.Errorf("stderr = %q, want a note about the termination message", stderr.String())
	}
}
