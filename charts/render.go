// Package charts embeds the Helm chart in charts/pvrescue and renders it with Helm's Go SDK, so the
// unit tests (and the e2e suite) need no helm binary.
package charts

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// FS holds the chart directory pvrescue/.
//
//go:embed all:pvrescue
var FS embed.FS

// ChartDir is the chart's directory inside FS (and beside this file).
const ChartDir = "pvrescue"

// DefaultNamespace is the namespace manifests/ installs into; the chart renders into the release's.
const DefaultNamespace = "pvrescue-system"

// AnnotationHook marks a Helm hook object (rendered, but applied by Helm around the release).
const AnnotationHook = "helm.sh/hook"

// Release says which install the chart is rendered for.
type Release struct {
	Name      string
	Namespace string
	// IsUpgrade renders as `helm upgrade` does (revision > 1); otherwise as `helm install`.
	IsUpgrade bool
}

// DefaultRelease is the release the docs install: `helm install pvrescue charts/pvrescue -n pvrescue-system`.
func DefaultRelease() Release { return Release{Name: "pvrescue", Namespace: DefaultNamespace} }

// Chart is a loaded Helm chart (apiVersion v2).
type Chart = chartv2.Chart

// Load reads the embedded chart.
func Load() (*chartv2.Chart, error) {
	var files []*archive.BufferedFile
	err := fs.WalkDir(FS, ChartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := FS.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: strings.TrimPrefix(p, ChartDir+"/"), Data: b})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read embedded chart: %w", err)
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	return ch, nil
}

// RenderFiles renders the chart with values over its defaults, as `helm template` does, and returns
// each template's output by file name (empty outputs dropped; partials never appear).
func RenderFiles(ch *chartv2.Chart, values map[string]any, rel Release) (map[string]string, error) {
	if values == nil {
		values = map[string]any{}
	}
	rev := 1
	if rel.IsUpgrade {
		rev = 2
	}
	vals, err := util.ToRenderValues(ch, values, common.ReleaseOptions{
		Name: rel.Name, Namespace: rel.Namespace, Revision: rev, IsInstall: !rel.IsUpgrade, IsUpgrade: rel.IsUpgrade,
	}, common.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render chart: %w", err)
	}
	files := map[string]string{}
	for name, body := range out {
		if path.Ext(name) != ".yaml" || strings.TrimSpace(stripComments(body)) == "" {
			continue
		}
		files[name] = body
	}
	return files, nil
}

// RenderNotes renders templates/NOTES.txt, what `helm install` prints after the install.
func RenderNotes(ch *chartv2.Chart, values map[string]any, rel Release) (string, error) {
	if values == nil {
		values = map[string]any{}
	}
	vals, err := util.ToRenderValues(ch, values, common.ReleaseOptions{
		Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: !rel.IsUpgrade, IsUpgrade: rel.IsUpgrade,
	}, common.DefaultCapabilities)
	if err != nil {
		return "", fmt.Errorf("values: %w", err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return "", fmt.Errorf("render chart: %w", err)
	}
	notes, ok := out[path.Join(ch.Name(), "templates", "NOTES.txt")]
	if !ok {
		return "", errors.New("chart has no templates/NOTES.txt")
	}
	return notes, nil
}

// Render renders the chart and decodes every object, in the order of the template file names.
func Render(ch *chartv2.Chart, values map[string]any, rel Release) ([]*unstructured.Unstructured, error) {
	files, err := RenderFiles(ch, values, rel)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, n := range names {
		o, err := SplitYAML([]byte(files[n]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

// SplitYAML decodes a multi-document YAML stream into objects, dropping empty documents.
func SplitYAML(b []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(line); t == "" || t == "---" || strings.HasPrefix(t, "#") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}
