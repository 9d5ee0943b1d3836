// Package csiclient talks to this node's CSI node plugins as kubelet does, for the S3 rescue:
// it finds a driver's socket (kubelet's plugin registration, else the usual path), watches for
// plugin sockets appearing, and opens a Session on a PV's plugin — capability, publish context,
// kubelet's staging path — through which the rescue replays NodeStageVolume/NodePublishVolume at
// fresh directories of ours the plugin can see (FreshPublishPath, FreshStagePath), undoes a call
// whose result was refused, and cleans what an earlier agent left there (SweepFresh).
//
// It places nothing at kubelet's pod paths itself except the restaged globalmount: the rescue
// (package s3mount) decides, and s3mount/stack places.
package csiclient
