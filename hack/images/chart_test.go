package main

import (
	"bytes"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/registry"
)

func TestChartVersion(t *testing.T) {
	for tag, want := range map[string]string{
		"v0.1.0":                  "v0.1.0",
		"v0.1.0-3-gabcdef0-dirty": "v0.1.0-3-gabcdef0-dirty",
		"1.2.3":                   "1.2.3",
		"6663e3c":                 "0.0.0-g6663e3c",
		"0123456-dirty":           "0.0.0-g0123456-dirty",
	} {
		if got := ChartVersion(tag); got != want {
			t.Errorf("ChartVersion(%q) = %q, want %q", tag, got, want)
		}
	}
}

// checkPushedChart pulls the chart `images push` pushed to reg back with Helm's own registry
// client, as `helm install oci://…` does: version from the image tag, appVersion the tag, the
// images' repositories in reg, and the install line printed.
func checkPushedChart(t *testing.T, reg, tag, out string) {
	t.Helper()
	c, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(new(bytes.Buffer)))
	if err != nil {
		t.Fatal(err)
	}
	version := ChartVersion(tag)
	res, err := c.Pull(reg + "/pvrescue:" + version)
	if err != nil {
		t.Fatalf("pull the pushed chart: %v", err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != version || ch.Metadata.AppVersion != tag {
		t.Errorf("pushed chart version %q appVersion %q, want %q %q", ch.Metadata.Version, ch.Metadata.AppVersion, version, tag)
	}
	for _, img := range []string{"webhook", "agent"} {
		repo := ch.Values[img].(map[string]any)["image"].(map[string]any)["repository"]
		if repo != reg+"/pvrescue-"+img {
			t.Errorf("pushed chart's %s.image.repository = %v, want %s/pvrescue-%s", img, repo, reg, img)
		}
	}
	if want := "install: helm install pvrescue oci://" + reg + "/pvrescue --version " + version; !strings.Contains(out, want) {
		t.Errorf("push output lacks %q:\n%s", want, out)
	}
}
