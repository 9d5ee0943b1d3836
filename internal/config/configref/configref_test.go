package configref

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed reference is what the code says today.
func TestReferenceIsCurrent(t *testing.T) {
	want, err := Render("..")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("..", "..", "..", "docs", "config-reference.md")
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v: run %s", err, Command)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/config-reference.md is stale (internal/config changed): run %s and commit the result.\n%s",
			Command, firstDiff(got, want))
	}
}

// firstDiff shows the first line where the committed file and the generated one differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("first difference at line %d:\n  committed: %s\n  generated: %s", i+1, gl, wl)
		}
	}
	return ""
}

func TestKeys(t *testing.T) {
	keys, err := Keys("..")
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Key{}
	for _, k := range keys {
		byPath[k.Path] = k
	}
	for path, want := range map[string]Key{
		"s3.bridgeAfter":                {Type: "duration", Default: `"10s"`},
		"localBlock.storageClasses":     {Type: "list of string", Default: `["local-ssd"]`},
		"s3.probe.timeoutSeconds":       {Type: "integer", Default: "5"},
		"s3.profiles.<driver>.fuseType": {Type: "string"},
		"helper.resources.limits":       {Default: `{"cpu":"100m","memory":"64Mi"}`},
		"stateDir":                      {Type: "string", Default: `"/var/lib/pvrescue"`},
	} {
		k, ok := byPath[path]
		if !ok {
			t.Errorf("no key %s in %v", path, SortedPaths(keys))
			continue
		}
		if want.Type != "" && k.Type != want.Type || k.Default != want.Default {
			t.Errorf("%s: type %q default %q, want %q %q", path, k.Type, k.Default, want.Type, want.Default)
		}
		if k.Doc == "" {
			t.Errorf("%s: no description", path)
		}
	}
	if k := byPath["s3.probe.statfsTimeout"]; !strings.Contains(k.Doc, "`timeoutSeconds`") {
		t.Errorf("Go field names are not written as keys: %q", k.Doc)
	}
}

// A field without a doc comment fails the generation, naming it.
func TestUndocumentedFieldFails(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	src = removeDoc(t, src, "BridgeAfter metav1.Duration")
	if err := os.WriteFile(filepath.Join(dir, "config.go"), src, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Keys(dir)
	if err == nil || !strings.Contains(err.Error(), "S3.BridgeAfter") {
		t.Fatalf("Keys on a config.go without BridgeAfter's comment: %v, want an error naming S3.BridgeAfter", err)
	}
}

// removeDoc deletes the comment lines right above the line containing field.
func removeDoc(t *testing.T, src []byte, field string) []byte {
	t.Helper()
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		if strings.Contains(l, field) {
			j := i
			for j > 0 && strings.HasPrefix(strings.TrimSpace(lines[j-1]), "//") {
				j--
			}
			return []byte(strings.Join(append(lines[:j:j], lines[i:]...), "\n"))
		}
	}
	t.Fatalf("no line with %q", field)
	return nil
}
