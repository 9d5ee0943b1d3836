// Package s3mounttest holds test support for the S3 rescue: an in-memory node (mount table, FUSE
// deaths and hangs, files, s3fs processes, cgroups), an in-memory CSI node plugin and plugin
// registry, and an event log. It is imported by tests only, never by shipped code.
package s3mounttest
