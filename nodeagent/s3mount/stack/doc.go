// Package stack holds the rules at one kubelet path: what is mounted there (a snapshot of the
// mount table, read through internal/mountinfo), whether it answers, which mounts are ours (our
// fsname, or the device we recorded when we put a mount there), the one check before anything
// goes over a kubelet path, and putting a live mount in place of a dead one without ever leaving
// the path bare: beneath it, the dead one then detached (internal/mountreplace, through a
// Replacer), or on top of it where the kernel refuses or no Replacer is set (bounded stacking).
//
// It knows nothing of pods, PVs, drivers or s3fs: the S3 rescue (package s3mount) decides what
// to put where, the CSI client (s3mount/csiclient) and our s3fs (s3mount/s3fs) produce the
// mounts, and this package places them.
package stack
