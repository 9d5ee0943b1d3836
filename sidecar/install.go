package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"io"
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
// file and a rename so that a container never runs a half-copied binary (no fsync, as for
// devices.json: the emptyDir does not survive the pod). It returns the new path.
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
	out, err := os.CreateTemp(dir, "."+contract.HelperBinaryName+".*")
	if err != nil {
		return "", fmt.Errorf("install into %s: %w", dir, err)
	}
	tmp := out.Name()
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chmod(0o755)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		return "", errors.Join(fmt.Errorf("install %s: %w", dst, err), removeIfExists(tmp))
	}
	return dst, nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
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
