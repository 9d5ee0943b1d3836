package s3mount

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// bindTarget puts the bridge's own mount (at bridgeMount) onto one dead target and records it;
// it returns the dead mounts the pod's running containers may hold, for the caller's remount
// (done once every target of the PV is bound: a pod's target does not wait for the remounts of
// the pods before it).
func (r *Restorer) bindTarget(ctx context.Context, bridgeMount string, t target, pass *bindPass) ([]stack.Mount, error) {
	dead, ro, ok, err := r.cover(ctx, bridgeMount, t, pass)
	if err != nil || !ok {
		return nil, err
	}
	// Cover recorded it like a replayed mount: when it vanishes from a gone pod's target without
	// us removing it, kubelet's teardown (the driver's NodeUnpublish) took it (cleanup.go).
	r.record(ctx, t, MethodBridge, contract.ReasonMountBridged, ro, "fresh s3fs bound over the dead mount")
	return dead, nil
}

// resolve turns the PV (read live along the chain by the caller) and its credentials secret
// (the PV's own references only, always read live) into what s3fs needs. pre, when not nil, is
// the secret read live at the start of the pass (prefetchSecret): used only when it is the one
// this PV names.
func (r *Restorer) resolve(ctx context.Context, pv *corev1.PersistentVolume, pre *prefetched) (s3fs.Volume, s3fs.Credentials, error) {
	vol, err := s3fs.ResolveVolume(pv, r.cfg.S3.Parameters, r.cfg.S3.Profile(pv.Spec.CSI.Driver))
	if err != nil {
		return s3fs.Volume{}, s3fs.Credentials{}, err
	}
	ref := vol.SecretRef
	var secret *corev1.Secret
	if pre != nil && pre.ref == *ref {
		secret, err = pre.secret, pre.err
	} else {
		secret, err = r.d.View.Secret(ctx, ref.Namespace, ref.Name)
	}
	if apierrors.IsNotFound(err) {
		return s3fs.Volume{}, s3fs.Credentials{}, fmt.Errorf("%w: %s/%s", csiclient.ErrSecretNotFound, ref.Namespace, ref.Name)
	}
	if err != nil {
		return s3fs.Volume{}, s3fs.Credentials{}, fmt.Errorf("get secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	creds, err := s3fs.ParseCredentials(secret, r.cfg.S3.SecretKeys)
	if err != nil {
		return s3fs.Volume{}, s3fs.Credentials{}, err
	}
	return vol, creds, nil
}
