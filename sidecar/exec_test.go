package sidecar

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRemoveFakes(t *testing.T) {
	r := Report{Version: 1, Policy: "filter", FakeSize: 512, Devices: []Device{
		{Path: "/dev/real", Claim: "a", Size: 1 << 30},
		{Path: "/dev/fake", Claim: "b", Size: 512, Fake: true},
		{Path: "/dev/gone", Claim: "c", Size: 512, Fake: true},     // already removed
		{Path: "/dev/swapped", Claim: "d", Size: 512, Fake: true},  // a real disk at that path now
		{Path: "/dev/readonly", Claim: "e", Size: 512, Fake: true}, // remove fails (non-root)
		{Path: "/dev/noaccess", Claim: "f", Size: 512, Fake: true}, // cannot even be measured
		{Path: "/dev/broken", Claim: "g", Error: "no such device node"},
	}}
	devs := FakeDevices{
		"/dev/real":     {Size: 1 << 30},
		"/dev/fake":     {Size: 512},
		"/dev/swapped":  {Size: 1 << 30},
		"/dev/readonly": {Size: 512},
		"/dev/noaccess": {Err: syscall.EACCES},
	}
	files := &FakeFiles{Errs: map[string]error{"/dev/readonly": syscall.EROFS}}
	var stderr bytes.Buffer
	removed, failed := RemoveFakes(r, Deps{Devices: devs, Files: files}, &stderr)
	if d := cmp.Diff([]string{"/dev/fake"}, removed); d != "" {
		t.Errorf("removed (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"/dev/fake"}, files.Removed); d != "" {
		t.Errorf("Remove calls that succeeded (-want +got):\n%s", d)
	}
	if !failed {
		t.Errorf("failed = false, want true (readonly and noaccess are still there)")
	}
	want := "pvrescue: removed fake device /dev/fake (claim b)\n" +
		"pvrescue: not removing /dev/swapped (claim d): its size is now 1073741824 bytes, not the fake size 512\n" +
		"pvrescue: cannot remove fake device /dev/readonly (claim e): read-only file system; the application still sees it\n" +
		"pvrescue: not removing fake device /dev/noaccess (claim f): permission denied\n"
	if d := cmp.Diff(want, stderr.String()); d != "" {
		t.Errorf("stderr (-want +got):\n%s", d)
	}
}

func writeReportFile(t *testing.T, r Report) string {
	t.Helper()
	dir := t.TempDir()
	if err := WriteReport(dir, r); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "devices.json")
}

func TestRunExec(t *testing.T) {
	fakeReport := Report{Version: 1, Policy: "filter", FakeSize: 512, Devices: []Device{
		{Path: "/dev/data1", Claim: "a", Size: 1 << 30},
		{Path: "/dev/data2", Claim: "b", Size: 512, Fake: true},
	}}
	garbage := filepath.Join(t.TempDir(), "devices.json")
	if err := os.WriteFile(garbage, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"A=1", "PATH=/usr/bin:/bin", "EMPTY="}
	tests := []struct {
		name        string
		file        string
		cmd         []string
		proc        *FakeProcess
		files       *FakeFiles
		wantCode    int
		wantRemoved []string
		wantPath    string
		wantStderr  string // substring
	}{
		{name: "removes fakes then execs", file: writeReportFile(t, fakeReport), cmd: []string{"app", "--flag", "a b", ""},
			proc: &FakeProcess{Paths: map[string]string{"app": "/usr/bin/app"}}, wantRemoved: []string{"/dev/data2"}, wantPath: "/usr/bin/app",
			wantStderr: "removed fake device /dev/data2"},
		{name: "no report: just exec", file: filepath.Join(t.TempDir(), "devices.json"), cmd: []string{"/bin/app"},
			proc: &FakeProcess{}, wantPath: "/bin/app"},
		{name: "unreadable report: warn and exec", file: garbage, cmd: []string{"/bin/app"},
			proc: &FakeProcess{}, wantPath: "/bin/app", wantStderr: "without filtering devices"},
		{name: "remove fails: warn, point at the view, exec", file: writeReportFile(t, fakeReport), cmd: []string{"/bin/app"},
			proc: &FakeProcess{}, files: &FakeFiles{Errs: map[string]error{"/dev/data2": syscall.EACCES}}, wantPath: "/bin/app",
			wantStderr: "/dev lists the real devices only"},
		{name: "command not found", file: writeReportFile(t, fakeReport), cmd: []string{"nope"},
			proc: &FakeProcess{}, wantCode: ExitCommandNotFound, wantRemoved: []string{"/dev/data2"}, wantStderr: "executable file not found"},
		{name: "exec fails", file: writeReportFile(t, fakeReport), cmd: []string{"/bin/app"},
			proc: &FakeProcess{ExecErr: syscall.ENOEXEC}, wantCode: ExitCannotExecute, wantRemoved: []string{"/dev/data2"}, wantStderr: "exec format error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := tt.files
			if files == nil {
				files = &FakeFiles{}
			}
			var stderr bytes.Buffer
			e := &Env{
				Deps:    Deps{Devices: FakeDevices{"/dev/data1": {Size: 1 << 30}, "/dev/data2": {Size: 512}}, Files: files, Process: tt.proc},
				Stdout:  &bytes.Buffer{},
				Stderr:  &stderr,
				Environ: env,
			}
			code := RunExec(&ExecOptions{DevicesFile: tt.file, Command: tt.cmd}, e)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if d := cmp.Diff(tt.wantRemoved, files.Removed); d != "" {
				t.Errorf("removed (-want +got):\n%s", d)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
			if tt.wantPath == "" {
				if tt.proc.Executed {
					t.Errorf("executed %s, want no exec", tt.proc.Path)
				}
				return
			}
			if !tt.proc.Executed || tt.proc.Path != tt.wantPath {
				t.Fatalf("exec = %v %q, want %q", tt.proc.Executed, tt.proc.Path, tt.wantPath)
			}
			if d := cmp.Diff(tt.cmd, tt.proc.Argv); d != "" {
				t.Errorf("argv (-want +got):\n%s", d)
			}
			if d := cmp.Diff(env, tt.proc.Env); d != "" {
				t.Errorf("env (-want +got):\n%s", d)
			}
		})
	}
}

func TestExecOptionsValidate(t *testing.T) {
	if err := (&ExecOptions{DevicesFile: "x"}).Validate(); err == nil {
		t.Error("no command: want an error")
	}
	if err := (&ExecOptions{DevicesFile: "x", Command: []string{""}}).Validate(); err == nil {
		t.Error("empty command name: want an error")
	}
	if err := (&ExecOptions{DevicesFile: "x", Command: []string{"sh"}}).Validate(); err != nil {
		t.Errorf("valid: %v", err)
	}
}
