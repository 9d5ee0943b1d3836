// Command gen writes the configuration reference: go run ./configref/gen -out FILE, run by
// `go generate` in internal/config.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/pvrescue/pvrescue/internal/config/configref"
)

func main() {
	src := flag.String("src", ".", "the internal/config package directory")
	out := flag.String("out", "", "the markdown file to write")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gen: -out is required")
		os.Exit(2)
	}
	b, err := configref.Render(*src)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil { //nolint:gosec // a documentation file, world-readable on purpose
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
