package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/pvrescue/pvrescue/charts"

	// Each controller registers itself with controllerpkg.Known(); each issuer type with the issuer factory.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// certManagerControllers are the cert-manager v1.21.2 controllers manifests/certificates.yaml needs
// (self-signed and CA issuers); e2e/certmanager's integration test runs the same wiring.
var certManagerControllers = []string{
	"issuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-selfsigned",
	"certificaterequests-issuer-ca",
	"certificates-trigger",
	"certificates-issuing",
	"certificates-key-manager",
	"certificates-readiness",
	"certificates-request-manager",
	"certificates-revision-manager",
}

// CertManager is cert-manager's controllers and cainjector running in this process.
// Deviation: a real install runs cert-manager's Deployments; no image can be pulled here, so its
// own controller packages run in-process against the cluster (same code, same CRDs).
type CertManager struct {
	stop func()
}

// Stop ends the controllers.
func (m *CertManager) Stop() { m.stop() }

// CertManagerCRDDir is deploy/crds of the cert-manager module in the module cache; dir is a
// directory of the e2e module ("" for the current one).
func CertManagerCRDDir(dir string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		return "", fmt.Errorf("locate the cert-manager module (go mod download in e2e/): %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds"), nil
}

// CertManagerOptions says how StartCertManager runs cert-manager.
type CertManagerOptions struct {
	Kubeconfig string // file cert-manager's controllers connect with
	// CRDDir holds the CRDs to install first; "" when they are installed already (envtest).
	CRDDir string
	Log    logr.Logger
	// QPS and Burst of the controllers' client (defaults 100 and 200).
	QPS   float32
	Burst int
	// Certificates tunes the certificate controllers (backoffs); zero is cert-manager's default.
	Certificates controllerpkg.CertificateOptions
	// OnError, when set, hears a controller or the cainjector ending with an error.
	OnError func(component string, err error)
}

// StartCertManager installs cert-manager's CRDs (when asked) and starts its controllers and
// cainjector, as `cert-manager controller` and `cert-manager cainjector` wire them.
func StartCertManager(ctx context.Context, cfg *rest.Config, o CertManagerOptions) (*CertManager, error) {
	if o.CRDDir != "" {
		if err := installCRDs(ctx, cfg, o.CRDDir); err != nil {
			return nil, err
		}
	}
	if o.QPS == 0 {
		o.QPS, o.Burst = 100, 200
	}
	report := func(component string, err error) {
		if err != nil && o.OnError != nil {
			o.OnError(component, err)
		}
	}
	log := o.Log
	ctx, cancel := context.WithCancel(ctx)
	cmCtx := logf.NewContext(ctx, log, "cert-manager")
	factory, err := controllerpkg.NewContextFactory(cmCtx, controllerpkg.ContextOptions{
		Kubeconfig:         o.Kubeconfig,
		KubernetesAPIQPS:   o.QPS,
		KubernetesAPIBurst: o.Burst,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: "kube-system"},
		CertificateOptions: o.Certificates,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cert-manager context: %w", err)
	}
	var wg sync.WaitGroup
	m := &CertManager{stop: func() { cancel(); wg.Wait() }}
	for _, name := range certManagerControllers {
		construct, ok := controllerpkg.Known()[name]
		if !ok {
			m.stop()
			return nil, fmt.Errorf("cert-manager controller %q is not registered", name)
		}
		c, err := construct(factory)
		if err != nil {
			m.stop()
			return nil, fmt.Errorf("construct %s: %w", name, err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); report(name, c.Run(2, cmCtx)) }()
	}
	shared, err := factory.Build()
	if err != nil {
		m.stop()
		return nil, err
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, cmapi.AddToScheme} {
		if err := add(scheme); err != nil {
			m.stop()
			return nil, err
		}
	}
	ctrl.SetLogger(log.WithName("cainjector"))
	// The cainjector's server-side apply field manager is derived from the user agent.
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.UserAgent = "cert-manager-cainjector/v1.21.2"
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// controller-runtime refuses a controller name already used in this process; every cluster a
		// test binary brings up (TestInstallHelm3, then TestPVRescue) starts its own cainjector.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		m.stop()
		return nil, err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor:        map[string]bool{"mutatingwebhookconfiguration": true},
	}); err != nil {
		m.stop()
		return nil, fmt.Errorf("cainjector: %w", err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); report("cainjector", mgr.Start(ctx)) }()
	return m, nil
}

// installCRDs applies every CustomResourceDefinition in dir and waits until each is Established.
func installCRDs(ctx context.Context, cfg *rest.Config, crdDir string) error {
	crdScheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(crdScheme); err != nil {
		return err
	}
	cl, err := client.New(cfg, client.Options{Scheme: crdScheme})
	if err != nil {
		return err
	}
	files, _ := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if len(files) == 0 {
		return fmt.Errorf("no CRDs in %s", crdDir)
	}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		objs, err := charts.SplitYAML(b)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if err := applyObject(ctx, cl, o); err != nil {
				return err
			}
			names = append(names, o.GetName())
		}
	}
	for _, n := range names {
		if err := waitEstablished(ctx, cl, n); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, cl client.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, crd); err == nil {
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not Established within a minute", name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
