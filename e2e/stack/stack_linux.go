//go:build linux

package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pvrescue/pvrescue/certs"
	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/images"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/manifests"
)

// S3 is the real S3 server of the suite (versitygw, posix backend: each directory is a bucket).
type S3 struct {
	testenv.S3Config
	Endpoint string // http://NodeIP:port, reachable from the host and from pods
	bin      string
	c        *cluster.Cluster
	proc     *cluster.Process
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartS3 starts versitygw on the node address. Keys go through the environment, never argv.
func StartS3(ctx context.Context, c *cluster.Cluster, versitygw string) (*S3, error) {
	port, err := testenv.PickPort(c.NodeIP)
	if err != nil {
		return nil, err
	}
	cfg := testenv.S3Config{
		Addr:      testenv.Addr(c.NodeIP, port),
		Dir:       filepath.Join(c.Opts.WorkDir, "s3"),
		AccessKey: "E2E" + strings.ToUpper(randomHex(8)),
		SecretKey: randomHex(20),
	}
	s := &S3{S3Config: cfg, Endpoint: cfg.Endpoint(), bin: versitygw, c: c}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	return s, s.Start(ctx)
}

// Start (re)starts the server on its address, with its buckets and keys, and waits until it listens.
func (s *S3) Start(ctx context.Context) error {
	var err error
	s.proc, err = cluster.StartProcess(s.c.Opts.LogDir(), "versitygw", s.bin, s.Args(), s.Env())
	if err != nil {
		return err
	}
	return s.c.Wait(ctx, s.c.Opts.Timeout, "versitygw to listen", func(ctx context.Context) (bool, error) {
		if err := s.proc.Exited(); err != nil {
			return false, testenv.Abort(err)
		}
		return testenv.Listening(ctx, s.Addr)
	})
}

// Stop kills the server (an S3 outage: every s3fs mount of it fails until Start).
func (s *S3) Stop() error {
	if s.proc == nil {
		return nil
	}
	return s.proc.Kill()
}

// BuildAndPushImages builds the pvrescue binaries and the webhook image from them, the agent image
// with `make images`' builder (BuildAgentImage), and pushes both to the cluster's registry. The webhook image carries the injected helper and runs as
// images.HelperUser, as the published image does (distroless nonroot, Dockerfile.webhook's USER):
// a helper that only works as root would fail here as it would in the field.
func BuildAndPushImages(ctx context.Context, c *cluster.Cluster, repo string) (Images, error) {
	var img Images
	bins, err := BuildBinaries(ctx, repo, filepath.Join(c.Opts.WorkDir, "bin"))
	if err != nil {
		return img, err
	}
	wf, wEntry := WebhookImage(bins)
	wimg, err := images.BuildAs(wf, wEntry, nil, images.HelperUser)
	if err != nil {
		return img, err
	}
	aimg, err := BuildAgentImage(ctx, repo, c.Opts.WorkDir)
	if err != nil {
		return img, err
	}
	if img.Webhook, err = c.Registry.Push(ctx, "pvrescue/pvrescue-webhook", "e2e", wimg); err != nil {
		return img, err
	}
	if img.Agent, err = c.Registry.Push(ctx, "pvrescue/pvrescue-agent", "e2e", aimg); err != nil {
		return img, err
	}
	return img, nil
}

// Installed describes pvrescue as installed on the cluster.
type Installed struct {
	Images  Images
	Objects []*unstructured.Unstructured
	// CertManager runs when InstallOptions.CertManager was set; stop it at the end.
	CertManager *CertManager
	// Deviations lists, for the narration, every way the install differs from `kubectl apply -k manifests/`.
	Deviations []string
}

// FieldOwner of everything the suite applies.
const FieldOwner = "pvrescue-e2e"

// InstallOptions chooses how the webhook certificate is made.
type InstallOptions struct {
	// CertManager runs cert-manager's controllers in-process and applies manifests/ whole; without
	// it, the cert-manager objects are left out and package certs bootstraps the certificate.
	CertManager bool
	// E2EDir is the e2e module's directory (to find cert-manager's CRDs in the module cache).
	E2EDir string
}

// Install builds the pvrescue binaries and images, pushes them to the cluster's registry, applies
// manifests/ with the e2e overlay, and waits for the webhook Deployment and agent DaemonSet.
func Install(ctx context.Context, c *cluster.Cluster, repo string, opts InstallOptions) (*Installed, error) {
	in := &Installed{}
	var err error
	if in.Images, err = BuildAndPushImages(ctx, c, repo); err != nil {
		return nil, err
	}
	objs, err := Render(manifests.FS, in.Images)
	if err != nil {
		return nil, err
	}
	in.Deviations = append(in.Deviations,
		"images: "+PublishedWebhook+" and "+PublishedAgent+" → the local registry "+c.Registry.Host+" (no pulls from the internet here)",
		"config.yaml helper.image → the same local webhook image",
		"agent image: `make images`' builder for the node's platform only (the agent with Debian's s3fs, fuse3 and libraries as hack/images/debian.lock pins them), not Dockerfile.agent's engine build",
	)
	kept, certObjs := splitCertManager(objs)
	if opts.CertManager {
		crds, err := CertManagerCRDDir(opts.E2EDir)
		if err != nil {
			return nil, err
		}
		if in.CertManager, err = StartCertManager(ctx, c.Config, CertManagerOptions{Kubeconfig: c.Kubeconfig, CRDDir: crds, Log: logr.Discard()}); err != nil {
			return nil, fmt.Errorf("start cert-manager: %w", err)
		}
		in.Deviations = append(in.Deviations, "cert-manager v1.21.2: its own controllers and cainjector run inside the test process instead of its Deployments (no image pulls here); same CRDs, same Issuers/Certificates from manifests/")
		kept, certObjs = objs, nil
	}
	if len(certObjs) > 0 {
		in.Deviations = append(in.Deviations, fmt.Sprintf(
			"cert-manager objects (%d: Issuers/Certificates) not applied; the serving certificate and caBundle come from `pvrescue-webhook certs bootstrap` logic (package certs) run in-process", len(certObjs)))
	}
	in.Objects = kept
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		return nil, err
	}
	for _, o := range kept {
		if err := applyObject(ctx, cl, o); err != nil {
			return nil, err
		}
	}
	if len(certObjs) > 0 {
		if _, err := certs.NewBootstrapper(c.Client).Bootstrap(ctx, certs.NewOptions()); err != nil {
			return nil, fmt.Errorf("bootstrap the webhook certificate: %w", err)
		}
	}
	if err := EnableFakeDevices(ctx, c); err != nil {
		return nil, err
	}
	if err := WaitWorkloads(ctx, c); err != nil {
		return in, err
	}
	return in, nil
}

// EnableFakeDevices labels the node so the agent creates fake devices there (nodes opt in).
func EnableFakeDevices(ctx context.Context, c *cluster.Cluster) error {
	label := config.Default().LocalBlock.NodeLabel
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, label, contract.LabelFakeDevicesEnabled)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, c.Opts.NodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label node %s %s: %w", c.Opts.NodeName, label, err)
	}
	return nil
}

func applyObject(ctx context.Context, cl client.Client, o *unstructured.Unstructured) error {
	o = o.DeepCopy()
	o.SetManagedFields(nil)
	//nolint:staticcheck // server-side apply of unstructured objects rendered by kustomize.
	if err := cl.Patch(ctx, o, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

func splitCertManager(objs []*unstructured.Unstructured) (kept, cm []*unstructured.Unstructured) {
	for _, o := range objs {
		if strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/") {
			cm = append(cm, o)
		} else {
			kept = append(kept, o)
		}
	}
	return kept, cm
}

// Names of the installed workloads.
const (
	Namespace  = "pvrescue-system"
	WebhookDep = "pvrescue-webhook"
	AgentDS    = "pvrescue-agent"
)

// WaitWorkloads waits until every webhook replica and the agent pod are ready, and the webhook
// Service has ready endpoints (what the apiserver dials with aggregator routing).
func WaitWorkloads(ctx context.Context, c *cluster.Cluster) error {
	if err := waitWebhook(ctx, c, "to be available", func(d *appsv1.Deployment, want int32) error {
		if d.Status.ReadyReplicas >= want && d.Status.UpdatedReplicas >= want {
			return nil
		}
		return fmt.Errorf("%d/%d ready; pods: %s", d.Status.ReadyReplicas, want, podSummary(ctx, c, "app.kubernetes.io/name="+WebhookDep))
	}); err != nil {
		return err
	}
	return c.Wait(ctx, 3*time.Minute, "DaemonSet "+AgentDS+" to be ready", func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().DaemonSets(Namespace).Get(ctx, AgentDS, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if dsReady(d) {
			return true, nil
		}
		return false, fmt.Errorf("%d/%d ready; pods: %s", d.Status.NumberReady, d.Status.DesiredNumberScheduled, podSummary(ctx, c, "app.kubernetes.io/name="+AgentDS))
	})
}

// waitWebhook waits until done (given the Deployment and its wanted replicas) returns nil; its
// last error says why not yet.
func waitWebhook(ctx context.Context, c *cluster.Cluster, what string, done func(d *appsv1.Deployment, want int32) error) error {
	return c.Wait(ctx, 3*time.Minute, "Deployment "+WebhookDep+" "+what, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(Namespace).Get(ctx, WebhookDep, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if err := done(d, want); err != nil {
			return false, err
		}
		return true, nil
	})
}

func dsReady(d *appsv1.DaemonSet) bool {
	return d.Status.DesiredNumberScheduled > 0 && d.Status.NumberReady == d.Status.DesiredNumberScheduled && d.Status.UpdatedNumberScheduled == d.Status.DesiredNumberScheduled
}

// podSummary is "name phase [container state…]" for pods matching selector, for wait errors.
func podSummary(ctx context.Context, c *cluster.Cluster, selector string) string {
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range pods.Items {
		s := p.Name + " " + string(p.Status.Phase)
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			switch {
			case cs.State.Waiting != nil:
				s += fmt.Sprintf(" [%s: %s %s]", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
			case cs.State.Terminated != nil:
				s += fmt.Sprintf(" [%s: exited %d %s]", cs.Name, cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
			case cs.State.Running != nil && !cs.Ready:
				s += fmt.Sprintf(" [%s: running, not ready, restarts %d]", cs.Name, cs.RestartCount)
			}
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
