package nodeagent

import (
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Consents is the agent's consent rule: it acts for a pod only when the pod's namespace opted in
// with the label the webhook's namespaceSelector matches (pvrescue.io/inject=enabled) and the pod
// did not opt out (pvrescue.io/inject=false). The namespace is the Namespace object as the API
// server holds it, never a copy a tenant wrote into its pod; without it (not known yet, deleted)
// there is no consent.
func Consents(pod *corev1.Pod, ns *corev1.Namespace) bool {
	if pod == nil || ns == nil || pod.Namespace != ns.Name {
		return false
	}
	return ns.Labels[contract.LabelInject] == contract.LabelInjectEnabled &&
		pod.Labels[contract.LabelInject] != contract.LabelInjectOptOutVal
}

// NamespaceGetter returns a namespace by name (false when it is not known).
type NamespaceGetter func(name string) (*corev1.Namespace, bool)

// ConsentingPods wraps a pod lister so it lists and gets only the pods Consents allows: what the
// rescues never see, they never act on (no remount, no fake, no Event, no metric series).
func ConsentingPods(l corelisters.PodLister, ns NamespaceGetter) corelisters.PodLister {
	return consentLister{l: l, ns: ns}
}

type consentLister struct {
	l  corelisters.PodLister
	ns NamespaceGetter
}

func (c consentLister) ok(p *corev1.Pod) bool {
	ns, _ := c.ns(p.Namespace)
	return Consents(p, ns)
}

func (c consentLister) filter(pods []*corev1.Pod, err error) ([]*corev1.Pod, error) {
	if err != nil {
		return nil, err
	}
	out := pods[:0:0]
	for _, p := range pods {
		if c.ok(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func (c consentLister) List(sel labels.Selector) ([]*corev1.Pod, error) {
	return c.filter(c.l.List(sel))
}

func (c consentLister) Pods(namespace string) corelisters.PodNamespaceLister {
	return consentNSLister{c: c, l: c.l.Pods(namespace)}
}

type consentNSLister struct {
	c consentLister
	l corelisters.PodNamespaceLister
}

func (n consentNSLister) List(sel labels.Selector) ([]*corev1.Pod, error) {
	return n.c.filter(n.l.List(sel))
}

// Get answers NotFound for a pod the agent may not act for, as for one it does not know.
func (n consentNSLister) Get(name string) (*corev1.Pod, error) {
	p, err := n.l.Get(name)
	if err != nil {
		return nil, err
	}
	if !n.c.ok(p) {
		return nil, errPodNotFound(p.Namespace, name)
	}
	return p, nil
}

func errPodNotFound(_, name string) error {
	return apierrors.NewNotFound(corev1.Resource("pods"), name)
}
