package stack

import (
	"testing"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/manifests"
)

// TestRender renders the real manifests/ with the e2e overlay: only image references and the
// helper image change.
func TestRender(t *testing.T) {
	img := Images{Webhook: "127.0.0.1:5000/pvrescue/pvrescue-webhook:e2e", Agent: "127.0.0.1:5000/pvrescue/pvrescue-agent:e2e"}
	objs, err := Render(manifests.FS, img)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	seen := map[string]bool{}
	for _, o := range objs {
		seen[o.GetKind()+"/"+o.GetName()] = true
		switch o.GetKind() {
		case "Deployment", "DaemonSet":
			cs, _, _ := unstructuredContainers(o)
			for _, c := range cs {
				if c != img.Webhook && c != img.Agent {
					t.Errorf("%s/%s: image %q is not a local image", o.GetKind(), o.GetName(), c)
				}
			}
		case "ConfigMap":
			data, _, _ := unstructuredString(o, "data", "config.yaml")
			cfg, err := config.Parse([]byte(data))
			if err != nil {
				t.Fatalf("rendered config does not parse: %v", err)
			}
			if cfg.Helper.Image != img.Webhook {
				t.Errorf("helper.image = %q, want %q", cfg.Helper.Image, img.Webhook)
			}
		}
	}
	for _, want := range []string{"Deployment/pvrescue-webhook", "DaemonSet/pvrescue-agent", "Namespace/pvrescue-system"} {
		if !seen[want] {
			t.Errorf("rendered manifests lack %s (have %v)", want, seen)
		}
	}
}

func TestSplitRef(t *testing.T) {
	for ref, want := range map[string][2]string{
		"127.0.0.1:5000/a/b:e2e": {"127.0.0.1:5000/a/b", "e2e"},
		"127.0.0.1:5000/a/b":     {"127.0.0.1:5000/a/b", "latest"},
	} {
		n, tag := splitRef(ref)
		if n != want[0] || tag != want[1] {
			t.Errorf("splitRef(%q) = %q, %q; want %q", ref, n, tag, want)
		}
	}
}
