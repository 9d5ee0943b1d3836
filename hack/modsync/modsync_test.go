package main

import (
	"reflect"
	"testing"
)

func TestParseModules(t *testing.T) {
	out := []byte(`github.com/pvrescue/pvrescue
github.com/pvrescue/pvrescue  => ../
golang.org/x/net v0.62.0
k8s.io/api v0.37.2
golang.org/x/net v0.62.0
example.com/forked v1.0.0 => example.com/forked v1.0.1
example.com/local v1.0.0 => ./local

`)
	got := parseModules(out)
	want := map[string]string{
		"golang.org/x/net":   "v0.62.0",
		"k8s.io/api":         "v0.37.2",
		"example.com/forked": "v1.0.1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseModules = %v, want %v", got, want)
	}
}

func TestMismatches(t *testing.T) {
	tests := []struct {
		name      string
		root, e2e map[string]string
		want      []string
	}{
		{name: "aligned", root: map[string]string{"a": "v1", "b": "v2"}, e2e: map[string]string{"a": "v1", "b": "v2", "c": "v9"}},
		{name: "only one side builds it", root: map[string]string{"a": "v1"}, e2e: map[string]string{"b": "v2"}},
		{
			name: "two differ, sorted",
			root: map[string]string{"z": "v1", "a": "v1", "m": "v3"},
			e2e:  map[string]string{"z": "v2", "a": "v1.1", "m": "v3"},
			want: []string{"a: root v1, e2e v1.1", "z: root v1, e2e v2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mismatches(tt.root, tt.e2e); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("mismatches = %q, want %q", got, tt.want)
			}
		})
	}
}
