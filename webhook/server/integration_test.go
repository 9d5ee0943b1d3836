//go:build integration

package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/webhook"
)

// warningRecorder collects the admission warnings the API server passes to the client.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

func TestIntegrationWebhook(t *testing.T) {
	ctrllog.SetLogger(testr.New(t))
	_, restCfg := testenv.APIServer(t)

	certDir := t.TempDir()
	caPEM := writeServingCert(t, certDir, "127.0.0.1")
	port, healthPort := testenv.FreePort(t), testenv.FreePort(t)

	reg := prometheus.NewRegistry()
	mgr, err := NewManager(restCfg, Options{
		Config: testConfig(), Namespace: "pvrescue-system", CertDir: certDir, Host: "127.0.0.1", Port: port,
		MetricsBindAddress: "0", HealthProbeBindAddress: fmt.Sprintf("127.0.0.1:%d", healthPort), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	mgrCtx, stopWebhook := context.WithCancel(context.Background())
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stopWebhook()
		if err := <-mgrDone; err != nil {
			t.Errorf("webhook manager: %v", err)
		}
	})

	testenv.WaitFor(t, 30*time.Second, "webhook /readyz", func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort))
		if err != nil {
			return err
		}
		_ = resp.Body.Close() // only the status is read
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	checkTLS(t, port, caPEM)

	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(restCfg)
	cfg.WarningHandler = warnings
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	mwc := webhook.NewMutatingWebhookConfiguration(webhook.ConfigurationOptions{
		Namespace: "pvrescue-system", CABundle: caPEM, URL: fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.Path),
	})
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register configuration: %v", err)
	}

	enabled := map[string]string{contract.LabelInject: contract.LabelInjectEnabled}
	secure := map[string]string{contract.LabelInject: contract.LabelInjectEnabled,
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
	for name, labels := range map[string]map[string]string{"apps": enabled, "plain": nil, "pvrescue-system": enabled, "secure": secure} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// kube-system carries the opt-in label too: the selector and the handler must still leave it alone.
	ks, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ks.Labels[contract.LabelInject] = contract.LabelInjectEnabled
	if _, err := cs.CoreV1().Namespaces().Update(ctx, ks, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"apps", "plain", "pvrescue-system", "kube-system", "secure"} {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "local-ssd"}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)},
		{ObjectMeta: metav1.ObjectMeta{Name: "s3"}, Provisioner: "ru.yandex.s3.csi"},
	} {
		if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"apps", "plain", "kube-system", "secure"} {
		for _, p := range []*corev1.PersistentVolumeClaim{
			claim("data1", "local-ssd", corev1.PersistentVolumeBlock),
			claim("bucket", "s3", corev1.PersistentVolumeFilesystem),
		} {
			if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The API server picks up a new configuration asynchronously: dry-run until it is in effect.
	testenv.WaitFor(t, 30*time.Second, "configuration in effect", func() error {
		p, err := cs.CoreV1().Pods("apps").Create(ctx, workload("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if _, ok := p.Annotations[contract.AnnotationStatus]; !ok {
			return errors.New("pod not mutated yet")
		}
		return nil
	})
	warnings.take()

	t.Run("labelled namespace: pod mutated and stored", func(t *testing.T) {
		p, err := cs.CoreV1().Pods("apps").Create(ctx, workload("db"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := cs.CoreV1().Pods("apps").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		assertMutated(t, got)
		// The API server re-admits nothing more: our own output is a fixed point of the mutation.
		again := got.DeepCopy()
		cls := (&webhook.Classifier{Config: testConfig(), Lookup: webhook.ReaderLookup{Cache: mgr.GetAPIReader()}}).Classify(ctx, "apps", again)
		webhook.Inject(again, cls, testConfig())
		if !equalJSON(t, got.Spec, again.Spec) || again.Annotations[contract.AnnotationStatus] != got.Annotations[contract.AnnotationStatus] {
			t.Errorf("stored pod is not a fixed point of Mutate")
		}
	})

	// Admissions read the stores of the manager's own informers: reachable through the real
	// cache, and filled (no live reader here to fall back on).
	t.Run("admissions read the informer stores", func(t *testing.T) {
		stores, err := webhook.StoresOf(ctx, mgr.GetCache())
		if err != nil {
			t.Fatal(err)
		}
		l := webhook.ReaderLookup{Stores: stores}
		pvc, err := l.PVC(ctx, "apps", "data1")
		if err != nil || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "local-ssd" {
			t.Errorf("PVC apps/data1 from the store: %v, %v", pvc, err)
		}
		sc, err := l.StorageClass(ctx, "s3")
		if err != nil || sc.Provisioner != "ru.yandex.s3.csi" {
			t.Errorf("StorageClass s3 from the store: %v, %v", sc, err)
		}
		if _, err := l.PV(ctx, "no-such-pv", false); !errors.Is(err, webhook.ErrNotFound) {
			t.Errorf("missing PV: %v, want ErrNotFound", err)
		}
		if _, err := l.PVC(ctx, "apps", "no-such-claim"); !errors.Is(err, webhook.ErrNotFound) {
			t.Errorf("missing claim: %v, want ErrNotFound", err)
		}
	})

	// A claim with a PV is classified by that PV alone (issue 32 item 5), objects as the PV
	// controller leaves them (claimRef with the claim's UID, the claim's status Bound).
	t.Run("bound claims: classified by their PV, only when it names them", func(t *testing.T) {
		// The claim asks for the S3 class and its annotation names the S3 provisioner; the PV is EBS.
		liar := bindClaim(t, cs, "liar", "s3", "pv-liar", "ebs.csi.aws.com", "",
			map[string]string{"volume.kubernetes.io/storage-provisioner": "ru.yandex.s3.csi"})
		// A static S3 PV for a claim without class: the StorageClass path could not tell.
		static := bindClaim(t, cs, "static", "", "pv-static", "ru.yandex.s3.csi", "", nil)
		// An S3 PV whose claimRef names another UID.
		foreign := bindClaim(t, cs, "foreign", "s3", "pv-foreign", "ru.yandex.s3.csi", "00000000-0000-4000-8000-0000000000aa", nil)

		l := webhook.ReaderLookup{Cache: mgr.GetCache(), Live: mgr.GetAPIReader()}
		if pv, err := l.PV(ctx, "pv-static", true); err != nil || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != static.UID {
			t.Fatalf("PV pv-static live: %v, %v", pv, err)
		}
		for _, tc := range []struct {
			claim   string
			probe   bool
			skipped bool
		}{{liar.Name, false, false}, {static.Name, true, false}, {foreign.Name, false, true}} {
			warnings.take()
			p, err := cs.CoreV1().Pods("apps").Create(ctx, s3Pod("pod-"+tc.claim, tc.claim), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatalf("%s: %v", tc.claim, err)
			}
			app := p.Spec.Containers[0]
			if got := app.LivenessProbe != nil; got != tc.probe {
				t.Errorf("claim %s: probe injected = %v, want %v (probe %+v)", tc.claim, got, tc.probe, app.LivenessProbe)
			}
			if msgs := warnings.take(); containsSub(msgs, `volume "data" skipped`) != tc.skipped {
				t.Errorf("claim %s: warnings %q, want skipped=%v", tc.claim, msgs, tc.skipped)
			}
		}
	})

	// The reproduction: a compliant pod in a namespace that both opts in and enforces Pod
	// Security "restricted" is admitted, mutated.
	t.Run("restricted namespace: compliant pod admitted and mutated", func(t *testing.T) {
		w := workload("locked")
		w.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
		p, err := cs.CoreV1().Pods("secure").Create(ctx, w, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		assertMutated(t, p)
	})

	t.Run("missing claim: admitted with a warning", func(t *testing.T) {
		w := workload("orphan")
		w.Spec.Volumes = append(w.Spec.Volumes, corev1.Volume{Name: "gone", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "not-there"}}})
		if _, err := cs.CoreV1().Pods("apps").Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		msgs := warnings.take()
		if !containsSub(msgs, `volume "gone" skipped`) {
			t.Errorf("warnings %q lack the skipped volume", msgs)
		}
	})

	for _, tc := range []struct{ name, ns string }{
		{"unlabelled namespace untouched", "plain"},
		{"kube-system untouched", "kube-system"},
		{"own namespace untouched", "pvrescue-system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := workload("untouched")
			if tc.ns == "pvrescue-system" {
				w.Spec.Volumes = w.Spec.Volumes[:0] // no claims there; the selector alone must exclude it
				w.Spec.Containers[0].VolumeDevices, w.Spec.Containers[0].VolumeMounts = nil, nil
				w.Spec.Volumes = append(w.Spec.Volumes, corev1.Volume{Name: "c", VolumeSource: corev1.VolumeSource{
					CSI: &corev1.CSIVolumeSource{Driver: "ru.yandex.s3.csi"}}})
				w.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "c", MountPath: "/c"}}
			}
			p, err := cs.CoreV1().Pods(tc.ns).Create(ctx, w, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			assertUntouched(t, p)
		})
	}

	t.Run("opted-out pod untouched", func(t *testing.T) {
		w := workload("optout")
		w.Labels = map[string]string{contract.LabelInject: contract.LabelInjectOptOutVal}
		p, err := cs.CoreV1().Pods("apps").Create(ctx, w, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		assertUntouched(t, p)
	})

	t.Run("dry-run create is mutated and stores nothing", func(t *testing.T) {
		p, err := cs.CoreV1().Pods("apps").Create(ctx, workload("dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		assertMutated(t, p)
		if _, err := cs.CoreV1().Pods("apps").Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("dry-run pod exists: err=%v", err)
		}
	})

	t.Run("metrics counted the admissions", func(t *testing.T) {
		if n := counterSum(t, reg, "pvrescue_webhook_admissions_total", webhook.ResultInjected); n < 2 {
			t.Errorf("injected admissions = %v, want >= 2", n)
		}
	})

	t.Run("serving certificate reloaded without restart", func(t *testing.T) {
		newCA := writeServingCert(t, certDir, "127.0.0.1")
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(newCA)
		start := time.Now()
		testenv.WaitFor(t, 30*time.Second, "new certificate served", func() error {
			c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: pool})
			if err != nil {
				return err
			}
			return c.Close()
		})
		t.Logf("new certificate served after %s", time.Since(start).Round(time.Millisecond))
		// Tell the API server about the new CA and check admissions still work end to end.
		cur, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhook.ConfigurationName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Webhooks[0].ClientConfig.CABundle = newCA
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 30*time.Second, "mutation with the new CA", func() error {
			p, err := cs.CoreV1().Pods("apps").Create(ctx, workload("after-rotation"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return err
			}
			if _, ok := p.Annotations[contract.AnnotationStatus]; !ok {
				return errors.New("not mutated")
			}
			return nil
		})
	})

	t.Run("webhook down: pods still admitted (failurePolicy Ignore)", func(t *testing.T) {
		stopWebhook()
		select {
		case err := <-mgrDone:
			if err != nil {
				t.Fatalf("manager stopped with %v", err)
			}
			mgrDone <- nil // for the cleanup
		case <-time.After(90 * time.Second):
			t.Fatal("webhook did not stop")
		}
		start := time.Now()
		p, err := cs.CoreV1().Pods("apps").Create(ctx, workload("unprotected"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("pod refused with the webhook down: %v", err)
		}
		assertUntouched(t, p)
		t.Logf("admitted without the webhook in %s", time.Since(start).Round(time.Millisecond))
	})
}

func claim(name, class string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class), VolumeMode: ptr.To(mode),
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// bindClaim creates in namespace apps claim name (class, annotations) and a CSI PV pvName of
// driver bound to it as the PV controller binds: claimRef with the claim's UID (or refUID when
// set), spec.volumeName, then the claim's status Bound.
func bindClaim(t *testing.T, cs kubernetes.Interface, name, class, pvName, driver string, refUID types.UID, ann map[string]string) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	c := claim(name, class, corev1.PersistentVolumeFilesystem)
	c.Annotations = ann
	c.Spec.VolumeName = pvName
	c, err := cs.CoreV1().PersistentVolumeClaims("apps").Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refUID == "" {
		refUID = c.UID
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: pvName}},
		ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "apps", Name: name, UID: refUID},
	}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Status.Phase = corev1.ClaimBound
	if c, err = cs.CoreV1().PersistentVolumeClaims("apps").UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// s3Pod mounts claim at /data in one container.
func s3Pod(name, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "example.test/app:1", Command: []string{"/app"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
}

// workload uses a local block claim (devices) and an S3 claim (mount).
func workload(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: "example.test/app:1", Command: []string{"/app", "--serve"},
				VolumeDevices: []corev1.VolumeDevice{{Name: "data1", DevicePath: "/dev/data1"}},
				VolumeMounts:  []corev1.VolumeMount{{Name: "bucket", MountPath: "/bucket"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "data1", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data1"}}},
				{Name: "bucket", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "bucket"}}},
			},
		},
	}
}

func assertMutated(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, ok := p.Annotations[contract.AnnotationStatus]; !ok {
		t.Fatalf("no %s annotation on %s/%s", contract.AnnotationStatus, p.Namespace, p.Name)
	}
	ic := p.Spec.InitContainers
	if len(ic) != 2 || ic[0].Name != contract.GuardContainerName || ic[1].Name != contract.InstallContainerName {
		t.Fatalf("init containers = %v, want guard then install", names(ic))
	}
	if want := "guard --device /dev/data1=data1 --policy filter --out /pvrescue --fake-size 512"; strings.Join(ic[0].Args, " ") != want {
		t.Errorf("guard args %q, want %q", ic[0].Args, want)
	}
	app := p.Spec.Containers[0]
	if want := "/pvrescue/bin/pvrescue-sidecar exec --devices /pvrescue/devices.json -- /app --serve"; strings.Join(app.Command, " ") != want {
		t.Errorf("app command %q, want %q", app.Command, want)
	}
	if app.LivenessProbe == nil || app.LivenessProbe.Exec == nil ||
		strings.Join(app.LivenessProbe.Exec.Command, " ") != "/pvrescue/bin/pvrescue-sidecar probe --timeout 3s /bucket" {
		t.Errorf("liveness probe %+v", app.LivenessProbe)
	}
	for _, m := range app.VolumeMounts {
		if m.Name == "bucket" && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
			t.Errorf("bucket mount propagation %v", m.MountPropagation)
		}
	}
}

func assertUntouched(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, ok := p.Annotations[contract.AnnotationStatus]; ok || len(p.Spec.InitContainers) > 0 || p.Spec.Containers[0].LivenessProbe != nil {
		t.Errorf("%s/%s was mutated: annotations=%v init=%v", p.Namespace, p.Name, p.Annotations, names(p.Spec.InitContainers))
	}
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func containsSub(msgs []string, sub string) bool {
	for _, m := range msgs {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return string(ja) == string(jb)
}

func counterSum(t *testing.T, g prometheus.Gatherer, name, result string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue(m, "result") == result {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// checkTLS connects like the API server would: the CA verifies the server, TLS >= 1.2, and
// HTTP/2 is not offered.
func checkTLS(t *testing.T, port int, caPEM []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer func() { _ = conn.Close() }() // only the handshake is inspected
	st := conn.ConnectionState()
	if st.NegotiatedProtocol == "h2" {
		t.Error("server negotiated HTTP/2")
	}
	if st.Version < tls.VersionTLS12 {
		t.Errorf("TLS version %x", st.Version)
	}
	old, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}) //nolint:gosec // G402: the test checks the server refuses TLS 1.1
	if err == nil {
		_ = old.Close() // the handshake alone is the failure
		t.Error("server accepted TLS 1.1")
	}
}

// writeServingCert writes tls.crt/tls.key for host, signed by a fresh CA, and returns the CA PEM.
func writeServingCert(t *testing.T, dir, host string) []byte {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pvrescue-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP(host)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tls.crt", "CERTIFICATE", der)
	write("tls.key", "EC PRIVATE KEY", keyDER)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

func testConfig() *config.Config {
	cfg := config.Default()
	cfg.Helper.Image = "example.test/pvrescue-webhook:test"
	return cfg
}
