// Package contract holds the names shared by the webhook, the injected helper and the node agent:
// labels, annotations, container and volume names, paths and the helper's command line. Changing a
// value here changes what running pods carry, so treat these as a public API.
package contract

const (
	// Prefix of every pvrescue label and annotation.
	Prefix = "pvrescue.io/"

	// LabelInject on a namespace opts it in ("enabled"); on a pod, "false" opts the pod out.
	LabelInject          = Prefix + "inject"
	LabelInjectEnabled   = "enabled"
	LabelInjectOptOutVal = "false"

	// AnnotationStatus records, as JSON, what the webhook did to the pod and what it skipped, with
	// reasons (see webhook.Injection).
	AnnotationStatus = Prefix + "status"
	// AnnotationFakeDevicePolicy is "filter" (default) or "require" (fail the pod when a device is fake).
	AnnotationFakeDevicePolicy = Prefix + "fake-device-policy"
	// AnnotationInjectProbe "false" turns off the injected livenessProbe for the pod.
	AnnotationInjectProbe = Prefix + "inject-probe"
	// AnnotationInjectPropagation "false" leaves mountPropagation of S3 mounts untouched.
	AnnotationInjectPropagation = Prefix + "inject-propagation"
	// AnnotationExecWrapper "false" stops the webhook wrapping explicit commands with the helper's exec.
	AnnotationExecWrapper = Prefix + "exec-wrapper"
	// AnnotationRestartOnDiskReturn "true" lets the agent evict a pod running on a fake device once the
	// real disk is back, so its controller recreates it on the real disk.
	AnnotationRestartOnDiskReturn = Prefix + "restart-on-disk-return"
	// AnnotationFakeDevice is set by the agent on a PV while a fake device stands in for its disk.
	AnnotationFakeDevice = Prefix + "fake-device"

	// LabelFakeDevicesDefault is the default node label key that gates fake-device creation.
	LabelFakeDevicesDefault = Prefix + "fake-devices"
	// LabelFakeDevicesEnabled is the value of that label that allows creation.
	LabelFakeDevicesEnabled = "enabled"

	// PolicyFilter and PolicyRequire are the values of AnnotationFakeDevicePolicy.
	PolicyFilter  = "filter"
	PolicyRequire = "require"
)

// Names of what the webhook injects. They are preferred names: when the pod already has a
// container or volume of that name, the webhook takes the first free "<name>-2", "<name>-3", …
// and records the names it used in AnnotationStatus.
const (
	// VolumeName is the shared emptyDir mounted at Helper.MountPath in every container.
	VolumeName = "pvrescue"
	// GuardContainerName runs `guard` first among the init containers (pods with local block volumes).
	GuardContainerName = "pvrescue-guard"
	// InstallContainerName runs `install`, copying the helper into the shared volume.
	InstallContainerName = "pvrescue-install"

	// EnvInjected marks a container the webhook injected: its value is the container's role
	// (RoleGuard or RoleInstall). Containers are recognised by this marker, never by name alone.
	EnvInjected = "PVRESCUE_INJECTED"
	RoleGuard   = "guard"
	RoleInstall = "install"

	// HelperBinaryInImage is the helper's path inside the helper image.
	HelperBinaryInImage = "/pvrescue-sidecar"
	// HelperBinDir is the directory under the shared volume the helper is installed into.
	HelperBinDir = "bin"
	// HelperBinaryName is the helper's file name once installed.
	HelperBinaryName = "pvrescue-sidecar"
	// DevicesFile is the guard's report, relative to the shared volume (schema: sidecar.Report).
	DevicesFile = "devices.json"
	// FilteredDevDir holds symlinks to the real devices only, relative to the shared volume.
	FilteredDevDir = "dev"
)

// Helper subcommands and flags (the command-line contract of pvrescue-sidecar).
const (
	CmdInstall = "install"
	CmdGuard   = "guard"
	CmdExec    = "exec"
	CmdProbe   = "probe"

	FlagTo          = "--to"        // install: destination directory
	FlagDevice      = "--device"    // guard: PATH=CLAIM, repeated
	FlagPolicy      = "--policy"    // guard: filter|require
	FlagOut         = "--out"       // guard: output directory (the shared volume)
	FlagFakeSize    = "--fake-size" // guard: fake device size in bytes
	FlagDevicesFile = "--devices"   // exec: path of devices.json
	FlagTimeout     = "--timeout"   // probe: statfs timeout per path, e.g. 3s
)

// Names of the deployed webhook, shared by the webhook's configuration builder, certs/ and manifests/.
const (
	// Namespace the webhook runs in (never mutated).
	Namespace = "pvrescue-system"
	// Service in front of the webhook; also the name of its Deployment.
	Service = "pvrescue-webhook"
	// WebhookConfiguration is the MutatingWebhookConfiguration's name.
	WebhookConfiguration = "pvrescue-webhook"
	// ServingSecret holds the serving certificate (and, from cert-manager, the CA in ca.crt).
	ServingSecret = "pvrescue-webhook-tls" //nolint:gosec // G101: the name of a Secret, not a credential

	// AnnotationInjectCAFrom is cert-manager's cainjector annotation ("namespace/certificate").
	AnnotationInjectCAFrom = "cert-manager.io/inject-ca-from"
)
