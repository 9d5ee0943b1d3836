package nodeagent

import (
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
func NewRecorder(client kubernetes.Interface, nodeName string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: nodeName}), b.Shutdown
}
