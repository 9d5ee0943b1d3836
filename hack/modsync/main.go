// Command modsync fails when the root module and the e2e module build the same dependency at
// different versions. A difference in one module low in the graph (golang.org/x/net, say) gives
// every package above it a different build ID, so a cold machine compiles client-go,
// controller-runtime and the rest twice: once for the root module's vet and tests, once for the
// e2e module's. Aligned, the e2e build finds them in the build cache.
//
// Only modules that provide a package built in both modules count: `go list -m all` also lists
// modules no build of ours touches, whose versions cost nothing.
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// builds names, per module directory, the build tags its layers use (make unit, integration,
// node, e2e, lint).
var builds = []struct {
	dir  string
	tags []string
}{
	{dir: ".", tags: []string{"", "integration", "node"}},
	{dir: "e2e", tags: []string{"", "integration", "e2e"}},
}

func main() {
	os.Exit(run())
}

func run() int {
	var resolved [2]map[string]string
	for i, b := range builds {
		resolved[i] = map[string]string{}
		for _, tags := range b.tags {
			out, err := listModules(b.dir, tags)
			if err != nil {
				fmt.Fprintf(os.Stderr, "modsync: %v\n", err)
				return 2
			}
			for path, version := range parseModules(out) {
				resolved[i][path] = version
			}
		}
	}
	diffs := mismatches(resolved[0], resolved[1])
	if len(diffs) == 0 {
		return 0
	}
	fmt.Fprintf(os.Stderr, "modsync: the root and e2e modules build %d shared module(s) at different versions; "+
		"a cold machine then compiles every package above them twice. Raise the lower side with `go get MODULE@VERSION` and `go mod tidy`:\n", len(diffs))
	for _, d := range diffs {
		fmt.Fprintf(os.Stderr, "  %s\n", d)
	}
	return 1
}

// listModules prints "path version" for the module of every package (tests included) that a
// build of dir with tags compiles.
func listModules(dir, tags string) ([]byte, error) {
	cmd := exec.Command("go", "list", "-deps", "-test", "-tags", tags,
		"-f", "{{with .Module}}{{.Path}} {{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}{{end}}", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s (tags %q): %w: %s", dir, tags, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
