package webhook

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Names of the deployed webhook; those shared with certs/ and manifests/ live in internal/contract.
const (
	ConfigurationName = contract.WebhookConfiguration
	WebhookName       = "pod.pvrescue.io"
	DefaultService    = contract.Service
	DefaultNamespace  = contract.Namespace
	// MatchConditionName names the CEL condition that keeps pods without claims away.
	MatchConditionName = "has-persistent-volumes"
	// MatchConditionExpression is the CEL twin of HasCandidateVolumes.
	MatchConditionExpression = "has(object.spec.volumes) && object.spec.volumes.exists(v, " +
		"has(v.persistentVolumeClaim) || has(v.ephemeral) || has(v.csi))"
)

// ConfigurationOptions parameterise NewMutatingWebhookConfiguration.
type ConfigurationOptions struct {
	// Namespace of the webhook (its Service and the namespace never mutated); default pvrescue-system.
	Namespace string
	// Service name; default pvrescue-webhook.
	Service string
	// CABundle that signed the serving certificate (PEM); may be left empty for cert-manager's
	// cainjector to fill.
	CABundle []byte
	// URL, when set, replaces the Service reference (tests run the webhook outside the cluster).
	URL string
	// CAInjectFrom, as "namespace/certificate", sets cert-manager's cert-manager.io/inject-ca-from
	// annotation so its cainjector fills the caBundle.
	CAInjectFrom string
}

// AnnotationInjectCAFrom is cert-manager's cainjector annotation.
const AnnotationInjectCAFrom = contract.AnnotationInjectCAFrom

// NewMutatingWebhookConfiguration builds the configuration deterministically: the same options
// always give the same object, so the manifests can be checked against it.
func NewMutatingWebhookConfiguration(o ConfigurationOptions) *admissionregistrationv1.MutatingWebhookConfiguration {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Service == "" {
		o.Service = DefaultService
	}
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
	if o.URL != "" {
		cc.URL = ptr.To(o.URL)
	} else {
		cc.Service = &admissionregistrationv1.ServiceReference{
			Namespace: o.Namespace, Name: o.Service, Path: ptr.To(Path), Port: ptr.To[int32](443),
		}
	}
	meta := metav1.ObjectMeta{Name: ConfigurationName}
	if o.CAInjectFrom != "" {
		meta.Annotations = map[string]string{AnnotationInjectCAFrom: o.CAInjectFrom}
	}
	excluded := append(append([]string{}, SystemNamespaces...), o.Namespace)
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "MutatingWebhookConfiguration",
		},
		ObjectMeta: meta,
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         WebhookName,
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{""},
					APIVersions: []string{"v1"},
					Resources:   []string{"pods"},
					Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			NamespaceSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: contract.LabelInject, Operator: metav1.LabelSelectorOpIn, Values: []string{contract.LabelInjectEnabled}},
					{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: excluded},
				},
			},
			ObjectSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: contract.LabelInject, Operator: metav1.LabelSelectorOpNotIn, Values: []string{contract.LabelInjectOptOutVal},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: MatchConditionName, Expression: MatchConditionExpression,
			}},
			// Ignore: a webhook outage must never block pod creation cluster-wide; pods then start
			// without protection, as they would without pvrescue.
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
}
