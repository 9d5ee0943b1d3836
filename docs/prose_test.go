package docs

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	kubectlapp "github.com/pvrescue/pvrescue/cmd/kubectl-pvrescue/app"
	agentapp "github.com/pvrescue/pvrescue/cmd/pvrescue-agent/app"
	webhookapp "github.com/pvrescue/pvrescue/cmd/pvrescue-webhook/app"
	"github.com/pvrescue/pvrescue/internal/cmdutil/kubecmd"
	"github.com/pvrescue/pvrescue/internal/config/configref"
	"github.com/pvrescue/pvrescue/sidecar"
)

// ---- flags named in prose ----

// ourFlags are the flags of pvrescue's commands, by name, with the commands that have them.
func ourFlags(t *testing.T) map[string][]string {
	t.Helper()
	flags := map[string][]string{}
	var walk func(prefix string, c *cobra.Command)
	walk = func(prefix string, c *cobra.Command) {
		name := strings.TrimSpace(prefix + " " + c.Name())
		add := func(f *pflag.Flag) { flags[f.Name] = append(flags[f.Name], name) }
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, s := range c.Commands() {
			walk(name, s)
		}
	}
	walk("", agentapp.NewCommand(nil))
	walk("", webhookapp.NewRootCommand(nil))
	walk("", kubectlapp.NewCommand(kubectlapp.NewOptions(genericiooptions.NewTestIOStreamsDiscard())))
	logs := pflag.NewFlagSet("logs", pflag.ContinueOnError)
	kubecmd.NewLogOptions().AddFlags(logs)
	logs.VisitAll(func(f *pflag.Flag) { flags[f.Name] = append(flags[f.Name], "pvrescue-agent, pvrescue-webhook (logs)") })
	for name, o := range map[string]interface{ AddFlags(*flag.FlagSet) }{
		"guard": &sidecar.GuardOptions{}, "exec": &sidecar.ExecOptions{}, "probe": &sidecar.ProbeOptions{}, "install": &sidecar.InstallOptions{},
	} {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		o.AddFlags(fs)
		fs.VisitAll(func(f *flag.Flag) { flags[f.Name] = append(flags[f.Name], "pvrescue-sidecar "+name) })
	}
	flags["help"] = append(flags["help"], "every command")
	return flags
}

// otherTools' flags the docs name, by the tool they belong to: a flag in the docs is either
// pvrescue's or listed here (so a renamed or misspelt flag of ours cannot pass as someone else's).
var otherTools = map[string][]string{
	"helm":                 {"set", "set-string", "create-namespace", "reuse-values", "wait", "version", "namespace", "values", "plain-http", "reset-then-reuse-values", "set-file"},
	"kubectl":              {"subresource", "dry-run", "context", "namespace", "kubeconfig", "cert", "key"},
	"git describe":         {"tags", "always", "dirty"},
	"dpkg":                 {"add-architecture"},
	"rclone (mounter)":     {"uid", "gid", "dir-mode", "file-mode", "umask", "vfs-cache-mode", "s3-provider", "s3-force-path-style", "read-only"},
	"geesefs (mounter)":    {"memory-limit", "shared-config", "cache", "uid", "gid", "dir-mode", "file-mode"},
	"mount, kubectl get":   {"type"},
	"go test, go build":    {"tags", "timeout"},
	"qemu-aarch64-static":  {},
	"kubectl plugin, helm": {"kubeconfig", "context"},
}

// flagMention: a --flag in inline code or a shell block.
var flagMention = regexp.MustCompile("(?:^|[\\s`(=\\[])--([a-z][a-z0-9-]*)")

// Every --flag the operator docs name is a flag of one of pvrescue's commands (agent, webhook and
// its subcommands, kubectl plugin, helper) or of a tool listed in otherTools.
func TestDocumentedFlagsExist(t *testing.T) {
	ours := ourFlags(t)
	theirs := map[string]bool{}
	for _, fs := range otherTools {
		for _, f := range fs {
			theirs[f] = true
		}
	}
	var known []string
	for f := range ours {
		known = append(known, f)
	}
	for _, d := range operatorDocs(t) {
		for _, code := range codeSpans(d.text) {
			for _, m := range flagMention.FindAllStringSubmatch(code.text, -1) {
				f := m[1]
				if len(ours[f]) > 0 || theirs[f] {
					continue
				}
				t.Errorf("%s:%d: flag --%s is no flag of pvrescue-agent, pvrescue-webhook, kubectl-pvrescue or pvrescue-sidecar (nor of a tool in otherTools)%s",
					d.path, lineOf(d.text, code.off), f, suggest(f, known))
			}
		}
	}
}

// span is inline code or a fenced block, with its offset.
type span struct {
	text string
	off  int
}

var (
	fenced = regexp.MustCompile("(?s)```[a-z]*\n(.*?)\n```")
	inline = regexp.MustCompile("`[^`\n]+`")
)

func codeSpans(text string) []span {
	var out []span
	for _, m := range fenced.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, span{text[m[2]:m[3]], m[2]})
	}
	rest := fenced.ReplaceAllStringFunc(text, func(s string) string { return strings.Repeat(" ", len(s)) })
	for _, m := range inline.FindAllStringIndex(rest, -1) {
		out = append(out, span{rest[m[0]:m[1]], m[0]})
	}
	return out
}

// ---- defaults named in prose ----

// proseDefault: a configuration key in backticks followed by its value, as the docs write a
// default: "`s3.bridgeAfter` (10 s)", "`s3.checkInterval`, 1 min", "`s3.driverDownBridgeAfter`,
// default 0", "`s3.bridgeFlapLimit` (5)". An explicit assignment ("`key` 0 means …") is not a
// default and is not matched when the value is followed by a word other than a unit.
var proseDefault = regexp.MustCompile("`([a-z][A-Za-z0-9]*(?:\\.[a-z][A-Za-z0-9]*)+)`(?: \\(|, (?:default )?)(-?[0-9]+(?:\\.[0-9]+)?)(?: ?(ms|s|min|h|MB|%))?[),;:. ]")

// Every default the docs state for a configuration key (as in proseDefault) is config.Default()'s.
func TestProseDefaultsMatchConfig(t *testing.T) {
	keys, err := configref.Keys(filepath.Join(root, "internal", "config"))
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{}
	for _, k := range keys {
		defaults[k.Path] = k.Default
	}
	n := 0
	for _, d := range operatorDocs(t) {
		for _, m := range proseDefault.FindAllStringSubmatchIndex(d.text, -1) {
			key, num, unit := d.text[m[2]:m[3]], d.text[m[4]:m[5]], ""
			if m[6] >= 0 {
				unit = d.text[m[6]:m[7]]
			}
			def, ok := defaults[key]
			if !ok || def == "" {
				continue // not a config key (a values.yaml key, a metric) or a map's entry
			}
			n++
			if got, want, ok := sameDefault(num, unit, def); !ok {
				t.Errorf("%s:%d: the docs say `%s` is %s%s by default; internal/config's default is %s (%s ≠ %s)",
					d.path, lineOf(d.text, m[0]), key, num, unit, def, got, want)
			}
		}
	}
	if n < 5 {
		t.Errorf("found %d stated defaults: the pattern no longer matches how the docs write them", n)
	}
	t.Logf("%d defaults stated in the docs checked against internal/config", n)
}

// sameDefault compares a number with an optional unit to the JSON of a default.
func sameDefault(num, unit, def string) (string, string, bool) {
	var s string
	if err := yaml.Unmarshal([]byte(def), &s); err == nil && s != "" {
		if dd, err := time.ParseDuration(s); err == nil {
			f, _ := strconv.ParseFloat(num, 64)
			mult := map[string]time.Duration{"": time.Second, "s": time.Second, "ms": time.Millisecond, "min": time.Minute, "h": time.Hour}[unit]
			if unit != "" && mult == 0 {
				return num + unit, dd.String(), false
			}
			got := time.Duration(f * float64(mult))
			if f == 0 {
				got = 0
			}
			return got.String(), dd.String(), got == dd
		}
		return num + unit, s, num+unit == s
	}
	return num, def, strings.TrimSpace(def) == num
}

// ---- shell blocks ----

// Every ```sh block of docs/operations.md and the chart README parses (bash -n), and every value
// it sets on a helm command (--set, --set-string) is a key of the chart's values.yaml.
func TestShellBlocksParseAndValuesExist(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash missing")
	}
	b, err := os.ReadFile(filepath.Join(root, "charts", "pvrescue", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	sh := regexp.MustCompile("(?s)```sh\n(.*?)\n```")
	set := regexp.MustCompile(`--set(?:-string)?[ =]([^ \\\n]+)`)
	blocks := 0
	for _, d := range readDocs(t, []string{"docs/operations.md", "charts/pvrescue/README.md", "README.md"}) {
		for _, m := range sh.FindAllStringSubmatchIndex(d.text, -1) {
			block := d.text[m[2]:m[3]]
			blocks++
			cmd := exec.Command(bash, "-n")
			cmd.Stdin = strings.NewReader(block)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s:%d: the shell block does not parse (bash -n: %v): %s\n%s", d.path, lineOf(d.text, m[0]), err, out, block)
			}
			for _, sm := range set.FindAllStringSubmatch(block, -1) {
				for _, assign := range splitSet(sm[1]) {
					key, _, _ := strings.Cut(assign, "=")
					if !valueExists(values, key) {
						t.Errorf("%s:%d: %s sets %q, which charts/pvrescue/values.yaml does not have", d.path, lineOf(d.text, m[0]), sm[0], key)
					}
				}
			}
		}
	}
	if blocks < 5 {
		t.Errorf("read %d shell blocks: expected the docs' ```sh fences", blocks)
	}
}

// splitSet splits helm's a=1,b=2 (commas inside $(…) kept).
func splitSet(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// valueExists: the dotted key is in values (a map's free entries, e.g. under config or
// nodeSelector, accept any name below them; list indexes as name[0]).
func valueExists(values map[string]any, key string) bool {
	cur := any(values)
	for _, p := range strings.Split(key, ".") {
		p, _, _ = strings.Cut(p, "[")
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		v, ok := m[p]
		if !ok {
			return len(m) == 0 // an empty map ({}) takes any key
		}
		if p == "config" {
			return true // the agent's configuration: checked by TestConfigExamplesParse
		}
		cur = v
	}
	return true
}

// ---- e2e/README.md and BENCHMARKS.md ----

var (
	testName = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)`")
	repoPath = regexp.MustCompile("`((?:e2e|hack|bench|cmd|internal|nodeagent|webhook|sidecar|charts|manifests|monitoring|docs)/[A-Za-z0-9_./-]+)`")
)

// The tests and files e2e/README.md and BENCHMARKS.md name exist.
func TestE2EReadmeAndBenchmarksNames(t *testing.T) {
	idents := goIdentifiers(t)
	for _, d := range readDocs(t, []string{"e2e/README.md", "BENCHMARKS.md"}) {
		for _, m := range testName.FindAllStringSubmatchIndex(d.text, -1) {
			if name := d.text[m[2]:m[3]]; !idents[name] {
				t.Errorf("%s:%d: %s names test %s, which no Go file declares", d.path, lineOf(d.text, m[0]), d.path, name)
			}
		}
		for _, m := range repoPath.FindAllStringSubmatchIndex(d.text, -1) {
			p := strings.TrimRight(d.text[m[2]:m[3]], ".")
			if strings.ContainsAny(p, "*<>") {
				continue
			}
			paths := []string{filepath.Join(root, p)}
			if strings.HasPrefix(d.path, "e2e/") {
				paths = append(paths, filepath.Join(root, "e2e", p))
			}
			if !slices.ContainsFunc(paths, func(q string) bool { _, err := os.Stat(q); return err == nil }) {
				t.Errorf("%s:%d: %s names %s, which is not in the tree", d.path, lineOf(d.text, m[0]), d.path, p)
			}
		}
	}
}

var _ = fmt.Sprint
