package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// ErrEmptyDevice: the block device reports size 0 (an unattached loop device, a dead disk).
var ErrEmptyDevice = errors.New("block device has size 0")

// ErrInvalidDeviceSpec: a --device value is not PATH=CLAIM.
var ErrInvalidDeviceSpec = errors.New("want --device PATH=CLAIM with an absolute PATH and a non-empty CLAIM")

// DeviceSpec is one --device PATH=CLAIM flag.
type DeviceSpec struct {
	Path  string
	Claim string
}

// ParseDeviceSpec parses PATH=CLAIM. It splits at the last '=' because a claim name (a DNS
// subdomain) never holds one, while a path could.
func ParseDeviceSpec(s string) (DeviceSpec, error) {
	i := strings.LastIndexByte(s, '=')
	if i < 0 {
		return DeviceSpec{}, fmt.Errorf("%q: %w", s, ErrInvalidDeviceSpec)
	}
	d := DeviceSpec{Path: s[:i], Claim: s[i+1:]}
	if !filepath.IsAbs(d.Path) || d.Claim == "" || filepath.Clean(d.Path) != d.Path || d.Path == "/" {
		return DeviceSpec{}, fmt.Errorf("%q: %w", s, ErrInvalidDeviceSpec)
	}
	return d, nil
}

// deviceList is the repeatable --device flag.
type deviceList []DeviceSpec

func (l *deviceList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, d := range *l {
		s[i] = d.Path + "=" + d.Claim
	}
	return strings.Join(s, ",")
}

func (l *deviceList) Set(v string) error {
	d, err := ParseDeviceSpec(v)
	if err != nil {
		return err
	}
	*l = append(*l, d)
	return nil
}

// GuardOptions configures `guard`.
type GuardOptions struct {
	Devices        []DeviceSpec
	Policy         string
	Out            string
	FakeSize       int64
	TerminationLog string
}

// NewGuardOptions returns the defaults.
func NewGuardOptions() *GuardOptions {
	return &GuardOptions{
		Policy:         contract.PolicyFilter,
		Out:            DefaultDir,
		FakeSize:       DefaultFakeSize,
		TerminationLog: DefaultTerminationLog,
	}
}

// AddFlags registers the guard's flags.
func (o *GuardOptions) AddFlags(fs *flag.FlagSet) {
	fs.Var((*deviceList)(&o.Devices), flagName(contract.FlagDevice), "block device as PATH=CLAIM (repeat for each device)")
	fs.StringVar(&o.Policy, flagName(contract.FlagPolicy), o.Policy, "filter: hide fake devices and go on; require: fail when any device is fake or unreadable")
	fs.StringVar(&o.Out, flagName(contract.FlagOut), o.Out, "directory (the shared volume) for "+contract.DevicesFile+" and "+contract.FilteredDevDir+"/")
	fs.Int64Var(&o.FakeSize, flagName(contract.FlagFakeSize), o.FakeSize, "size in bytes that marks a device as fake")
	fs.StringVar(&o.TerminationLog, "termination-log", o.TerminationLog, "file for the one-line summary (kubelet's termination message); empty to skip")
}

// Validate checks the options.
func (o *GuardOptions) Validate() error {
	var errs []error
	if len(o.Devices) == 0 {
		errs = append(errs, fmt.Errorf("at least one %s PATH=CLAIM is required", contract.FlagDevice))
	}
	paths, names := map[string]bool{}, map[string]string{}
	for _, d := range o.Devices {
		if paths[d.Path] {
			errs = append(errs, fmt.Errorf("device %s given twice", d.Path))
		}
		paths[d.Path] = true
		// The filtered view names links by base name, so two devices must not share one.
		base := filepath.Base(d.Path)
		if other, ok := names[base]; ok && other != d.Path {
			errs = append(errs, fmt.Errorf("devices %s and %s share the name %q in %s/", other, d.Path, base, contract.FilteredDevDir))
		}
		names[base] = d.Path
	}
	if o.Policy != contract.PolicyFilter && o.Policy != contract.PolicyRequire {
		errs = append(errs, fmt.Errorf("%s must be %s or %s, got %q", contract.FlagPolicy, contract.PolicyFilter, contract.PolicyRequire, o.Policy))
	}
	if o.Out == "" {
		errs = append(errs, fmt.Errorf("%s must not be empty", contract.FlagOut))
	}
	if o.FakeSize <= 0 {
		errs = append(errs, fmt.Errorf("%s must be positive, got %d", contract.FlagFakeSize, o.FakeSize))
	}
	return errors.Join(errs...)
}

// Inspect measures every device and builds the report. It never fails: a device that cannot be
// measured, or measures 0 bytes, is recorded with an error and counts as neither real nor fake.
func Inspect(sizer DeviceSizer, o *GuardOptions) Report {
	r := Report{Version: ReportVersion, Policy: o.Policy, FakeSize: o.FakeSize, Devices: make([]Device, 0, len(o.Devices))}
	for _, spec := range o.Devices {
		d := Device{Path: spec.Path, Claim: spec.Claim}
		size, err := sizer.DeviceSize(spec.Path)
		switch {
		case err != nil:
			d.Error = err.Error()
		case size == 0:
			// An unattached loop device or a dead disk: not usable, so not linked either.
			d.Error = ErrEmptyDevice.Error()
		default:
			d.Size = size
			d.Fake = size == o.FakeSize
		}
		r.Devices = append(r.Devices, d)
	}
	return r
}

// WriteReport writes DIR/devices.json (atomically) and rebuilds DIR/dev/ with one symlink per
// real device, named by the device's base name. Links from an earlier run are removed first, so
// a restarted init container never leaves a stale link to a device that has become fake.
func WriteReport(dir string, r Report) error {
	// The pod's app containers read the report and the device view, under any uid.
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: read by the app containers
		return fmt.Errorf("create %s: %w", dir, err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, contract.DevicesFile), bytes.NewReader(append(data, '\n')), 0o644); err != nil {
		return err
	}
	view := filepath.Join(dir, contract.FilteredDevDir)
	if err := os.RemoveAll(view); err != nil {
		return fmt.Errorf("clear %s: %w", view, err)
	}
	if err := os.Mkdir(view, 0o755); err != nil { //nolint:gosec // G301: read by the app containers
		return fmt.Errorf("create %s: %w", view, err)
	}
	for _, d := range r.Devices {
		if !d.Real() {
			continue
		}
		if err := os.Symlink(d.Path, filepath.Join(view, filepath.Base(d.Path))); err != nil {
			return fmt.Errorf("link %s: %w", d.Path, err)
		}
	}
	return nil
}

// ReadReport reads devices.json. A missing file gives an error matching fs.ErrNotExist.
func ReadReport(path string) (Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Report{}, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return Report{}, fmt.Errorf("parse %s: %w", path, err)
	}
	return r, nil
}

// writeFileAtomic writes r through a temporary file in the same directory and renames it, so a
// reader never sees a half-written file. No fsync: the shared volume is an emptyDir that does not
// outlive the pod, and after a node crash the init containers run again.
func writeFileAtomic(path string, r io.Reader, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", path, err), removeIfExists(f.Name()))
	}
	return nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// flagName turns a contract flag ("--device") into a flag package name ("device").
func flagName(f string) string { return strings.TrimLeft(f, "-") }

// RunGuard measures the devices, writes the report and the filtered view, and leaves a one-line
// summary in the termination log. It returns ExitRefused when the policy is require and a device
// is fake or unreadable, ExitError when the outputs cannot be written.
func RunGuard(o *GuardOptions, env *Env) int {
	r := Inspect(env.Deps.Devices, o)
	for _, d := range r.Devices {
		say(env.Stdout, "%v\n", DescribeDevice(d))
	}
	if err := WriteReport(o.Out, r); err != nil {
		say(env.Stderr, "pvrescue: %v\n", err)
		return ExitError
	}
	msg := r.Summary()
	if o.TerminationLog != "" {
		// Best effort: outside Kubernetes the file may not exist, which must not fail the guard.
		if err := os.WriteFile(o.TerminationLog, []byte(msg), 0o644); err != nil { //nolint:gosec // G306: kubelet's termination message, read by the cluster anyway
			say(env.Stderr, "pvrescue: write termination message: %v\n", err)
		}
	}
	if r.Refused() {
		say(env.Stderr, "%v\n", msg)
		return ExitRefused
	}
	say(env.Stdout, "%v\n", msg)
	return 0
}

// DescribeDevice is the guard's log line for one device.
func DescribeDevice(d Device) string {
	switch {
	case d.Error != "":
		return fmt.Sprintf("%s (claim %s): unreadable: %s", d.Path, d.Claim, d.Error)
	case d.Fake:
		return fmt.Sprintf("%s (claim %s): %d bytes, fake", d.Path, d.Claim, d.Size)
	default:
		return fmt.Sprintf("%s (claim %s): %d bytes, real", d.Path, d.Claim, d.Size)
	}
}
