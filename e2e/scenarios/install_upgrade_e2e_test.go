//go:build e2e

package scenarios

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// inPlaceValues is what readmeUpgradeInPlace changes, as docs/operations.md says to change a value
// in place (`helm upgrade … --reset-then-reuse-values --set webhook.timeoutSeconds=3`): the
// webhook's timeout (its configuration) and its CPU request (its pod template: the Deployment
// rolls).
var inPlaceValues = []string{"--set", "webhook.timeoutSeconds=3", "--set", "webhook.resources.requests.cpu=60m"}

// inPlaceUpgradeWithin bounds `helm upgrade --wait`: Helm's own --timeout (helm fails after it),
// and the commands are killed a minute later. The roll of two webhook replicas takes seconds here.
const inPlaceUpgradeWithin = 2 * time.Minute

// readmeUpgradeInPlace runs docs/operations.md's `helm upgrade … --wait` line on the install
// readmeInstall made, with the Helm CLI of that major — the same chart reference and version (no
// new push), in the same Helm homes — with --plain-http, --timeout inPlaceUpgradeWithin and
// inPlaceValues added. It checks that the command returned 0; that when it returned the webhook
// Deployment had rolled (a new generation observed, one new ReplicaSet with the new CPU request
// and every replica ready); that the roll completes with no old pod left; that the new timeout
// reached the webhook configuration; and that a new pod of appNS is mutated. It returns how long
// helm took.
func readmeUpgradeInPlace(ctx context.Context, t *testing.T, e *env, major int, appNS string) time.Duration {
	t.Helper()
	c := e.c
	repo := testenv.RepoRoot()
	version, err := stack.HelmCLIVersion(repo, major)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(filepath.Join(repo, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	upgradeCmds, _, err := stack.OperationsUpgradeCommands(string(ops), c.PullRegistry.Host+"/pvrescue")
	if err != nil {
		t.Fatal(err)
	}
	// Only the helm upgrade line: the version installed is the one pushed, nothing new to publish.
	i := strings.Index(upgradeCmds, "\nhelm upgrade ")
	if i < 0 {
		t.Fatalf("no helm upgrade line in operations.md's upgrade commands:\n%s", upgradeCmds)
	}
	cmds, err := stack.AddArgs(upgradeCmds[i+1:], "helm upgrade ", append([]string{"--plain-http", "--timeout", inPlaceUpgradeWithin.String()}, inPlaceValues...))
	if err != nil {
		t.Fatal(err)
	}

	cs := c.Client
	deps := cs.AppsV1().Deployments(stack.Namespace)
	before, err := deps.Get(ctx, stack.WebhookDep, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldRS := map[string]bool{}
	for _, rs := range webhookReplicaSets(ctx, t, e) {
		oldRS[rs.Name] = true
	}
	oldPods := podNames(ctx, t, cs)

	upCtx, cancel := context.WithTimeout(ctx, inPlaceUpgradeWithin+time.Minute)
	defer cancel()
	t0 := time.Now()
	out, err := stack.RunCommands(upCtx, c, stack.CommandsRun{
		Repo: repo, Commands: cmds, Name: "readme-helm-" + version,
		CLIs: stack.CLIs{Helm: stack.HelmCLIPath(repo, version)},
	})
	took := time.Since(t0)
	t.Logf("operations.md's helm upgrade line (Helm %s, in place, %v), %s:\n%s", version, inPlaceValues, took.Round(100*time.Millisecond), out)
	if err != nil {
		t.Fatalf("helm upgrade --wait --timeout %s: %v", inPlaceUpgradeWithin, err)
	}

	// What --wait promised, read at once: the new template observed and all its replicas ready.
	dep, err := deps.Get(ctx, stack.WebhookDep, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	if dep.Generation <= before.Generation || dep.Status.ObservedGeneration < dep.Generation {
		t.Errorf("Deployment %s after helm upgrade --wait: generation %d (before %d), observed %d: the roll was not started or not observed",
			stack.WebhookDep, dep.Generation, before.Generation, dep.Status.ObservedGeneration)
	}
	var rolled []string
	for _, rs := range webhookReplicaSets(ctx, t, e) {
		if oldRS[rs.Name] || rs.Status.Replicas == 0 {
			continue
		}
		cpu := rs.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
		rolled = append(rolled, fmt.Sprintf("%s (cpu %s, %d/%d ready)", rs.Name, cpu.String(), rs.Status.ReadyReplicas, want))
		if cpu.String() != "60m" || rs.Status.ReadyReplicas != want {
			t.Errorf("new ReplicaSet %s when helm upgrade --wait returned: cpu request %s, %d/%d replicas ready; want 60m, all ready",
				rs.Name, cpu.String(), rs.Status.ReadyReplicas, want)
		}
	}
	if len(rolled) != 1 {
		t.Errorf("new ReplicaSets of %s after helm upgrade --wait: %v, want one", stack.WebhookDep, rolled)
	}
	if err := stack.WaitWebhookRolledOut(ctx, c); err != nil {
		t.Fatal(err)
	}
	for p := range podNames(ctx, t, cs) {
		if oldPods[p] {
			t.Errorf("webhook pod %s survived helm upgrade: the Deployment did not roll", p)
		}
	}
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "pvrescue-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := mwc.Webhooks[0].TimeoutSeconds; got == nil || *got != 3 {
		t.Errorf("timeoutSeconds after helm upgrade = %v, want 3", got)
	}
	mutated := time.Now()
	waitMutated(ctx, t, e, appNS, 30*time.Second)
	t.Logf("RESULT helm upgrade --wait in place (Helm %s): returned 0 in %s; Deployment %s generation %d → %d, new ReplicaSet %v; a pod of %s mutated %s after the roll completed",
		version, took.Round(100*time.Millisecond), stack.WebhookDep, before.Generation, dep.Generation, rolled, appNS, time.Since(mutated).Round(100*time.Millisecond))
	return took
}

// webhookReplicaSets are the webhook Deployment's ReplicaSets, old and new.
func webhookReplicaSets(ctx context.Context, t *testing.T, e *env) []appsv1.ReplicaSet {
	t.Helper()
	l, err := e.c.Client.AppsV1().ReplicaSets(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + stack.WebhookDep})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// waitMutated waits until a pod created in ns (server dry-run: through the webhook, nothing
// stored) comes back mutated; failurePolicy Ignore admits it unmutated while the apiserver cannot
// reach or verify the webhook.
func waitMutated(ctx context.Context, t *testing.T, e *env, ns string, within time.Duration) {
	t.Helper()
	waitFor(t, within, "a pod created in "+ns+" to be mutated", func() (bool, string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "probe"},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr(false),
				Containers: []corev1.Container{{Name: "app", Image: e.c.BusyboxImage,
					VolumeMounts: []corev1.VolumeMount{{Name: "bucket", MountPath: "/data"}}}},
				Volumes: []corev1.Volume{{Name: "bucket", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
					Driver: e.csi.Driver, VolumeAttributes: map[string]string{"bucket": "b"}}}}},
			},
		}
		got, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		return got.Annotations[contract.AnnotationStatus] != "", "admitted without mutation (webhook not reachable yet: failurePolicy Ignore)"
	})
}

// verifyServing checks that caBundle (the webhook configuration's) verifies the serving
// certificate certPEM (a Secret's tls.crt) for the webhook Service's name, and returns it.
func verifyServing(t *testing.T, caBundle, certPEM []byte, what string) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		t.Fatalf("the webhook configuration's caBundle holds no PEM certificate: %q", caBundle)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatalf("%s: tls.crt is no PEM", what)
	}
	serving, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	svcName := stack.WebhookDep + "." + stack.Namespace + ".svc"
	if _, err := serving.Verify(x509.VerifyOptions{DNSName: svcName, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the caBundle does not verify %s's certificate for %s: %v", what, svcName, err)
	}
	return serving
}
