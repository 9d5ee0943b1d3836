// Package manifests embeds the kustomization in manifests/, so Go tests check exactly the files a
// user applies with `kubectl apply -k manifests/`.
package manifests

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// FS holds every YAML file of the kustomization.
//
//go:embed *.yaml
var FS embed.FS

// ErrNotFound is returned by Find when no document has the requested kind and name.
var ErrNotFound = errors.New("object not found in manifests")

// Documents splits a multi-document YAML file of FS into its non-empty documents.
func Documents(file string) ([][]byte, error) {
	data, err := FS.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split %s: %w", file, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

// Find decodes into out the document of file whose kind and metadata.name match.
func Find(file string, gvk schema.GroupVersionKind, name string, out any) error {
	docs, err := Documents(file)
	if err != nil {
		return err
	}
	for _, doc := range docs {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return fmt.Errorf("decode header in %s: %w", file, err)
		}
		if head.APIVersion == gvk.GroupVersion().String() && head.Kind == gvk.Kind && head.Metadata.Name == name {
			if err := yaml.UnmarshalStrict(doc, out); err != nil {
				return fmt.Errorf("decode %s %s in %s: %w", gvk.Kind, name, file, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: %s %s in %s", ErrNotFound, gvk.Kind, name, file)
}

// stripComments drops whole-line comments, so a document holding only comments counts as empty.
func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '#' {
			continue
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}
