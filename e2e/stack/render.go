package stack

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/pvrescue/pvrescue/charts"
)

// Images are the references that replace the published image names in the manifests.
type Images struct {
	Webhook, Agent string // full references, e.g. 127.0.0.1:5000/pvrescue/pvrescue-webhook:e2e
}

// Published image names in manifests/kustomization.yaml.
const (
	PublishedWebhook = "ghcr.io/pvrescue/pvrescue-webhook"
	PublishedAgent   = "ghcr.io/pvrescue/pvrescue-agent"
)

// Overlay is the only difference between what a user applies and what the suite applies, as a
// kustomize overlay over manifests/ (shown by `make demo`):
//   - images: the published names point at the local registry (nothing can be pulled here);
//   - config.yaml: helper.image names the same local webhook image, for the same reason.
func Overlay(img Images) (kustomization string) {
	wName, wTag := splitRef(img.Webhook)
	aName, aTag := splitRef(img.Agent)
	return fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../base
images:
- name: %s
  newName: %s
  newTag: %s
- name: %s
  newName: %s
  newTag: %s
configMapGenerator:
- name: pvrescue-config
  namespace: pvrescue-system
  behavior: replace
  files:
  - config.yaml
`, PublishedWebhook, wName, wTag, PublishedAgent, aName, aTag)
}

// splitRef splits host:port/repo:tag at the tag's colon.
func splitRef(ref string) (string, string) {
	slash := bytes.LastIndexByte([]byte(ref), '/')
	colon := bytes.LastIndexByte([]byte(ref), ':')
	if colon > slash {
		return ref[:colon], ref[colon+1:]
	}
	return ref, "latest"
}

// Render builds manifests (the files of manifests/, e.g. manifests.FS) with the overlay and
// returns the objects in kustomize's order. configYAML is the edited config.yaml.
func Render(manifests fs.FS, img Images) ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	entries, err := fs.ReadDir(manifests, ".")
	if err != nil {
		return nil, err
	}
	var config []byte
	for _, e := range entries {
		b, err := fs.ReadFile(manifests, e.Name())
		if err != nil {
			return nil, err
		}
		if err := mem.WriteFile(path.Join("/base", e.Name()), b); err != nil {
			return nil, err
		}
		if e.Name() == "config.yaml" {
			config = b
		}
	}
	if config == nil {
		return nil, errors.New("manifests have no config.yaml")
	}
	edited, err := SetHelperImage(config, img.Webhook)
	if err != nil {
		return nil, err
	}
	if err := mem.WriteFile("/overlay/config.yaml", edited); err != nil {
		return nil, err
	}
	if err := mem.WriteFile("/overlay/kustomization.yaml", []byte(Overlay(img))); err != nil {
		return nil, err
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/overlay")
	if err != nil {
		return nil, fmt.Errorf("kustomize build: %w", err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, err
	}
	return charts.SplitYAML(out)
}

// SetHelperImage sets helper.image in a pvrescue config file.
func SetHelperImage(config []byte, image string) ([]byte, error) {
	var m map[string]any
	if err := yaml.Unmarshal(config, &m); err != nil {
		return nil, fmt.Errorf("config.yaml: %w", err)
	}
	h, _ := m["helper"].(map[string]any)
	if h == nil {
		h = map[string]any{}
	}
	h["image"] = image
	m["helper"] = h
	return yaml.Marshal(m)
}
