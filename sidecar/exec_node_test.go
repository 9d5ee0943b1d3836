//go:build node

package sidecar

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// execFixture: a temporary /dev with a real (64 MiB) and a fake (512 B) block node, plus the
// guard's report about them, written by the real binary.
func execFixture(t *testing.T, bin, devDir string) (realNode, fakeNode, realLoop, fakeLoop, report string) {
	t.Helper()
	tmp := t.TempDir()
	realLoop, fakeLoop = attachLoop(t, tmp, 64*mib), attachLoop(t, tmp, 512)
	realNode, fakeNode = filepath.Join(devDir, "data1"), filepath.Join(devDir, "data2")
	mknodLike(t, realNode, realLoop)
	mknodLike(t, fakeNode, fakeLoop)
	out := t.TempDir()
	res := runHelper(t, bin, nil, guardArgs([]DeviceSpec{{realNode, "a"}, {fakeNode, "b"}}, contract.PolicyFilter, out, filepath.Join(out, "term"))...)
	if res.code != 0 {
		t.Fatalf("guard: exit %d: %s", res.code, res.stderr)
	}
	return realNode, fakeNode, realLoop, fakeLoop, filepath.Join(out, contract.DevicesFile)
}

func requireBlock(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		t.Errorf("%s: want a block device, got %v, %v", path, fi, err)
	}
}

func TestExecRemovesOnlyFakeNodes(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "sh", "install a POSIX shell")
	bin := buildHelper(t)
	devDir := t.TempDir()
	realNode, fakeNode, realLoop, fakeLoop, report := execFixture(t, bin, devDir)

	// The script checks, from inside the exec'd command, that the fake node is gone and the real
	// one is still there, prints its PID, arguments and environment, and exits 7.
	script := fmt.Sprintf(`test ! -e %s || { echo fake still there; exit 99; }
test -b %s || { echo real node gone; exit 98; }
echo "pid=$$"; echo "args=$0|$1|$2"; echo "env=$PVRESCUE_TEST_VAR"; exit 7`, fakeNode, realNode)
	res := runHelper(t, bin, []string{"PVRESCUE_TEST_VAR=kept with spaces"},
		contract.CmdExec, contract.FlagDevicesFile, report, "--", "sh", "-c", script, "zero", "one two", "--three")
	if res.code != 7 {
		t.Fatalf("exit %d, want the command's 7\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	want := fmt.Sprintf("pid=%d\nargs=zero|one two|--three\nenv=kept with spaces\n", res.pid)
	if res.stdout != want {
		t.Errorf("stdout = %q, want %q (the same PID proves exec, not fork)", res.stdout, want)
	}
	if want := fmt.Sprintf("pvrescue: removed fake device %s (claim b)\n", fakeNode); res.stderr != want {
		t.Errorf("stderr = %q, want %q", res.stderr, want)
	}
	if _, err := os.Lstat(fakeNode); !os.IsNotExist(err) {
		t.Errorf("fake node %s still exists (%v)", fakeNode, err)
	}
	requireBlock(t, realNode)
	requireBlock(t, realLoop) // the host's loop devices are never touched
	requireBlock(t, fakeLoop)

	// A restarted container: the fake node is already gone, the command still runs.
	res = runHelper(t, bin, nil, contract.CmdExec, contract.FlagDevicesFile, report, "--", "sh", "-c", "exit 3")
	if res.code != 3 || res.stderr != "" {
		t.Errorf("second run: exit %d, stderr %q; want 3 and silence", res.code, res.stderr)
	}
}

func TestExecWithoutReportJustExecs(t *testing.T) {
	bin := buildHelper(t)
	missing := filepath.Join(t.TempDir(), "devices.json")
	res := runHelper(t, bin, []string{"X=1"}, contract.CmdExec, contract.FlagDevicesFile, missing, "--", "sh", "-c", `echo "$X $0"; exit 5`, "arg")
	if res.code != 5 || res.stdout != "1 arg\n" || res.stderr != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 5, %q, no stderr", res.code, res.stdout, res.stderr, "1 arg\n")
	}
	res = runHelper(t, bin, nil, contract.CmdExec, contract.FlagDevicesFile, missing, "--", "no-such-command-pvrescue")
	if res.code != ExitCommandNotFound || !strings.Contains(res.stderr, "executable file not found") {
		t.Errorf("missing command: exit %d, stderr %q; want %d", res.code, res.stderr, ExitCommandNotFound)
	}
}

// A non-root container cannot remove /dev nodes; a read-only tmpfs gives the same refusal to root.
func TestExecCannotRemoveWarnsAndRuns(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildHelper(t)
	devDir := t.TempDir()
	if err := unix.Mount("tmpfs", devDir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { lazyUnmount(t, devDir) })
	realNode, fakeNode, _, _, report := execFixture(t, bin, devDir)
	if err := unix.Mount("", devDir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	res := runHelper(t, bin, nil, contract.CmdExec, contract.FlagDevicesFile, report, "--", "sh", "-c", "exit 4")
	if res.code != 4 {
		t.Errorf("exit %d, want the command's 4 (stderr %s)", res.code, res.stderr)
	}
	wantView := filepath.Join(filepath.Dir(report), contract.FilteredDevDir)
	want := fmt.Sprintf("pvrescue: cannot remove fake device %s (claim b): read-only file system; the application still sees it\n"+
		"pvrescue: %s lists the real devices only\n", fakeNode, wantView)
	if res.stderr != want {
		t.Errorf("stderr = %q\nwant %q", res.stderr, want)
	}
	requireBlock(t, fakeNode)
	requireBlock(t, realNode)
}
