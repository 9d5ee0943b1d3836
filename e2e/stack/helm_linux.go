//go:build linux

package stack

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/pvrescue/pvrescue/charts"
	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/manifests"
)

// ReleaseName of the chart install the suite makes.
const ReleaseName = "pvrescue"

// Helm installs and upgrades pvrescue through charts/pvrescue with Helm's own Go SDK (the same code
// as the helm CLI: server-side apply, hooks, release records in Secrets).
type Helm struct {
	c      *cluster.Cluster
	cfg    *action.Configuration
	chart  *charts.Chart
	Images Images
	// Deviations from `helm install pvrescue charts/pvrescue -n pvrescue-system`, for the narration.
	Deviations []string
}

// HelmValues are the values every chart install of the suite needs on this machine: the images
// from the local registry (nothing can be pulled here).
func HelmValues(img Images) map[string]any {
	wName, wTag := splitRef(img.Webhook)
	aName, aTag := splitRef(img.Agent)
	return map[string]any{
		"namespace": map[string]any{"create": false},
		"webhook":   map[string]any{"image": map[string]any{"repository": wName, "tag": wTag}},
		"agent":     map[string]any{"image": map[string]any{"repository": aName, "tag": aTag}},
	}
}

// NewHelm builds the images and prepares a Helm client for the cluster. It creates the release
// namespace from manifests/namespace.yaml (Helm keeps its release record there, so it must exist).
func NewHelm(ctx context.Context, c *cluster.Cluster, repo string) (*Helm, error) {
	h := &Helm{c: c}
	var err error
	if h.Images, err = BuildAndPushImages(ctx, c, repo); err != nil {
		return nil, err
	}
	if h.chart, err = charts.Load(); err != nil {
		return nil, err
	}
	var ns corev1.Namespace
	if err := manifests.Find("namespace.yaml", corev1.SchemeGroupVersion.WithKind("Namespace"), Namespace, &ns); err != nil {
		return nil, err
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &ns, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &c.Kubeconfig
	ns2 := Namespace
	flags.Namespace = &ns2
	h.cfg = action.NewConfiguration()
	if err := h.cfg.Init(flags, Namespace, "secret"); err != nil {
		return nil, fmt.Errorf("helm configuration: %w", err)
	}
	h.Deviations = append(h.Deviations,
		"images: webhook.image and agent.image point at the local registry "+c.Registry.Host+" (no pulls from the internet here)",
		"namespace: created from manifests/namespace.yaml before the install, namespace.create=false",
		"helm: the Helm v4 Go SDK (helm.sh/helm/v4/pkg/action, what the helm CLI runs) instead of the helm binary",
	)
	return h, nil
}

// merge returns base with over laid on top (maps merged recursively).
func merge(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = merge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// Install runs `helm install` with HelmValues plus values, waits for the hooks (the certificate
// bootstrap Job in tls.mode=bootstrap), labels the node for fake devices and waits for both
// workloads.
func (h *Helm) Install(ctx context.Context, values map[string]any) error {
	in := action.NewInstall(h.cfg)
	in.ReleaseName = ReleaseName
	in.Namespace = Namespace
	in.WaitStrategy = kube.HookOnlyStrategy
	in.Timeout = 4 * time.Minute
	if _, err := in.RunWithContext(ctx, h.chart, merge(HelmValues(h.Images), values)); err != nil {
		return fmt.Errorf("helm install: %w", err)
	}
	if err := EnableFakeDevices(ctx, h.c); err != nil {
		return err
	}
	return WaitWorkloads(ctx, h.c)
}

// Upgrade runs `helm upgrade` in place with HelmValues plus values (not reusing earlier values),
// waits for the hooks and then for both workloads, and for the webhook's roll to complete.
func (h *Helm) Upgrade(ctx context.Context, values map[string]any) error {
	up := action.NewUpgrade(h.cfg)
	up.Namespace = Namespace
	up.WaitStrategy = kube.HookOnlyStrategy
	up.Timeout = 4 * time.Minute
	if _, err := up.RunWithContext(ctx, ReleaseName, h.chart, merge(HelmValues(h.Images), values)); err != nil {
		return fmt.Errorf("helm upgrade: %w", err)
	}
	if err := WaitWorkloads(ctx, h.c); err != nil {
		return err
	}
	return WaitWebhookRolledOut(ctx, h.c)
}

// WaitWebhookRolledOut waits until the webhook Deployment's roll is complete: its latest spec
// observed, and every replica updated and available with no old replica left.
func WaitWebhookRolledOut(ctx context.Context, c *cluster.Cluster) error {
	return waitWebhook(ctx, c, "to finish rolling", func(d *appsv1.Deployment, want int32) error {
		st := d.Status
		if st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.AvailableReplicas == want && st.Replicas == want {
			return nil
		}
		return fmt.Errorf("generation %d/%d, %d updated, %d available, %d in all, want %d", st.ObservedGeneration, d.Generation,
			st.UpdatedReplicas, st.AvailableReplicas, st.Replicas, want)
	})
}
