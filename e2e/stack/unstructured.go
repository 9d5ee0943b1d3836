package stack

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// unstructuredContainers returns the images of a workload's pod template containers.
func unstructuredContainers(o *unstructured.Unstructured) ([]string, bool, error) {
	cs, ok, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if !ok || err != nil {
		return nil, ok, err
	}
	var out []string
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok {
			if s, ok := m["image"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out, true, nil
}

func unstructuredString(o *unstructured.Unstructured, fields ...string) (string, bool, error) {
	return unstructured.NestedString(o.Object, fields...)
}
