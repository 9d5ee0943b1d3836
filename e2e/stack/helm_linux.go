//go:build linux

package stack

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/pvrescue/pvrescue/charts"
	"github.com/pvrescue/pvrescue/e2e/cluster"
)

// ReleaseName of the chart install the suite makes.
const ReleaseName = "pvrescue"

// Helm upgrades a pvrescue release with Helm's own Go SDK (the same code as the helm CLI:
// server-side apply, hooks, release records in Secrets).
type Helm struct {
	c      *cluster.Cluster
	cfg    *action.Configuration
	chart  *charts.Chart
	Images Images
}

// HelmValues are the values every chart install of the suite needs on this machine: the
// namespace made beforehand (from manifests/namespace.yaml, as the README says) and the images
// from a registry on the node (nothing can be pulled from the internet here).
func HelmValues(img Images) map[string]any {
	wName, wTag := splitRef(img.Webhook)
	aName, aTag := splitRef(img.Agent)
	return map[string]any{
		"namespace": map[string]any{"create": false},
		"webhook":   map[string]any{"image": map[string]any{"repository": wName, "tag": wTag}},
		"agent":     map[string]any{"image": map[string]any{"repository": aName, "tag": aTag}},
	}
}

// AttachHelm prepares a Helm SDK client for the release ReleaseName already installed in
// Namespace (by the helm CLI, from the README's commands), which runs img.
func AttachHelm(c *cluster.Cluster, img Images) (*Helm, error) {
	h := &Helm{c: c, Images: img}
	// Helm names its field manager after the program (os.Args[0]); the CLI that installed the
	// release is "helm", this test binary is not: server-side apply would then refuse the upgrade
	// as a conflict over every field the install set. Upgrade as the CLI does.
	kube.ManagedFieldsManager = "helm"
	var err error
	if h.chart, err = charts.Load(); err != nil {
		return nil, err
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &c.Kubeconfig
	ns := Namespace
	flags.Namespace = &ns
	h.cfg = action.NewConfiguration()
	if err := h.cfg.Init(flags, Namespace, "secret"); err != nil {
		return nil, fmt.Errorf("helm configuration: %w", err)
	}
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
