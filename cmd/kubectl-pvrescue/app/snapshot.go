package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/webhook"
)

// ConfigMapName is the pvrescue ConfigMap (kustomize adds a hash suffix to it).
const ConfigMapName = "pvrescue-config"

// Snapshot is everything the plugin reads, gathered once; the reports are pure functions of it.
type Snapshot struct {
	Nodes      []corev1.Node
	PVs        []corev1.PersistentVolume
	Pods       []corev1.Pod
	Namespaces []corev1.Namespace
	Events     []corev1.Event
	// Lookup resolves claims and classes as the webhook does.
	Lookup webhook.Lookup
	// Config is the pvrescue config found in the cluster (or the defaults, see Notes).
	Config *config.Config
	// NamespaceSelector and ObjectSelector are the webhook's (or the defaults, see Notes).
	NamespaceSelector labels.Selector
	ObjectSelector    labels.Selector
	// Notes say what could not be read and what was assumed instead.
	Notes []string
}

// Gather reads the cluster. installNS is pvrescue's namespace, webhookConfig its
// MutatingWebhookConfiguration; namespace limits pods (and their events) to one namespace when set.
func Gather(ctx context.Context, c kubernetes.Interface, installNS, webhookConfig, namespace string) (*Snapshot, error) {
	s := &Snapshot{}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	s.Nodes = nodes.Items
	pvs, err := c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list persistentvolumes: %w", err)
	}
	s.PVs = pvs.Items
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	s.Pods = pods.Items
	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	s.Namespaces = nss.Items
	// Events of PVs and Nodes live in the default namespace (cluster-scoped objects), those of pods
	// in theirs: list them all, as `kubectl get events -A` does.
	evs, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	s.Events = evs.Items

	// PVs too: the webhook's classification reads a bound claim's PV.
	objs := make([]client.Object, 0, len(s.PVs))
	for i := range s.PVs {
		objs = append(objs, &s.PVs[i])
	}
	pvcs, err := c.CoreV1().PersistentVolumeClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list persistentvolumeclaims: %w", err)
	}
	for i := range pvcs.Items {
		objs = append(objs, &pvcs.Items[i])
	}
	scs, err := c.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list storageclasses: %w", err)
	}
	for i := range scs.Items {
		objs = append(objs, &scs.Items[i])
	}
	s.Lookup = webhook.NewStaticLookup(objs...)

	s.Config, err = readConfig(ctx, c, installNS)
	if err != nil {
		s.Config = config.Default()
		s.Notes = append(s.Notes, fmt.Sprintf("pvrescue config not read (%v): using the defaults", err))
	}
	mwc, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookConfig, metav1.GetOptions{})
	if err == nil {
		err = s.setSelectors(mwc)
	}
	if err != nil {
		s.NamespaceSelector = labels.SelectorFromSet(labels.Set{contract.LabelInject: contract.LabelInjectEnabled})
		s.ObjectSelector = labels.NewSelector()
		req, _ := labels.NewRequirement(contract.LabelInject, "notin", []string{contract.LabelInjectOptOutVal})
		s.ObjectSelector = s.ObjectSelector.Add(*req)
		s.Notes = append(s.Notes, fmt.Sprintf("webhook configuration %s not read (%v): opted-in namespaces are those labelled %s=%s",
			webhookConfig, err, contract.LabelInject, contract.LabelInjectEnabled))
	}
	return s, nil
}

// ErrNoConfig is wrapped when no pvrescue ConfigMap is found.
var ErrNoConfig = errors.New("no pvrescue ConfigMap")

func readConfig(ctx context.Context, c kubernetes.Interface, ns string) (*config.Config, error) {
	cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list configmaps in %s: %w", ns, err)
	}
	for _, cm := range cms.Items {
		if cm.Name != ConfigMapName && !strings.HasPrefix(cm.Name, ConfigMapName+"-") {
			continue
		}
		data, ok := cm.Data["config.yaml"]
		if !ok {
			continue
		}
		cfg, err := config.Parse([]byte(data))
		if err != nil {
			return nil, fmt.Errorf("configmap %s/%s: %w", ns, cm.Name, err)
		}
		return cfg, nil
	}
	return nil, fmt.Errorf("%w in namespace %s", ErrNoConfig, ns)
}

func (s *Snapshot) setSelectors(mwc *admissionregistrationv1.MutatingWebhookConfiguration) error {
	if len(mwc.Webhooks) == 0 {
		return fmt.Errorf("%s has no webhooks", mwc.Name)
	}
	w := mwc.Webhooks[0]
	nsSel, err := selector(w.NamespaceSelector)
	if err != nil {
		return fmt.Errorf("namespaceSelector: %w", err)
	}
	objSel, err := selector(w.ObjectSelector)
	if err != nil {
		return fmt.Errorf("objectSelector: %w", err)
	}
	s.NamespaceSelector, s.ObjectSelector = nsSel, objSel
	return nil
}

// selector converts a webhook selector; an unset one selects everything, as for the apiserver.
func selector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}
