//go:build linux

package stack

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/pvrescue/pvrescue/e2e/cluster"
)

// CLIs are the programs the README's install commands call, by path; RunCommands puts each first
// on PATH under the name the README uses.
type CLIs struct {
	Helm, Kubectl, KubectlPvrescue string
}

// CommandsRun says how RunCommands runs shell commands as an operator would.
type CommandsRun struct {
	// Repo is the checkout: the commands run in it (make, manifests/, charts/).
	Repo string
	// Commands is the shell text to run (the README's, placeholders replaced).
	Commands string
	CLIs     CLIs
	// Env are extra NAME=value variables (e.g. PLATFORMS=linux/amd64 for make images).
	Env []string
	// Name names the run's directory in the cluster's work dir (PATH links, Helm's own dirs).
	Name string
}

// RunCommands runs r.Commands with bash (-euo pipefail, each command echoed with the seconds
// since the start) in the checkout, KUBECONFIG set to the cluster's admin kubeconfig and the CLIs
// first on PATH; Helm keeps its cache, config and data in the cluster's work dir, not the
// machine's. It returns stdout and stderr, interleaved.
func RunCommands(ctx context.Context, c *cluster.Cluster, r CommandsRun) (string, error) {
	dir := filepath.Join(c.Opts.WorkDir, r.Name)
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", err
	}
	for name, p := range map[string]string{"helm": r.CLIs.Helm, "kubectl": r.CLIs.Kubectl, "kubectl-pvrescue": r.CLIs.KubectlPvrescue} {
		if p == "" {
			continue // installed by the commands themselves (the README's make kubectl-plugin)
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s for the README's commands: %w", name, err)
		}
		if err := os.Symlink(p, filepath.Join(binDir, name)); err != nil && !os.IsExist(err) {
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\nPS4='+ [${SECONDS}s] '\nset -x\n"+r.Commands)
	cmd.Dir = r.Repo
	cmd.Env = append(OperatorEnv(os.Environ()),
		"PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+c.Kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "helm", "data"),
		// make kubectl-plugin installs there: first on this PATH, as /usr/local/bin is on a
		// fresh shell's (the machine's own /usr/local/bin is left alone).
		"PLUGIN_DIR="+binDir,
	)
	cmd.Env = append(cmd.Env, r.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("the README's install commands: %w", err)
	}
	return string(out), nil
}

// HelmCLIVersion returns the version of the Helm CLI of this major (3 or 4) that `make helm-clis`
// builds: HELM3_VERSION / HELM4_VERSION in the Makefile, read from it so the two never disagree.
func HelmCLIVersion(repo string, major int) (string, error) {
	f, err := os.Open(filepath.Join(repo, "Makefile"))
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	re := regexp.MustCompile(fmt.Sprintf(`^HELM%d_VERSION\s*\?=\s*(v%d\.\d+\.\d+)\s*$`, major, major))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no HELM%d_VERSION ?= v%d.x.y line in the Makefile", major, major)
}

// HelmCLIPath is where `make helm-clis` puts the Helm CLI of version (bin/helm/<version>/helm).
func HelmCLIPath(repo, version string) string {
	return filepath.Join(repo, "bin", "helm", version, "helm")
}

// HelmVersionOf runs `helm version --short` with the binary and returns its answer.
func HelmVersionOf(ctx context.Context, helm string) (string, error) {
	out, err := exec.CommandContext(ctx, helm, "version", "--short").Output()
	return strings.TrimSpace(string(out)), err
}

// BuildKubectlPvrescue builds the kubectl plugin (./cmd/kubectl-pvrescue, as `make build` does)
// into dir and returns its path: the README's `kubectl pvrescue status` finds it on PATH.
func BuildKubectlPvrescue(ctx context.Context, repo, dir string) (string, error) {
	out := filepath.Join(dir, "kubectl-pvrescue")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/kubectl-pvrescue")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/kubectl-pvrescue: %w\n%s", err, b)
	}
	return out, nil
}
