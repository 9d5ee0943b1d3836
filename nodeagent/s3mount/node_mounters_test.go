//go:build node

package s3mount_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// A geesefs volume of k8s-csi-s3 (its default program), here served by a real s3fs presenting
// geesefs's mount type (-o subtype=geesefs, as the e2e test plugin does): its daemon killed and no
// driver to replay → the agent bridges it with its own s3fs over the same prefix, with the modes
// geesefs shows by default mapped to s3fs's umask. An object written by another program (no
// mode metadata, as geesefs writes them) reads through the bridge with mode 0755, not s3fs's
// 0640 default.
func TestNodeBridgeGeesefsVolume(t *testing.T) {
	e := newNodeEnv(t)
	e.volumeWith("pv-g", map[string]string{"mounter": "geesefs"})
	// Written on the server's side: no x-amz-meta-mode, as geesefs leaves its objects.
	must(t, os.WriteFile(filepath.Join(e.s3dir, bucket, "pv-g", "plain.txt"), []byte("no metadata\n"), 0o600))
	pod := e.pod("app-g", "pv-g")
	target, driverProc := e.publishAs(pod, "pv-g", "geesefs")
	if got := topFSType(target); got != "fuse.geesefs" {
		t.Fatalf("driver mount type %q, want fuse.geesefs (s3fs -o subtype=geesefs)", got)
	}
	e.agent(30 * time.Second)
	served := topMountID(target)
	must(t, driverProc.Signal(syscall.SIGKILL))
	waitFor(t, 30*time.Second, "target restored: another mount answers there", func() bool { return restoredSince(target, served) })
	if src := topSource(target); src != stack.FSName("pv-g") {
		t.Fatalf("top mount at the target is %q, want the agent's bridge %q", src, stack.FSName("pv-g"))
	}
	bridge := bridgeProcess(t, e.bridgeDir("pv-g"))
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(bridge.Pid), "cmdline"))
	if !strings.Contains(string(cmdline), "umask=0022") {
		t.Errorf("bridge s3fs command line %q lacks umask=0022 (geesefs's default modes)", strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(target, "plain.txt"), &st))
	if mode := st.Mode & 0o777; mode != 0o755 {
		t.Errorf("an object without mode metadata shows mode %04o through the bridge, want 0755", mode)
	}
	b, err := os.ReadFile(filepath.Join(target, "plain.txt"))
	if err != nil || string(b) != "no metadata\n" {
		t.Errorf("read through the bridge: %q, %v", b, err)
	}
	// The Event is recorded after the bind is in place (restored.go): wait for it, do not race it.
	waitFor(t, 10*time.Second, "the "+contract.ReasonMountBridged+" Event", func() bool {
		return e.rec.Count(corev1.EventTypeNormal, contract.ReasonMountBridged, "") > 0
	})
	t.Logf("geesefs volume bridged: bridge pid %d, plain.txt mode %04o, target %d mounts", bridge.Pid, st.Mode&0o777, len(stackAt(target)))
}

// publishAs is publish with the driver's s3fs presenting program's mount type (fuse.<program>).
func (e *nodeEnv) publishAs(pod *corev1.Pod, pv, program string) (string, *os.Process) {
	e.t.Helper()
	target := csiclient.TargetPath(e.kubelet, string(pod.UID), pv)
	must(e.t, os.MkdirAll(target, 0o750))
	vd := `{"specVolID":"` + pv + `","volumeHandle":"` + bucket + "/" + pv + `","driverName":"` + driver + `","nodeName":"` + nodeName + `","attachmentID":"","volumeLifecycleMode":"Persistent"}`
	must(e.t, os.WriteFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), []byte(vd), 0o644))
	pw := filepath.Join(e.dir, "driver", string(pod.UID)+".passwd")
	must(e.t, os.MkdirAll(filepath.Dir(pw), 0o700))
	must(e.t, os.WriteFile(pw, []byte(ak+":"+sk+"\n"), 0o600))
	cmd := exec.Command("s3fs", bucket+":/"+pv, target, "-f", "-o", "passwd_file="+pw, "-o", "url="+e.endpoint,
		"-o", "use_path_request_style", "-o", "allow_other", "-o", "subtype="+program)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(e.t, cmd.Start())
	go func() { _ = cmd.Wait() }()
	waitFor(e.t, 20*time.Second, "driver s3fs mounted at "+target+" as fuse."+program, func() bool {
		var st unix.Statfs_t
		return topFSType(target) == "fuse."+program && unix.Statfs(target, &st) == nil
	})
	return target, cmd.Process
}

// volumeWith is volume (handle bkt/<name>, the default secret) with the PV's attributes attrs.
func (e *nodeEnv) volumeWith(name string, attrs map[string]string) {
	e.t.Helper()
	e.claimedVolume(name, &corev1.CSIPersistentVolumeSource{
		NodePublishSecretRef: &corev1.SecretReference{Name: "s3-creds", Namespace: ns}, VolumeAttributes: attrs})
}
