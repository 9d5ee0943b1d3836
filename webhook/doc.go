// Package webhook is pvrescue's mutating admission webhook for pod creation.
//
// A pod goes through three steps, each in its own file:
//
//   - classify.go: every volume is classified (Classifier): a local block claim, an S3 volume,
//     or one pvrescue does nothing for. A claim with a PV is classified by that PV (its
//     own driver, its claimRef naming the claim), one without by its StorageClass. PVCs, PVs and
//     StorageClasses come from a Lookup (informer caches in the server, fixed objects in tests).
//   - inject.go: Inject, the pure mutation. It decides what the pod gets (guard and install init
//     containers, exec wrapper, S3 mount probe, mount propagation, the shared volume) and applies
//     it as JSON patch operations, which it returns. containers.go builds the injected pieces;
//     patch.go records the operations.
//   - defaulter.go: the Defaulter (namespace and opt-out checks, then classify and inject) and
//     Injection, the one result type: what an admission came to, its patch and warnings, and the
//     pvrescue.io/status annotation it records on the pod.
//
// handler.go is the admission HTTP handler alone: it decodes the request, calls the Defaulter
// and answers with the patch. configuration.go builds the MutatingWebhookConfiguration;
// metrics.go counts admissions. The server (TLS, informers, health) is package webhook/server.
package webhook
