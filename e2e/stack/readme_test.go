package stack

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// The real README: its install block is found, holds every placeholder the e2e replaces, and
// says which flag a cluster without cert-manager adds.
func TestReadmeInstallCommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := ReadmeInstallCommands(string(b))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"make images push REGISTRY=", "kubectl apply -f manifests/namespace.yaml",
		"helm install pvrescue oci://" + ReadmeRegistry + "/pvrescue --version \"$(make -s chart-version)\"", "--wait",
		"make kubectl-plugin", "kubectl pvrescue status"} {
		if !strings.Contains(cmds, want) {
			t.Errorf("the README's install commands lack %q:\n%s", want, cmds)
		}
	}
	flag, err := ReadmeBootstrapFlag(string(b))
	if err != nil || flag != "--set tls.mode=bootstrap" {
		t.Errorf("bootstrap flag %q, %v", flag, err)
	}
	out, err := ReadmeSubst{Registry: "127.0.0.1:1/p", Namespace: "ns1", Node: "n1", HelmArgs: []string{flag}}.Apply(cmds)
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{ReadmeRegistry, ReadmeNamespace, ReadmeNode} {
		if strings.Contains(out, gone) {
			t.Errorf("%q left in:\n%s", gone, out)
		}
	}
}

func TestReadmeInstallCommandsMarkers(t *testing.T) {
	const fence = "```"
	for _, tc := range []struct {
		name, readme, want string
		err                bool
	}{
		{"ok", "# x\n<!-- install-commands: e2e -->\n" + fence + "sh\na \\\n  b\nc # d\n" + fence + "\n<!-- /install-commands -->\nrest", "a \\\n  b\nc # d\n", false},
		{"no begin", "# x\n" + fence + "sh\na\n" + fence + "\n<!-- /install-commands -->", "", true},
		{"no end", "<!-- install-commands: e2e -->\n" + fence + "sh\na\n" + fence + "\n", "", true},
		{"no fence", "<!-- install-commands: e2e -->\na\n<!-- /install-commands -->", "", true},
		{"two fences", "<!-- install-commands: e2e -->\n" + fence + "sh\na\n" + fence + "\n" + fence + "sh\nb\n" + fence + "\n<!-- /install-commands -->", "", true},
	} {
		got, err := ReadmeInstallCommands(tc.readme)
		if (err != nil) != tc.err || (err != nil && !errors.Is(err, ErrReadme)) {
			t.Errorf("%s: err %v, want error %v", tc.name, err, tc.err)
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestReadmeSubstApply(t *testing.T) {
	const cmds = "make push REGISTRY=registry.example:5000/pvrescue   # or not\n" +
		"helm install pvrescue charts/pvrescue -n ns \\\n  --set a=registry.example:5000/pvrescue/x \\\n  --set b=c   # comment\n" +
		"kubectl label namespace my-app l=v\nkubectl label node my-node l=v\n"
	got, err := ReadmeSubst{Registry: "127.0.0.1:9/p", Namespace: "app", Node: "n", HelmArgs: []string{"--set tls.mode=bootstrap"}}.Apply(cmds)
	if err != nil {
		t.Fatal(err)
	}
	want := "make push REGISTRY=127.0.0.1:9/p   # or not\n" +
		"helm install pvrescue charts/pvrescue -n ns \\\n  --set a=127.0.0.1:9/p/x \\\n  --set b=c --set tls.mode=bootstrap   # comment\n" +
		"kubectl label namespace app l=v\nkubectl label node n l=v\n"
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, err := (ReadmeSubst{Registry: "r", Namespace: "a", Node: "n"}).Apply("make push REGISTRY=elsewhere\n"); !errors.Is(err, ErrReadme) {
		t.Errorf("a missing placeholder: %v, want ErrReadme", err)
	}
}

func TestParsePushed(t *testing.T) {
	out := "go run ./hack/images push ...\npushed 127.0.0.1:9/p/pvrescue-webhook:v0.1.0-2-gabc@sha256:aa\n" +
		"pushed 127.0.0.1:9/p/pvrescue-agent:v0.1.0-2-gabc@sha256:bb\nnoise pushed x\n"
	got := ParsePushed(out)
	want := map[string]PushedImage{
		"pvrescue-webhook": {Repo: "127.0.0.1:9/p/pvrescue-webhook", Tag: "v0.1.0-2-gabc", Digest: "sha256:aa"},
		"pvrescue-agent":   {Repo: "127.0.0.1:9/p/pvrescue-agent", Tag: "v0.1.0-2-gabc", Digest: "sha256:bb"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if w := got["pvrescue-webhook"]; w.ByDigest() != "127.0.0.1:9/p/pvrescue-webhook@sha256:aa" || w.Ref() != "127.0.0.1:9/p/pvrescue-webhook:v0.1.0-2-gabc" {
		t.Errorf("refs %s %s", w.ByDigest(), w.Ref())
	}
}

func TestOperationsUpgradeCommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	up, back, err := OperationsUpgradeCommands(string(b), "127.0.0.1:9/p")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"make images push REGISTRY=127.0.0.1:9/p", "helm upgrade pvrescue oci://127.0.0.1:9/p/pvrescue --version \"$(make -s chart-version)\"", "--wait"} {
		if !strings.Contains(up, want) {
			t.Errorf("upgrade commands lack %q:\n%s", want, up)
		}
	}
	if !strings.HasPrefix(back, "helm rollback pvrescue") || strings.Contains(up, "rollback") {
		t.Errorf("rollback split wrong:\nupgrade:\n%s\nrollback:\n%s", up, back)
	}
	if got, err := AddArgs(up, "helm upgrade ", []string{"--plain-http"}); err != nil || !strings.Contains(got, "--reset-then-reuse-values --wait --plain-http") {
		t.Errorf("AddArgs: %v\n%s", err, got)
	}
}

func TestOperatorEnvDropsWhatMakePassesDown(t *testing.T) {
	got := OperatorEnv([]string{"PATH=/bin", "MAKEFLAGS=w -- ", "MAKELEVEL=2", "MFLAGS=-w", "HOME=/root", "MAKEOVERRIDES=", "MAKE_TERMOUT=/dev/pts/0"})
	if want := []string{"PATH=/bin", "HOME=/root"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("OperatorEnv = %q, want %q", got, want)
	}
}

// The real docs/operations.md: the existingSecret commands are found, make the Secret the flags
// name, write the CA file the flags read, and the flags set each value that mode requires.
func TestOperationsExistingSecret(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, args, err := OperationsExistingSecret(string(b))
	if err != nil {
		t.Fatal(err)
	}
	flags := strings.Join(args, " ")
	for _, want := range []string{"--set tls.mode=existingSecret", "--set tls.existingSecret.name=", "--set-file tls.existingSecret.caBundle="} {
		if !strings.Contains(flags, want) {
			t.Errorf("the existingSecret flags %q lack %q", flags, want)
		}
	}
	name, caFile := "", ""
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "tls.existingSecret.name="); ok && i > 0 && args[i-1] == "--set" {
			name = v
		}
		if v, ok := strings.CutPrefix(a, "tls.existingSecret.caBundle="); ok && i > 0 && args[i-1] == "--set-file" {
			caFile = v
		}
	}
	for _, want := range []string{"kubectl apply -f manifests/namespace.yaml", "kubectl -n pvrescue-system create secret tls " + name + " ", "-out " + caFile,
		"DNS:pvrescue-webhook.pvrescue-system.svc"} {
		if name == "" || caFile == "" || !strings.Contains(cmds, want) {
			t.Errorf("the existingSecret commands lack %q (Secret %q, CA file %q):\n%s", want, name, caFile, cmds)
		}
	}
	if _, _, err := OperationsExistingSecret("no markers"); !errors.Is(err, ErrReadme) {
		t.Errorf("without markers: %v, want ErrReadme", err)
	}
}
