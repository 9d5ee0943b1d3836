package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ErrNotBuilt is returned when a layout lacks the image tagged with the version to push.
var ErrNotBuilt = errors.New("image not built")

// Push copies each image's index tagged o.Version from o.In to o.Registry/<name>:o.Version, with
// the credentials of the Docker config (~/.docker/config.json) when the registry asks for them,
// then the chart o.Chart as oci://o.Registry/<chart>:ChartVersion(o.Version), its appVersion
// o.Version and its images' repositories in o.Registry (credentials: `helm registry login`).
// It returns the references pushed.
func Push(ctx context.Context, o *PushOptions) ([]string, error) {
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	var pushed []string
	for _, s := range Specs("") {
		idx, err := readLayout(filepath.Join(o.In, s.Name), o.Version)
		if err != nil {
			return pushed, fmt.Errorf("%s: %w", s.Name, err)
		}
		r := strings.TrimSuffix(o.Registry, "/") + "/" + s.Name + ":" + o.Version
		ref, err := name.NewTag(r, opts...)
		if err != nil {
			return pushed, err
		}
		if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return pushed, fmt.Errorf("push %s: %w", r, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return pushed, err
		}
		pushed = append(pushed, r+"@"+d.String())
	}
	if o.Chart == "" {
		return pushed, nil
	}
	data, ch, err := PackageChart(o.Chart, o.Registry, o.Version)
	if err != nil {
		return pushed, err
	}
	ref, err := PushChart(ctx, data, ch, o.Registry, o.Insecure)
	if err != nil {
		return pushed, err
	}
	return append(pushed, ref), nil
}

// readLayout returns the index tagged version in the OCI image layout dir.
func readLayout(dir, version string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (run make images first): %w", ErrNotBuilt, dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	var tags []string
	for _, d := range m.Manifests {
		tag := d.Annotations[refNameAnnotation]
		if tag == version {
			return top.ImageIndex(d.Digest)
		}
		tags = append(tags, tag)
	}
	return nil, fmt.Errorf("%w: %s holds %v, not %s (run make images for this version)", ErrNotBuilt, dir, tags, version)
}
