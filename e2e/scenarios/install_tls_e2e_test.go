//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// TestInstallExistingSecret installs with tls.mode=existingSecret as docs/operations.md says, on a
// cluster of its own (`tls`, no cert-manager): its commands run first (a CA and a serving
// certificate made with openssl, the release namespace, the Secret), then the README's install
// block in the same shell with the flags operations.md gives added to the helm line — Helm 4,
// `helm install --wait` (readmeInstall: pulled images proven, a pod of the opted-in namespace
// mutated, which failurePolicy Ignore would let through unmutated if the apiserver could not
// verify the webhook's certificate). Then: the webhook configuration trusts that CA and no other,
// it verifies the Secret's certificate for the Service's name, the webhook pods mount that Secret,
// and the chart made no certificate Secret of its own. Then operations.md's `helm upgrade --wait`
// changes a value in place (readmeUpgradeInPlace, Helm 4), and all of that still holds, with the
// operator's Secret the same object. TestInstallHelm3 (cert-manager), TestHelm and
// TestUpgradeRollback (bootstrap) install the other two modes with --wait.
func TestInstallExistingSecret(t *testing.T) {
	start := time.Now()
	c := framework.UpWith(t, "tls", func(o *cluster.Options) { o.PullRegistry = true })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	ops, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	secretCmds, flags, err := stack.OperationsExistingSecret(string(ops))
	if err != nil {
		t.Fatal(err)
	}
	secretName := ""
	for i, f := range flags {
		if v, ok := strings.CutPrefix(f, "tls.existingSecret.name="); ok && i > 0 && flags[i-1] == "--set" {
			secretName = v
		}
	}
	if secretName == "" {
		t.Fatalf("operations.md's existingSecret flags %v set no tls.existingSecret.name", flags)
	}
	e := rescueEnv(ctx, t, c)
	t0 := time.Now()
	readmeInstall(ctx, t, e, 4, "e2e-tls-app", flags, secretCmds)
	installTook := time.Since(t0)

	cs := c.Client
	secret, err := cs.CoreV1().Secrets(stack.Namespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the operator's Secret %s: %v", secretName, err)
	}
	// checkTLS: the webhook configuration trusts the operator's CA and no other, the webhook pods
	// mount the operator's Secret and no other, and the chart made no certificate Secret.
	checkTLS := func(when string) *x509.Certificate {
		mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "pvrescue-webhook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		caBundle := mwc.Webhooks[0].ClientConfig.CABundle
		serving := verifyServing(t, caBundle, secret.Data["tls.crt"], "Secret "+secretName+" "+when)
		if bytes.Contains(caBundle, secret.Data["tls.crt"]) {
			t.Errorf("%s: the caBundle holds the serving certificate itself, not the operator's CA", when)
		}
		dep, err := cs.AppsV1().Deployments(stack.Namespace).Get(ctx, stack.WebhookDep, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var mounted []string
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				mounted = append(mounted, v.Secret.SecretName)
			}
		}
		if len(mounted) != 1 || mounted[0] != secretName {
			t.Errorf("%s: the webhook pods mount Secrets %v, want only %s", when, mounted, secretName)
		}
		for _, name := range []string{"pvrescue-webhook-tls", "pvrescue-ca"} {
			if _, err := cs.CoreV1().Secrets(stack.Namespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s: Secret %s (cert-manager's and bootstrap's) exists with tls.mode=existingSecret: %v", when, name, err)
			}
		}
		return serving
	}
	serving := checkTLS("after helm install")
	// An in-place helm upgrade --wait (Helm 4, the install's CLI) keeps all of it:
	// --reset-then-reuse-values keeps the tls.* values set at install.
	upgradeTook := readmeUpgradeInPlace(ctx, t, e, 4, "e2e-tls-app")
	checkTLS("after helm upgrade")
	if now, err := cs.CoreV1().Secrets(stack.Namespace).Get(ctx, secretName, metav1.GetOptions{}); err != nil || now.UID != secret.UID || !bytes.Equal(now.Data["tls.crt"], secret.Data["tls.crt"]) {
		t.Errorf("the operator's Secret %s was replaced or changed across helm upgrade (%v)", secretName, err)
	}
	t.Logf("RESULT tls.mode=existingSecret: operations.md's Secret commands and the README's install (Helm 4, --wait) in %s; helm upgrade --wait in place in %s; caBundle is the operator's CA (%s), verifies %s's certificate before and after; %s since the start of the test (cluster and S3 included)",
		installTook.Round(100*time.Millisecond), upgradeTook.Round(100*time.Millisecond), serving.Issuer.CommonName, secretName, time.Since(start).Round(100*time.Millisecond))
}
