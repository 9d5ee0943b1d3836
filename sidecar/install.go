package sidecar

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// InstallOptions configures `install --to DIR`.
type InstallOptions struct {
	To string
}

// NewInstallOptions returns the defaults.
func NewInstallOptions() *InstallOptions {
	return &InstallOptions{To: filepath.Join(DefaultDir, contract.HelperBinDir)}
}

// AddFlags registers the install's flags.
func (o *InstallOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.To, flagName(contract.FlagTo), o.To, "directory to copy the helper into (created if missing)")
}

// Validate checks the options.
func (o *InstallOptions) Validate() error {
	if o.To == "" {
		return fmt.Errorf("%s must not be empty", contract.FlagTo)
	}
	return nil
}

// Install copies the executable src to DIR/pvrescue-sidecar with mode 0755, through a temporary
// file and a rename so that a container never runs a half-copied binary (writeFileAtomic). It
// returns the new path.
func Install(src, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: the app containers run the helper from here, under any uid
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("open own executable: %w", err)
	}
	defer func() { _ = in.Close() }() // opened read-only: nothing to lose on close
	dst := filepath.Join(dir, contract.HelperBinaryName)
	if err := writeFileAtomic(dst, in, 0o755); err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	return dst, nil
}

// RunInstall installs the running executable.
func RunInstall(o *InstallOptions, env *Env) int {
	self, err := env.Executable()
	if err != nil {
		say(env.Stderr, "pvrescue: find own executable: %v\n", err)
		return ExitError
	}
	dst, err := Install(self, o.To)
	if err != nil {
		say(env.Stderr, "pvrescue: %v\n", err)
		return ExitError
	}
	say(env.Stdout, "installed %s\n", dst)
	return 0
}
