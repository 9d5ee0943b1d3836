package nodeagent

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Component is the event source component of the agent.
const Component = contract.AgentComponent

// NewRecorder returns an event recorder writing through client as component pvrescue-agent on
// host nodeName, and a function that flushes and stops it.
//
// client-go's spam filter lets 25 Events through per source, object and type, then one per
// 5 minutes. The agent reports every incident on a pod, so after a couple of dozen plugin
// restarts the pod's success reports would silence the one saying a container was left dead;
// the budget is kept per reason instead (spamKey), each still bounded the same way.
func NewRecorder(client kubernetes.Interface, nodeName string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{SpamKeyFunc: spamKey}))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: nodeName}), b.Shutdown
}

// spamKey is client-go's spam-filter key (source, involved object, type) plus the reason.
func spamKey(e *corev1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name,
		string(o.UID), o.APIVersion, e.Type, e.Reason}, "\x00")
}
