package stack

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// The README's install commands sit between these HTML comments (invisible when rendered), in one
// ```sh fence, so a test can run what an operator copies.
const (
	readmeInstallBegin = "<!-- install-commands:"
	readmeInstallEnd   = "<!-- /install-commands -->"
)

// ErrReadme is wrapped by the errors of reading the README's install commands.
var ErrReadme = errors.New("README install commands")

// The placeholders of the README's install commands, each replaced for a test cluster.
const (
	ReadmeRegistry  = "registry.example:5000/pvrescue"
	ReadmeNamespace = "my-app"
	ReadmeNode      = "my-node"
)

// ReadmeInstallCommands returns the shell commands of README.md's install block (the ```sh fence
// between the install-commands markers), as written.
func ReadmeInstallCommands(readme string) (string, error) {
	return markedCommands(readme, readmeInstallBegin, readmeInstallEnd)
}

// markedCommands returns the one ```sh fence between the begin and end markers of doc.
func markedCommands(doc, begin, end string) (string, error) {
	_, rest, ok := strings.Cut(doc, begin)
	if !ok {
		return "", fmt.Errorf("%w: no %q marker", ErrReadme, begin)
	}
	block, _, ok := strings.Cut(rest, end)
	if !ok {
		return "", fmt.Errorf("%w: no %q after the begin marker", ErrReadme, end)
	}
	_, fence, ok := strings.Cut(block, "\n```sh\n")
	if !ok {
		return "", fmt.Errorf("%w: no ```sh fence between the markers", ErrReadme)
	}
	cmds, after, ok := strings.Cut(fence, "\n```")
	if !ok || strings.TrimSpace(after) != "" {
		return "", fmt.Errorf("%w: the markers must hold exactly one ```sh fence", ErrReadme)
	}
	return cmds + "\n", nil
}

// docs/operations.md's commands for tls.mode=existingSecret (a CA, a serving certificate and its
// Secret, made as an operator would) sit between these markers, and the sentence after them gives
// the flags to add to the helm install line.
const (
	existingSecretBegin = "<!-- existing-secret-commands:"
	existingSecretEnd   = "<!-- /existing-secret-commands -->"
)

var existingSecretFlags = regexp.MustCompile("add `(--set tls\\.mode=existingSecret [^`]+)`\\s+to the `helm install` line")

// OperationsExistingSecret returns docs/operations.md's commands that make the Secret of
// tls.mode=existingSecret, and the flags it says to add to the helm install line (in the same
// shell: they may name the commands' variables), as written.
func OperationsExistingSecret(doc string) (cmds string, helmArgs []string, err error) {
	if cmds, err = markedCommands(doc, existingSecretBegin, existingSecretEnd); err != nil {
		return "", nil, fmt.Errorf("docs/operations.md: %w", err)
	}
	m := existingSecretFlags.FindStringSubmatch(doc)
	if m == nil {
		return "", nil, fmt.Errorf("%w: docs/operations.md no longer says %q", ErrReadme, existingSecretFlags.String())
	}
	return cmds, strings.Fields(m[1]), nil
}

// readmeNoCertManager is the README's advice for a cluster without cert-manager: the flag to add
// to the helm install line.
var readmeNoCertManager = regexp.MustCompile("Add `(--set tls\\.mode=bootstrap)` to the `helm install` line on a cluster without cert-manager")

// ReadmeBootstrapFlag returns the flag the README says to add to the helm install line on a
// cluster without cert-manager (read from the README, so the test follows its advice as written).
func ReadmeBootstrapFlag(readme string) (string, error) {
	m := readmeNoCertManager.FindStringSubmatch(readme)
	if m == nil {
		return "", fmt.Errorf("%w: the README no longer says %q", ErrReadme, readmeNoCertManager.String())
	}
	return m[1], nil
}

// ReadmeSubst is what the install commands get on a test cluster in place of the README's
// placeholders; every placeholder must be in the commands (a README that drifts fails the test).
type ReadmeSubst struct {
	Registry  string // host:port/path for registry.example:5000/pvrescue
	Namespace string // the application namespace for my-app
	Node      string // the node for my-node
	// HelmArgs are appended to the helm install command (after its last continuation line).
	HelmArgs []string
}

// Apply returns the commands with the placeholders replaced and HelmArgs added.
func (s ReadmeSubst) Apply(cmds string) (string, error) {
	for _, r := range []struct{ placeholder, value string }{
		{ReadmeRegistry, s.Registry}, {ReadmeNamespace + " ", s.Namespace + " "}, {ReadmeNode + " ", s.Node + " "},
	} {
		if !strings.Contains(cmds, r.placeholder) {
			return "", fmt.Errorf("%w: placeholder %q not found in:\n%s", ErrReadme, strings.TrimSpace(r.placeholder), cmds)
		}
		cmds = strings.ReplaceAll(cmds, r.placeholder, r.value)
	}
	if len(s.HelmArgs) == 0 {
		return cmds, nil
	}
	return AddArgs(cmds, "helm install ", s.HelmArgs)
}

// AddArgs appends args to the first command that starts with prefix (after its continuation
// lines, before a trailing comment).
func AddArgs(cmds, prefix string, args []string) (string, error) {
	lines := strings.Split(cmds, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		for i < len(lines)-1 && strings.HasSuffix(lines[i], "\\") {
			i++
		}
		code, comment, _ := strings.Cut(lines[i], " #")
		lines[i] = strings.TrimRight(code, " ") + " " + strings.Join(args, " ")
		if comment != "" {
			lines[i] += "   #" + comment
		}
		return strings.Join(lines, "\n"), nil
	}
	return "", fmt.Errorf("%w: no line starts with %q", ErrReadme, prefix)
}

// OperationsUpgradeCommands returns the commands of docs/operations.md's "## Upgrade" section (its
// first ```sh fence), split where `helm rollback` begins: the upgrade to a new version, and the
// rollback. The registry placeholder is replaced by registry; every placeholder must be there.
func OperationsUpgradeCommands(doc, registry string) (upgrade, rollback string, err error) {
	_, sec, ok := strings.Cut(doc, "\n## Upgrade\n")
	if !ok {
		return "", "", fmt.Errorf("%w: docs/operations.md has no \"## Upgrade\" section", ErrReadme)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, fence, ok := strings.Cut(sec, "\n```sh\n")
	if !ok {
		return "", "", fmt.Errorf("%w: no ```sh fence in operations.md's Upgrade section", ErrReadme)
	}
	cmds, _, ok := strings.Cut(fence, "\n```")
	if !ok {
		return "", "", fmt.Errorf("%w: unterminated ```sh fence in operations.md's Upgrade section", ErrReadme)
	}
	if !strings.Contains(cmds, ReadmeRegistry) {
		return "", "", fmt.Errorf("%w: placeholder %q not in operations.md's upgrade commands:\n%s", ErrReadme, ReadmeRegistry, cmds)
	}
	cmds = strings.ReplaceAll(cmds, ReadmeRegistry, registry)
	i := strings.Index(cmds, "\nhelm rollback ")
	if i < 0 {
		return "", "", fmt.Errorf("%w: no helm rollback line in operations.md's upgrade commands", ErrReadme)
	}
	return cmds[:i+1], cmds[i+1:] + "\n", nil
}

// ParsePushed returns the references `make push` printed ("pushed HOST/PATH/NAME:TAG@DIGEST"),
// by image name (pvrescue-webhook, …).
func ParsePushed(out string) map[string]PushedImage {
	m := map[string]PushedImage{}
	for _, l := range strings.Split(out, "\n") {
		ref, ok := strings.CutPrefix(strings.TrimSpace(l), "pushed ")
		if !ok {
			continue
		}
		tagged, digest, ok := strings.Cut(ref, "@")
		if !ok {
			continue
		}
		repo, tag := splitRef(tagged)
		m[repo[strings.LastIndexByte(repo, '/')+1:]] = PushedImage{Repo: repo, Tag: tag, Digest: digest}
	}
	return m
}

// PushedImage is one image `make push` pushed.
type PushedImage struct {
	Repo, Tag, Digest string // 127.0.0.1:5000/pvrescue/pvrescue-webhook, v0.1.0-3-gabc, sha256:…
}

// Ref is repo:tag.
func (p PushedImage) Ref() string { return p.Repo + ":" + p.Tag }

// ByDigest is repo@digest, the image ID the kubelet reports for a container pulled from it.
func (p PushedImage) ByDigest() string { return p.Repo + "@" + p.Digest }

// OperatorEnv is environ without what a make running the tests passes down (MAKEFLAGS, MAKELEVEL,
// …): an operator runs the README's commands in a fresh shell. Inherited, they made the README's
// `$(make -s chart-version)` print make's "Entering directory" lines into the version (under
// `make test`, not under a bare go test).
func OperatorEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR", "GNUMAKEFLAGS":
			continue
		}
		out = append(out, kv)
	}
	return out
}
