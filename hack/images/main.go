// Command images builds pvrescue's container images without a container engine and pushes them
// (make images, make push).
//
//	images build -version V [-out bin/images] [-platforms linux/amd64,linux/arm64] [-agent-base REF]
//	images push  -version V -registry HOST[:PORT]/PATH [-in bin/images] [-insecure]
//
// build cross-compiles the static binaries (CGO_ENABLED=0, GOOS/GOARCH) and writes one OCI image
// layout per image under -out (pvrescue-webhook/, pvrescue-agent/, pvrescue-helper/), each holding a
// multi-platform index tagged V. push copies those indexes to REGISTRY/<image>:V.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	if err := runCommand(ctx, args, os.Stdout, GoBuild); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		return 1
	}
	return 0
}
