// Package csitest is a minimal S3 CSI node plugin for pvrescue's node tests and benchmark: it
// serves the node service on a unix socket, and NodePublishVolume (or NodeStageVolume, in staging
// mode) runs s3fs as the plugin's own child at the path kubelet gives — as the s3fs drivers in
// the field do, so killing the plugin's s3fs is a plugin restart as far as the mounts go. Like
// them it refuses a path whose mount check fails with ENOTCONN. Linux only.
package csitest
