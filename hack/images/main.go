// Command images builds pvrescue's container images without a container engine and pushes them
// (make images, make push).
//
//	images build -version V [-out bin/images] [-platforms linux/amd64,linux/arm64] [-agent-base REF]
//	images push  -version V -registry HOST[:PORT]/PATH [-in bin/images] [-insecure]
//	images lock  [-lock hack/images/debian.lock] [-platforms …]
//
// build cross-compiles the static binaries (CGO_ENABLED=0, GOOS/GOARCH) and writes one OCI image
// layout per image under -out (pvrescue-webhook/, pvrescue-agent/, pvrescue-helper/), each holding a
// multi-platform index tagged V. The agent image also carries s3fs, fuse3 and their shared
// libraries from Debian's packages for each platform's architecture, pinned by the lockfile (name,
// version, architecture, sha256), unless -agent-base names a base image that has them. push copies
// those indexes to REGISTRY/<image>:V. lock resolves the Debian packages by name with apt
// (make image-lock) and rewrites the lockfile.
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
	if err := runCommand(ctx, args, os.Stdout, HostTools, HostApt{}); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		return 1
	}
	return 0
}
