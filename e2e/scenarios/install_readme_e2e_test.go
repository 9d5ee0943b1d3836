//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// readmePlatforms is what the README's `make images` builds here (PLATFORMS, which the Makefile
// lets the environment set): the node is linux/amd64, and the arm64 half would only double the
// cold build (hack/images' unit tests cover the multi-platform index).
const readmePlatforms = "linux/amd64"

// TestInstallHelm3 installs pvrescue the way the README says, with the Helm 3 CLI, on a cluster
// of its own: the README's install commands are read from README.md and run as written (bash, in
// the checkout) with only the registry, the application namespace and the node name replaced (and
// --plain-http added: the test registry has no TLS) — `make images push` (PLATFORMS=linux/amd64:
// the images and the chart) to an empty registry on the node, `kubectl apply -f
// manifests/namespace.yaml`, `helm install oci://… --version … --wait` from that registry (Helm 3,
// the chart's default tls.mode cert-manager: cert-manager's controllers run in-process, no image
// of theirs can be pulled here), the two labels, `make kubectl-plugin` and `kubectl pvrescue
// status`. The node's containerd pulls the images
// from that registry (the registry's own record, and each container's image ID is the pushed
// digest). Then both rescues run on that install: a lost local disk (the pod starts on a fake
// device) and a lost FUSE mount (the CSI plugin restarts; the agent restores the mount). Before
// them, operations.md's `helm upgrade --wait` changes a value in place (readmeUpgradeInPlace), after
// which cert-manager's serving certificate, the same, still verifies against cainjector's caBundle.
// TestHelm does the same install with the Helm 4 CLI before its upgrade, Prometheus and alert checks.
func TestInstallHelm3(t *testing.T) {
	start := time.Now()
	c := framework.UpWith(t, "install", func(o *cluster.Options) { o.PullRegistry = true })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	crds, err := stack.CertManagerCRDDir(filepath.Join(testenv.RepoRoot(), "e2e"))
	if err != nil {
		t.Fatal(err)
	}
	cm, err := stack.StartCertManager(ctx, c.Config, stack.CertManagerOptions{Kubeconfig: c.Kubeconfig, CRDDir: crds, Log: logr.Discard()})
	if err != nil {
		t.Fatalf("start cert-manager: %v", err)
	}
	t.Cleanup(cm.Stop)
	e := rescueEnv(ctx, t, c)
	installed := time.Now()
	readmeInstall(ctx, t, e, 3, "e2e-readme-app", nil, "")
	installTook := time.Since(installed)
	servingBefore := certManagerServing(ctx, t, c.Client)
	upgradeTook := readmeUpgradeInPlace(ctx, t, e, 3, "e2e-readme-app")
	// cert-manager's serving certificate still verifies against the caBundle cainjector set (helm
	// upgrade renders no caBundle in this mode and must leave the live one alone), and is the same.
	if servingAfter := certManagerServing(ctx, t, c.Client); !bytes.Equal(servingAfter, servingBefore) {
		t.Errorf("Secret pvrescue-webhook-tls's certificate changed across an in-place helm upgrade")
	}
	rescuesStart := time.Now()
	installRescues(t, e)
	t.Logf("RESULT README install with Helm 3: installed (images built, pushed, pulled; workloads ready) in %s; helm upgrade --wait in place in %s; both rescues in %s; %s since the start of the test (cluster and S3 included)",
		installTook.Round(100*time.Millisecond), upgradeTook.Round(100*time.Millisecond), time.Since(rescuesStart).Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// certManagerServing checks that the webhook configuration's caBundle (cainjector's) verifies the
// serving certificate cert-manager keeps in Secret pvrescue-webhook-tls, and returns its tls.crt.
func certManagerServing(ctx context.Context, t *testing.T, cs kubernetes.Interface) []byte {
	t.Helper()
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "pvrescue-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := cs.CoreV1().Secrets(stack.Namespace).Get(ctx, "pvrescue-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret pvrescue-webhook-tls (cert-manager's): %v", err)
	}
	verifyServing(t, mwc.Webhooks[0].ClientConfig.CABundle, secret.Data["tls.crt"], "Secret pvrescue-webhook-tls")
	return secret.Data["tls.crt"]
}

// rescueEnv starts what the rescues need around an install: the S3 server and the test CSI
// plugin (DaemonSet, driver csi-s3).
func rescueEnv(ctx context.Context, t *testing.T, c *cluster.Cluster) *env {
	t.Helper()
	e := &env{c: c}
	var err error
	if e.s3, err = stack.StartS3(ctx, c, testenv.Binary(t, "versitygw", "versitygw")); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	t.Cleanup(func() { _ = e.s3.Stop() })
	if e.csi, err = stack.BuildCSI(ctx, c, filepath.Join(testenv.RepoRoot(), "e2e")); err != nil {
		t.Fatalf("build the test CSI plugin: %v", err)
	}
	if err := e.csi.Start(ctx); err != nil {
		t.Fatalf("start the test CSI plugin: %v", err)
	}
	return e
}

// installRescues runs the two rescues on the install, side by side (they share nothing but the
// agent): the suite's lost local disk and the demo's plugin restart (a lost FUSE mount).
func installRescues(t *testing.T, e *env) {
	t.Run("Rescues", func(t *testing.T) {
		t.Run("LostLocalDisk", func(t *testing.T) { t.Parallel(); lostLocalDisk(t, e) })
		t.Run("LostFUSEMount", func(t *testing.T) { t.Parallel(); demoPluginRestart(t, e) })
	})
}

// readmeInstall runs the README's install commands with the Helm CLI of that major (3 or 4;
// `make helm-clis` builds them), kubectl (`make kubectl`) and the kubectl plugin, on the cluster's
// pull registry, with appNS (created here, not opted in) for my-app and the node for my-node, and
// helmArgs added to the helm install line, after the commands before (other docs' steps, run first
// in the same shell; "" for none). It waits for the workloads, proves the node pulled the pushed
// images, checks the README's labels took effect, and returns the images installed.
func readmeInstall(ctx context.Context, t *testing.T, e *env, major int, appNS string, helmArgs []string, before string) stack.Images {
	t.Helper()
	c := e.c
	if c.PullRegistry == nil {
		t.Fatal("the cluster has no pull registry (cluster.Options.PullRegistry)")
	}
	repo := testenv.RepoRoot()
	version, err := stack.HelmCLIVersion(repo, major)
	if err != nil {
		t.Fatal(err)
	}
	helm := stack.HelmCLIPath(repo, version)
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("Helm %s CLI missing (%v): run `make helm-clis` (builds helm.sh/helm/v%d/cmd/helm@%s from the Go module proxy; make e2e does it)", version, err, major, version)
	}
	helmSays, err := stack.HelmVersionOf(ctx, helm)
	if err != nil || !strings.HasPrefix(helmSays, version) {
		t.Fatalf("%s version --short = %q (%v), want %s", helm, helmSays, err, version)
	}
	kubectl := filepath.Join(repo, "bin", "k8s", testenv.KubeVersion, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl missing (%v): run `make kubectl` (builds k8s.io/kubernetes/cmd/kubectl %s from the Go module proxy; make e2e does it)", err, testenv.KubeVersion)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	asWritten, err := stack.ReadmeInstallCommands(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	registry := c.PullRegistry.Host + "/pvrescue"
	// The test's registry speaks plain http: Helm reaches an oci:// chart there only with
	// --plain-http (the README says to add it for such a registry).
	helmArgs = append([]string{"--plain-http"}, helmArgs...)
	cmds, err := stack.ReadmeSubst{Registry: registry, Namespace: appNS, Node: c.Opts.NodeName, HelmArgs: helmArgs}.Apply(asWritten)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing of the registry is on the node before: the pull registry is new and empty, and
	// containerd holds none of its images.
	if imgs := containerdImages(t, c, c.PullRegistry.Host); len(imgs) > 0 {
		t.Fatalf("containerd already holds images of the pull registry before the install: %v", imgs)
	}
	framework.Namespace(t, c.Client, appNS, nil)

	t.Logf("running the README's install commands (README.md, between the install-commands markers) with Helm %s, kubectl %s, PLATFORMS=%s; replaced: %s → %s, %s → %s, %s → %s; added to helm install: %v",
		helmSays, testenv.KubeVersion, readmePlatforms, stack.ReadmeRegistry, registry, stack.ReadmeNamespace, appNS, stack.ReadmeNode, c.Opts.NodeName, helmArgs)
	t0 := time.Now()
	run := "readme-helm-" + version
	runEnv := []string{"PLATFORMS=" + readmePlatforms}
	if before != "" {
		// mktemp in those commands (operations.md's existingSecret keys) writes into the run's
		// work dir, not the machine's /tmp.
		tmp := filepath.Join(c.Opts.WorkDir, run, "tmp")
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			t.Fatal(err)
		}
		runEnv = append(runEnv, "TMPDIR="+tmp)
	}
	// No kubectl plugin is put on PATH: the README's own step (make kubectl-plugin) installs it,
	// into PLUGIN_DIR, which RunCommands points at the head of its PATH.
	out, err := stack.RunCommands(ctx, c, stack.CommandsRun{
		Repo: repo, Commands: before + cmds, Name: run,
		CLIs: stack.CLIs{Helm: helm, Kubectl: kubectl},
		Env:  runEnv,
	})
	t.Logf("README install commands (Helm %s; %d lines of other docs' commands first), %s:\n%s", version, strings.Count(before, "\n"), time.Since(t0).Round(100*time.Millisecond), out)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(c.Opts.WorkDir, run, "bin", "kubectl-pvrescue")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the README's make kubectl-plugin did not install the plugin into PLUGIN_DIR: %v", err)
	}
	pushed := stack.ParsePushed(out)
	if p, ok := pushed["pvrescue"]; !ok || p.Repo != registry+"/pvrescue" {
		t.Fatalf("make push did not report the chart pushed to oci://%s/pvrescue: %+v", registry, pushed)
	}
	for _, name := range []string{"pvrescue-webhook", "pvrescue-agent", "pvrescue-helper"} {
		if p, ok := pushed[name]; !ok || p.Repo != registry+"/"+name || p.Digest == "" {
			t.Fatalf("make push did not report %s pushed to %s: %+v", name, registry, pushed)
		}
	}
	if err := stack.WaitWorkloads(ctx, c); err != nil {
		t.Fatalf("after the README's install: %v", err)
	}
	t.Logf("workloads ready %s after the README's commands began", time.Since(t0).Round(100*time.Millisecond))
	provePulled(ctx, t, c, pushed)

	// The README's labels took effect, and the opted-in namespace's pods are mutated (once the
	// webhook's CA is in place: cert-manager's cainjector or the bootstrap Job put it there).
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, appNS, metav1.GetOptions{})
	if err != nil || ns.Labels[contract.LabelInject] != contract.LabelInjectEnabled {
		t.Errorf("namespace %s not labelled %s=%s by the README's command: %v %v", appNS, contract.LabelInject, contract.LabelInjectEnabled, ns.GetLabels(), err)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.Opts.NodeName, metav1.GetOptions{})
	if label := config.Default().LocalBlock.NodeLabel; err != nil || node.Labels[label] != contract.LabelFakeDevicesEnabled {
		t.Errorf("node %s not labelled %s=%s by the README's command: %v", c.Opts.NodeName, label, contract.LabelFakeDevicesEnabled, err)
	}
	waitMutated(ctx, t, e, appNS, 2*time.Minute)
	return stack.Images{Webhook: pushed["pvrescue-webhook"].Ref(), Agent: pushed["pvrescue-agent"].Ref()}
}

// provePulled checks that the webhook's and the agent's containers run the images `make push`
// pushed, pulled by the node: each container's image ID is the pushed index digest in the pull
// registry, and the registry served that index and blobs to containerd (its User-Agent).
func provePulled(ctx context.Context, t *testing.T, c *cluster.Cluster, pushed map[string]stack.PushedImage) {
	t.Helper()
	var proof []string
	for _, w := range []struct{ image, app string }{{"pvrescue-webhook", stack.WebhookDep}, {"pvrescue-agent", stack.AgentDS}} {
		p := pushed[w.image]
		pods, err := c.Client.CoreV1().Pods(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + w.app})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		for _, pod := range pods.Items {
			for _, st := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
				if !strings.HasPrefix(st.Image, p.Repo+":") {
					t.Errorf("pod %s container %s runs %s, want %s", pod.Name, st.Name, st.Image, p.Ref())
					continue
				}
				n++
				if st.ImageID != p.ByDigest() {
					t.Errorf("pod %s container %s: image ID %q, want the pushed %s", pod.Name, st.Name, st.ImageID, p.ByDigest())
				}
			}
		}
		if n == 0 {
			t.Errorf("no container of %s runs %s", w.app, p.Ref())
		}
		repoPath := strings.TrimPrefix(p.Repo, c.PullRegistry.Host+"/")
		manifests, blobs := c.PullRegistry.Fetched(repoPath, "containerd/")
		if !slices.Contains(manifests, p.Digest) || len(blobs) == 0 {
			t.Errorf("the pull registry did not serve %s's index %s and blobs to containerd: manifests %v, %d blobs; every request: %+v",
				w.image, p.Digest, manifests, len(blobs), c.PullRegistry.Requests())
		}
		proof = append(proof, fmt.Sprintf("%s: %d containers with image ID %s; containerd fetched manifests %v and %d blobs", w.image, n, p.ByDigest(), manifests, len(blobs)))
	}
	t.Logf("RESULT pulled, not imported (containerd held no image of %s before):\n  %s\n  containerd now holds: %v",
		c.PullRegistry.Host, strings.Join(proof, "\n  "), containerdImages(t, c, c.PullRegistry.Host))
}

// containerdImages lists the image references containerd (CRI namespace k8s.io) holds that
// start with prefix.
func containerdImages(t *testing.T, c *cluster.Cluster, prefix string) []string {
	t.Helper()
	ctr := testenv.RequireCommand(t, "ctr", "apt-get install containerd")
	out, err := exec.Command(ctr, "--address", c.ContainerdSocket, "-n", "k8s.io", "images", "ls", "-q").Output()
	if err != nil {
		t.Fatalf("ctr images ls: %v", err)
	}
	var refs []string
	for _, r := range strings.Fields(string(out)) {
		if strings.HasPrefix(r, prefix) {
			refs = append(refs, r)
		}
	}
	return refs
}
