package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
	"sigs.k8s.io/yaml"
)

// DefaultChart is the chart `make push` publishes beside the images.
const DefaultChart = "charts/pvrescue"

// publishedImages is the registry path the chart's values name by default (values.yaml); the
// pushed chart names the images pushed beside it instead.
const publishedImages = "ghcr.io/pvrescue/"

var semverTag = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// ChartVersion is the chart version for the image tag: the tag itself when it is SemVer (a
// release's git tag, or `git describe` after one: v0.1.0, v0.1.0-3-gabc1234-dirty), else
// 0.0.0-g<tag> (a checkout without tags describes itself by a bare hash, which is not SemVer).
func ChartVersion(tag string) string {
	if semverTag.MatchString(tag) {
		return tag
	}
	return "0.0.0-g" + tag
}

// PackageChart loads the chart in dir and returns its archive as published next to the images of
// tag in reg (host[:port]/path): version ChartVersion(tag), appVersion tag (the images' default
// tag), the images' default repositories in reg. Its files carry a fixed time.
func PackageChart(dir, reg, tag string) ([]byte, *chartv2.Chart, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = ChartVersion(tag), tag
	repo := strings.TrimSuffix(reg, "/") + "/"
	var replaced bool
	for _, f := range ch.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if !bytes.Contains(f.Data, []byte(publishedImages)) {
			return nil, nil, fmt.Errorf("%s/values.yaml no longer names %s…: cannot point the pushed chart at %s", dir, publishedImages, reg)
		}
		f.Data = bytes.ReplaceAll(f.Data, []byte(publishedImages), []byte(repo))
		vals := map[string]any{}
		if err := yaml.Unmarshal(f.Data, &vals); err != nil {
			return nil, nil, err
		}
		ch.Values, replaced = vals, true
	}
	if !replaced {
		return nil, nil, fmt.Errorf("%s has no values.yaml", dir)
	}
	if err := ch.Validate(); err != nil {
		return nil, nil, fmt.Errorf("chart %s at version %s: %w", dir, ch.Metadata.Version, err)
	}
	ch.StampModTimes(epoch)
	tmp, err := os.MkdirTemp("", "pvrescue-chart-")
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	file, err := chartutil.Save(ch, tmp)
	if err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(filepath.Clean(file))
	return data, ch, err
}

// PushChart pushes the chart archive to oci://reg/<name>:<version> (Helm's layout: helm install
// oci://reg/<name> --version <version>) and returns the reference with its digest. Plain http as
// for the images: localhost and private addresses, or insecure. Credentials: `helm registry login`.
func PushChart(_ context.Context, data []byte, ch *chartv2.Chart, reg string, insecure bool) (string, error) {
	ref := strings.TrimSuffix(reg, "/") + "/" + ch.Metadata.Name + ":" + strings.ReplaceAll(ch.Metadata.Version, "+", "_")
	host, _, _ := strings.Cut(reg, "/")
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.NewRegistry(host, opts...)
	if err != nil {
		return "", err
	}
	copts := []registry.ClientOption{registry.ClientOptWriter(new(bytes.Buffer))}
	if r.Scheme() == "http" {
		copts = append(copts, registry.ClientOptPlainHTTP())
	}
	c, err := registry.NewClient(copts...)
	if err != nil {
		return "", err
	}
	res, err := c.Push(data, ref, registry.PushOptStrictMode(true))
	if err != nil {
		return "", fmt.Errorf("push chart %s: %w", ref, err)
	}
	return ref + "@" + res.Manifest.Digest, nil
}
