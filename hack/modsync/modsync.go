package main

import (
	"fmt"
	"sort"
	"strings"
)

// parseModules reads listModules' lines into module path → the version built. A module replaced
// by a directory (the e2e module's `replace github.com/pvrescue/pvrescue => ../`) and the main
// module (no version) are not dependencies that compile twice: they are left out. A module
// replaced by another version counts at that version.
func parseModules(out []byte) map[string]string {
	modules := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		from, to, replaced := strings.Cut(line, " => ")
		fields := strings.Fields(from)
		if replaced {
			fields = strings.Fields(to)
		}
		if len(fields) != 2 {
			continue // the main module, or a directory replacement: no version
		}
		if replaced {
			fields[0], _, _ = strings.Cut(from, " ")
		}
		modules[fields[0]] = fields[1]
	}
	return modules
}

// mismatches lists, sorted, every module both maps hold at different versions.
func mismatches(root, e2e map[string]string) []string {
	var out []string
	for path, rv := range root {
		if ev, ok := e2e[path]; ok && ev != rv {
			out = append(out, fmt.Sprintf("%s: root %s, e2e %s", path, rv, ev))
		}
	}
	sort.Strings(out)
	return out
}
