// Package testenv is the one test environment of pvrescue: integration, node and e2e tests and
// hack/bench get their real prerequisites here — a kube-apiserver with etcd, root, host commands,
// loop devices, a versitygw S3 server, s3fs mounts, free ports, waits — and a test fails (never
// skips) with a message saying how to get a prerequisite that is missing.
//
// Functions taking a testing.TB register their cleanup with it; the ones returning an error
// (AttachLoop, StartS3Server, StartS3fs, SweepMounts, PickPort, Poll) serve tools such as
// hack/bench and the e2e cluster, which clean up themselves.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubeVersion is the Kubernetes release whose binaries the tests run against.
const KubeVersion = "v1.37.2"

// RepoRoot returns the repository root (the directory holding go.mod of the main module).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir is where kube-apiserver and etcd live: $KUBEBUILDER_ASSETS, else bin/k8s/<version>.
func AssetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "bin", "k8s", KubeVersion)
}

// Binary returns the path of a test binary in bin/ and fails the test when it is missing.
func Binary(t testing.TB, name, makeTarget string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing (%v): run `make %s` first (make test does it for you)", p, err, makeTarget)
	}
	return p
}

// RequireRoot fails the test unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (loop devices, mounts): run it with `sudo make node` or as root in CI")
	}
}

// RequireCommand returns the path of a host command and fails with an install hint when absent.
func RequireCommand(t testing.TB, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH: %s (make deps installs it)", name, hint)
	}
	return p
}

// APIServer starts etcd and kube-apiserver for the test and stops them when it ends.
// crdDirs are loaded into the apiserver before it returns.
func APIServer(t testing.TB, crdDirs ...string) (*envtest.Environment, *rest.Config) {
	t.Helper()
	return ControlPlane{CRDDirs: crdDirs}.Start(t)
}

// ControlPlane is a test control plane (etcd + kube-apiserver) with settings beyond the defaults.
type ControlPlane struct {
	CRDDirs []string
	// APIServerFlags are set on kube-apiserver's command line (name without dashes → value).
	APIServerFlags map[string]string
	// Assets is the directory holding kube-apiserver and etcd; "" means AssetsDir().
	Assets string
}

// Start starts the control plane for the test and stops it when the test ends.
func (cp ControlPlane) Start(t testing.TB) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env, cfg, err := cp.StartEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop test control plane: %v", err)
		}
	})
	return env, cfg
}

// StartEnvironment starts the control plane for a tool (hack/bench), which stops it itself.
func (cp ControlPlane) StartEnvironment() (*envtest.Environment, *rest.Config, error) {
	dir := cp.Assets
	if dir == "" {
		dir = AssetsDir()
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return nil, nil, fmt.Errorf("%s not found in %s: run `make kube-binaries` (builds kube-apiserver %s from the Go module proxy and links etcd)", b, dir, KubeVersion)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     cp.CRDDirs,
		ErrorIfCRDPathMissing: len(cp.CRDDirs) > 0,
		// A loaded 2-core machine can take well over envtest's 20 s default to bring up etcd and
		// kube-apiserver; waiting longer is cheap, a flaky start is not.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	for k, v := range cp.APIServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(k, v)
	}
	if os.Getenv("PVRESCUE_TEST_CONTROL_PLANE_OUTPUT") != "" {
		env.AttachControlPlaneOutput = true
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", dir, err)
	}
	return env, cfg, nil
}
