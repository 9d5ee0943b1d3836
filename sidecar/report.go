package sidecar

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// Defaults that mirror config.Default() (the helper does not import the config package: it would
// drag YAML and Kubernetes code into a binary that must stay small). A unit test keeps them equal.
const (
	// DefaultDir is the shared volume's mount path in every container (config helper.mountPath).
	DefaultDir = "/pvrescue"
	// DefaultFakeSize is the exact size of a fake device (config localBlock.fakeDeviceSizeBytes).
	DefaultFakeSize int64 = 512
	// DefaultTerminationLog is where kubelet reads a container's termination message.
	DefaultTerminationLog = "/dev/termination-log"
	// ReportVersion is the schema version written into devices.json.
	ReportVersion = 1
	// maxTerminationMessage is kubelet's limit for one container's termination message.
	maxTerminationMessage = 4096
)

// Report is the schema of devices.json, written by `guard` into the shared volume and read by
// `exec` (and by anyone who wants to know which devices of the pod are fakes). Example:
//
//	{
//	  "version": 1,
//	  "policy": "filter",
//	  "fakeSize": 512,
//	  "devices": [
//	    {"path": "/dev/data1", "claim": "claimA", "size": 68719476736, "fake": false},
//	    {"path": "/dev/data2", "claim": "claimB", "size": 512, "fake": true},
//	    {"path": "/dev/data3", "claim": "claimC", "size": 0, "fake": false, "error": "no such device node"}
//	  ]
//	}
//
// Devices appear in the order of the --device flags. A device is real when it has no error and is
// not fake; only real devices get a symlink in the filtered view (contract.FilteredDevDir).
type Report struct {
	// Version is ReportVersion.
	Version int `json:"version"`
	// Policy is contract.PolicyFilter or contract.PolicyRequire.
	Policy string `json:"policy"`
	// FakeSize is the size in bytes that marks a device as fake.
	FakeSize int64 `json:"fakeSize"`
	// Devices holds one entry per --device flag.
	Devices []Device `json:"devices"`
}

// Device is one block device of the pod as the guard saw it.
type Device struct {
	// Path is the device's path inside the container (the volumeDevices devicePath).
	Path string `json:"path"`
	// Claim is the PersistentVolumeClaim the device comes from.
	Claim string `json:"claim"`
	// Size is the device's size in bytes (BLKGETSIZE64); 0 when it could not be measured.
	Size int64 `json:"size"`
	// Fake is true when Size equals the report's FakeSize.
	Fake bool `json:"fake"`
	// Error says why the device could not be measured (missing node, not a block device...);
	// absent when it was measured.
	Error string `json:"error,omitempty"`
}

// Real reports whether the device was measured and is not a fake.
func (d Device) Real() bool { return d.Error == "" && !d.Fake }

// Refused reports whether the report's policy fails the pod: under `require`, every device must
// be measured and real.
func (r Report) Refused() bool {
	if r.Policy != contract.PolicyRequire {
		return false
	}
	for _, d := range r.Devices {
		if !d.Real() {
			return true
		}
	}
	return false
}

// Summary is the one-line message the guard writes to the termination log and stdout, e.g.
// "1 fake device filtered: /dev/data3 (claim data3)". It is cut to kubelet's 4096-byte limit.
func (r Report) Summary() string {
	var fakes, broken []string
	for _, d := range r.Devices {
		switch {
		case d.Error != "":
			broken = append(broken, fmt.Sprintf("%s (claim %s): %s", d.Path, d.Claim, d.Error))
		case d.Fake:
			fakes = append(fakes, fmt.Sprintf("%s (claim %s)", d.Path, d.Claim))
		}
	}
	var parts []string
	if len(fakes) > 0 {
		verb := " filtered"
		if r.Policy == contract.PolicyRequire {
			verb = ""
		}
		parts = append(parts, fmt.Sprintf("%d fake %s%s: %s", len(fakes), plural(len(fakes), "device"), verb, strings.Join(fakes, ", ")))
	}
	if len(broken) > 0 {
		parts = append(parts, fmt.Sprintf("%d %s unreadable: %s", len(broken), plural(len(broken), "device"), strings.Join(broken, ", ")))
	}
	var msg string
	switch {
	case len(r.Devices) == 0:
		msg = "no devices"
	case len(parts) == 0:
		msg = fmt.Sprintf("%d %s real, none fake", len(r.Devices), plural(len(r.Devices), "device"))
	default:
		msg = strings.Join(parts, "; ")
	}
	if r.Refused() {
		msg = "refused by policy require: " + msg
	}
	return truncate(msg, maxTerminationMessage)
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
