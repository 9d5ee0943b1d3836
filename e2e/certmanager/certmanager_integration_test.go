//go:build integration

package certmanager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"gomodules.xyz/jsonpatch/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/pvrescue/pvrescue/certs"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/manifests"
)

const annotationServed = "pvrescue.io/e2e-admitted"

// startAPIServer is testenv's control plane with cert-manager's CRDs plus
// --enable-aggregator-routing, so that the apiserver calls the webhook Service through its
// EndpointSlice (there is no kube-proxy here), with TLS verified for the Service's DNS name
// exactly as in a cluster.
func startAPIServer(t *testing.T) (*envtest.Environment, *rest.Config) {
	t.Helper()
	crds, err := stack.CertManagerCRDDir("")
	if err != nil {
		t.Fatal(err)
	}
	return testenv.ControlPlane{CRDDirs: []string{crds},
		APIServerFlags: map[string]string{"enable-aggregator-routing": "true"}}.Start(t)
}

// hostIP is a non-loopback address of this machine: Endpoints may not point at loopback.
func hostIP(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP
		}
	}
	t.Fatalf("no non-loopback IPv4 address on this machine for the webhook endpoint")
	return nil
}

func freePort(t *testing.T, ip net.IP) int {
	t.Helper()
	p, err := testenv.PickPort(ip.String())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startCertManager runs cert-manager's controllers and its cainjector (e2e/stack's wiring) until
// the test ends, with a user of its own and certificate backoffs long enough that a renewal is
// the rotation under test, not a retry.
func startCertManager(ctx context.Context, t *testing.T, env *envtest.Environment, cfg *rest.Config) {
	t.Helper()
	user, err := env.AddUser(envtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := stack.StartCertManager(ctx, cfg, stack.CertManagerOptions{
		Kubeconfig: kcPath,
		Log:        testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
		QPS:        200,
		Burst:      400,
		Certificates: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		OnError: func(component string, err error) { t.Errorf("cert-manager %s: %v", component, err) },
	})
	if err != nil {
		t.Fatalf("start cert-manager: %v", err)
	}
	// Stop the controllers before the apiserver (cleanups run last-in first-out).
	t.Cleanup(m.Stop)
}

// certDir mimics a kubelet Secret volume: files are symlinks through ..data, which is swapped
// atomically on update — the layout certwatcher sees in a pod.
type certDir struct {
	dir string
	gen int
}

func (d *certDir) write(data map[string][]byte) error {
	d.gen++
	ts := filepath.Join(d.dir, fmt.Sprintf("..gen_%d", d.gen))
	if err := os.Mkdir(ts, 0o755); err != nil {
		return err
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(ts, k), v, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		return err
	}
	for k := range data {
		link := filepath.Join(d.dir, k)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				return err
			}
		}
	}
	return nil
}

func serial(t *testing.T, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatalf("no certificate in %q", certPEM)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// servedSerial dials the webhook as the apiserver would (the Service DNS name, the caBundle as roots).
func servedSerial(addr, serverName string, bundle []byte) (string, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return "", errors.New("empty caBundle")
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12})
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }() // a probe connection; nothing to report
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func poll(ctx context.Context, t *testing.T, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("%s: not reached within %s: %v", what, timeout, err)
	}
	t.Logf("%s after %s", what, time.Since(start).Round(10*time.Millisecond))
}

func TestCertManagerIssuesInjectsAndRotatesUnderLoad(t *testing.T) {
	env, cfg := startAPIServer(t)
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	t.Cleanup(cancel)
	cs := kubernetes.NewForConfigOrDie(cfg)
	cm := cmclient.NewForConfigOrDie(cfg)
	names := certs.DefaultNames()
	ns := names.Namespace

	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startCertManager(ctx, t, env, cfg)

	// The chain, from the same Go objects the unit test proves equal to manifests/certificates.yaml.
	objs := certs.Objects(names)
	for _, iss := range []*cmapi.Issuer{objs.SelfSignedIssuer, objs.CAIssuer} {
		if _, err := cm.CertmanagerV1().Issuers(ns).Create(ctx, iss, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, crt := range []*cmapi.Certificate{objs.CACertificate, objs.Serving} {
		if _, err := cm.CertmanagerV1().Certificates(ns).Create(ctx, crt, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ready := func(name string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			crt, err := cm.CertmanagerV1().Certificates(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return apiutil.CertificateHasCondition(crt, cmapi.CertificateCondition{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue}), nil
		}
	}
	poll(ctx, t, "CA Certificate Ready", 90*time.Second, ready(objs.CACertificate.Name))
	poll(ctx, t, "serving Certificate Ready", 90*time.Second, ready(objs.Serving.Name))

	secret, err := cs.CoreV1().Secrets(ns).Get(ctx, objs.Serving.Spec.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caSecret, err := cs.CoreV1().Secrets(ns).Get(ctx, objs.CACertificate.Spec.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	serverName := certs.DNSNames(names.Service, ns)[0]
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		t.Fatalf("serving Secret has no ca.crt")
	}
	if string(secret.Data["ca.crt"]) != string(caSecret.Data["tls.crt"]) {
		t.Fatalf("ca.crt of the serving Secret is not the CA certificate")
	}
	leafBlock, _ := pem.Decode(secret.Data["tls.crt"])
	leaf, err := x509.ParseCertificate(leafBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: serverName}); err != nil {
		t.Fatalf("serving certificate is not valid for %s under the CA: %v", serverName, err)
	}
	firstSerial := leaf.SerialNumber.String()
	t.Logf("serving certificate %s for %v issued by %s", firstSerial, leaf.DNSNames, leaf.Issuer.CommonName)

	// The webhook: controller-runtime's server (certwatcher) on a kubelet-like Secret volume.
	ip := hostIP(t)
	port := freePort(t, ip)
	cd := &certDir{dir: t.TempDir()}
	if err := cd.write(secret.Data); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	srv := webhook.NewServer(webhook.Options{Host: ip.String(), Port: port, CertDir: cd.dir})
	srv.Register("/mutate-v1-pod", &webhook.Admission{Handler: admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		n := calls.Add(1)
		return admission.Patched("", jsonpatch.JsonPatchOperation{Operation: "add", Path: "/metadata/annotations/" + strings.ReplaceAll(annotationServed, "/", "~1"), Value: strconv.FormatInt(n, 10)})
	})})
	go func() {
		if err := srv.Start(ctx); err != nil {
			t.Errorf("webhook server: %v", err)
		}
	}()
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	poll(ctx, t, "webhook serving TLS", 30*time.Second, func(context.Context) (bool, error) {
		_, err := servedSerial(addr, serverName, secret.Data["ca.crt"])
		return err == nil, nil
	})

	// Kubelet's part: copy Secret updates into the volume, as a mounted Secret is refreshed.
	go func() {
		last := secret.ResourceVersion
		for ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			s, err := cs.CoreV1().Secrets(ns).Get(ctx, secret.Name, metav1.GetOptions{})
			if err != nil || s.ResourceVersion == last {
				continue
			}
			last = s.ResourceVersion
			if err := cd.write(s.Data); err != nil {
				t.Errorf("update cert volume: %v", err)
			}
		}
	}()

	// Service + EndpointSlice (and Endpoints) pointing at the webhook; the webhook configuration
	// from manifests/, whose caBundle the cainjector must fill.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: names.Service, Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(port))}}},
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	portName, port32, tcp, readyTrue := "https", int32(port), corev1.ProtocolTCP, true
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: names.Service + "-e2e", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: names.Service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &readyTrue}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port32, Protocol: &tcp}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	//nolint:staticcheck // Endpoints too, for resolvers that still read them.
	if _, err := cs.CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: names.Service, Namespace: ns},
		Subsets:    []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: ip.String()}}, Ports: []corev1.EndpointPort{{Name: "https", Port: port32, Protocol: tcp}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := manifests.Find("mutatingwebhookconfiguration.yaml", admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"), certs.DefaultWebhookConfig, &mwc); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bundle := func(ctx context.Context) []byte {
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{})
		if err != nil || len(m.Webhooks) == 0 {
			return nil
		}
		return m.Webhooks[0].ClientConfig.CABundle
	}
	poll(ctx, t, "caBundle injected by the cainjector", 60*time.Second, func(ctx context.Context) (bool, error) {
		return string(bundle(ctx)) == string(secret.Data["ca.crt"]), nil
	})
	injected := bundle(ctx)

	// Admissions through the apiserver: dry-run pod creates in an opted-in namespace, so nothing is
	// stored but the mutating webhook runs. failurePolicy is Ignore, so a failed call would NOT fail
	// the create: success is the webhook's annotation on the returned pod.
	demo := "demo"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demo, Labels: map[string]string{"pvrescue.io/inject": "enabled"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(demo).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	admit := func(ctx context.Context, i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d", i), Namespace: demo, Annotations: map[string]string{"e2e": "load"}},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
			},
		}
		got, err := cs.CoreV1().Pods(demo).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		if got.Annotations[annotationServed] == "" {
			return errors.New("admitted without the webhook (its call failed and failurePolicy Ignore hid it)")
		}
		return nil
	}
	poll(ctx, t, "first admission through the apiserver to the webhook", 30*time.Second, func(ctx context.Context) (bool, error) {
		return admit(ctx, 0) == nil, nil
	})

	// Rotation under load: workers admit pods continuously; meanwhile the serving certificate is
	// renewed the way `cmctl renew` does it (condition Issuing=True), the new Secret reaches the
	// volume, and certwatcher must serve it without a restart.
	var total, failures atomic.Int64
	var failMu sync.Mutex
	var failMsgs []string
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	const workers = 4
	for w := 0; w < workers; w++ {
		load.Add(1)
		go func() {
			defer load.Done()
			for loadCtx.Err() == nil {
				i := int(total.Add(1))
				if err := admit(ctx, i); err != nil {
					failures.Add(1)
					failMu.Lock()
					if len(failMsgs) < 5 {
						failMsgs = append(failMsgs, err.Error())
					}
					failMu.Unlock()
				}
			}
		}()
	}
	waitTotal := func(n int64) {
		poll(ctx, t, fmt.Sprintf("%d admissions under load", n), 60*time.Second, func(context.Context) (bool, error) { return total.Load() >= n, nil })
	}
	waitTotal(100)

	crt, err := cm.CertmanagerV1().Certificates(ns).Get(ctx, objs.Serving.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiutil.SetCertificateCondition(crt, crt.Generation, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue, "ManuallyTriggered", "Certificate re-issuance manually triggered by the pvrescue e2e test")
	if _, err := cm.CertmanagerV1().Certificates(ns).UpdateStatus(ctx, crt, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("trigger renewal: %v", err)
	}
	var newSerial string
	poll(ctx, t, "renewed serving certificate in the Secret", 90*time.Second, func(ctx context.Context) (bool, error) {
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, secret.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		newSerial = serial(t, s.Data["tls.crt"])
		return newSerial != firstSerial, nil
	})
	poll(ctx, t, "webhook serving the renewed certificate (certwatcher, no restart)", 60*time.Second, func(context.Context) (bool, error) {
		got, err := servedSerial(addr, serverName, injected)
		return err == nil && got == newSerial, nil
	})
	waitTotal(total.Load() + 100)
	stopLoad()
	load.Wait()

	n, failed := total.Load(), failures.Load()
	t.Logf("rotation under load: N=%d admissions through the apiserver, %d failed, webhook handled %d calls; serial %s -> %s", n, failed, calls.Load(), firstSerial, newSerial)
	if failed != 0 {
		t.Errorf("%d of %d admissions failed during the rotation, e.g. %v", failed, n, failMsgs)
	}
	if string(bundle(ctx)) != string(injected) {
		t.Errorf("the caBundle changed when the serving certificate was renewed")
	}
}
