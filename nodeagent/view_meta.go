package nodeagent

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func metaAccessor(obj any) (metav1.Object, error) { return meta.Accessor(obj) }
