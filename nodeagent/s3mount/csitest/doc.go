// Package csitest is pvrescue's one test S3 CSI node plugin, for the node tests, the benchmark
// and the end-to-end suite. It does what the s3fs drivers in the field do on a node: on
// NodePublishVolume (NodeStageVolume in the yandex layout) it runs s3fs as its own child
// process at the path kubelet gives, so killing the plugin's s3fs is a plugin restart as far as
// the mounts go, and it refuses a path whose mount check fails with ENOTCONN.
//
// It runs two ways:
//   - in process (Start): the node tests and the benchmark serve it on a socket of their own and
//     kill its s3fs with KillMounts; its s3fs outlive Stop, as after a plugin crash;
//   - as a container (Run, RunRegistrar; command e2e/csi-s3-test): the end-to-end suite deploys it
//     as a DaemonSet pod with the mounts of k8s-csi-s3's upstream node DaemonSet, its s3fs die
//     with the plugin's container, and the registrar sidecar registers it with kubelet through
//     <kubelet>/plugins_registry as node-driver-registrar does.
//
// The field layouts it imitates are the Layout* constants. Linux only (options and pure helpers
// build anywhere).
package csitest
