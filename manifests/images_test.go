package manifests_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/manifests"
)

var (
	copyFinal  = regexp.MustCompile(`(?m)^COPY --from=build \S+ (/\S+)$`)
	entrypoint = regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"\]$`)
	goBuild    = regexp.MustCompile(`CGO_ENABLED=0`)
	fromFinal  = regexp.MustCompile(`(?m)^FROM (\S+)$`)
)

type dockerfile struct {
	files      []string
	entrypoint string
	base       string
	static     bool
}

func readDockerfile(t *testing.T, name string) dockerfile {
	t.Helper()
	data, err := os.ReadFile("../" + name)
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	for _, m := range copyFinal.FindAllSubmatch(data, -1) {
		d.files = append(d.files, string(m[1]))
	}
	if m := entrypoint.FindSubmatch(data); m != nil {
		d.entrypoint = string(m[1])
	}
	if m := fromFinal.FindAllSubmatch(data, -1); len(m) > 0 {
		d.base = string(m[len(m)-1][1])
	}
	d.static = goBuild.Match(data)
	return d
}

// The images must hold what the manifests run and what the webhook injects.
func TestDockerfilesMatchManifests(t *testing.T) {
	web := readDockerfile(t, "Dockerfile.webhook")
	if !slices.Contains(web.files, "/pvrescue-webhook") || !slices.Contains(web.files, contract.HelperBinaryInImage) {
		t.Errorf("Dockerfile.webhook copies %v, want /pvrescue-webhook and the helper at %s", web.files, contract.HelperBinaryInImage)
	}
	if !web.static || web.base != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("webhook image must be a static build on distroless static nonroot, got base %q static %v", web.base, web.static)
	}
	agent := readDockerfile(t, "Dockerfile.agent")
	if !slices.Contains(agent.files, "/pvrescue-agent") || !agent.static {
		t.Errorf("Dockerfile.agent copies %v (static %v), want a static /pvrescue-agent", agent.files, agent.static)
	}

	var d appsv1.Deployment
	if err := manifests.Find("webhook.yaml", appsv1.SchemeGroupVersion.WithKind("Deployment"), "pvrescue-webhook", &d); err != nil {
		t.Fatal(err)
	}
	if got := d.Spec.Template.Spec.Containers[0].Command; len(got) != 1 || got[0] != web.entrypoint {
		t.Errorf("webhook Deployment runs %v, image entrypoint is %q", got, web.entrypoint)
	}
	var ds appsv1.DaemonSet
	if err := manifests.Find("agent.yaml", appsv1.SchemeGroupVersion.WithKind("DaemonSet"), "pvrescue-agent", &ds); err != nil {
		t.Fatal(err)
	}
	if got := ds.Spec.Template.Spec.Containers[0].Command; len(got) != 1 || got[0] != agent.entrypoint {
		t.Errorf("agent DaemonSet runs %v, image entrypoint is %q", got, agent.entrypoint)
	}
	// The helper is injected from the webhook image: same repository.
	data, err := manifests.FS.ReadFile("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Helper.Image != d.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("helper.image %q differs from the webhook image %q (the helper ships in the webhook image)", cfg.Helper.Image, d.Spec.Template.Spec.Containers[0].Image)
	}
	// A config that leaves helper.image out gets the same release tag, never a drifting :latest.
	if def := config.Default().Helper.Image; def != cfg.Helper.Image {
		t.Errorf("internal/config's default helper.image %q differs from manifests/config.yaml's %q", def, cfg.Helper.Image)
	}
}
