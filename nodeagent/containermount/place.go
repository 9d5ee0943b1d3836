package containermount

import (
	"errors"
	"fmt"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// Place does, inside a container's mount namespace already entered on the calling thread, what
// each attach asks with the detached clone trees[i] (made before entering; <= 0 for Protect):
//
//   - a dead mount point: mountreplace replaces the dead top by the clone (beneath it, then the
//     dead one detached; stacked on it where the kernel refuses, with the reason in
//     Outcome.Replace), the clone carrying the dead mount's read-only, nosuid, nodev, noexec and
//     propagation plus what the attach adds;
//   - Nest: the clone, with the attach's flags, is attached at a directory of the live mount;
//   - Protect: the mount at the target is made read-only in place.
//
// Each step first checks (statx) that the target's top is still the planned mount. Attaches
// whose out[i].Err is already set (their clone failed) are skipped. The caller closes the trees.
func Place(k Kernel, support mountreplace.Support, trees []int, attaches []Attach, out []Outcome) {
	rep := mountreplace.Replacer{Kernel: k, Support: support}
	for i, a := range attaches {
		if out[i].Err != nil {
			continue
		}
		switch {
		case a.Protect:
			out[i].Err = kernelErr(a.Target, k.MakeReadOnly(a.Target, a.ExpectMountID))
		case trees[i] <= 0:
			out[i].Err = fmt.Errorf("%w: no clone for %s", ErrSource, a.Target)
		case a.Nest:
			out[i].Err = nest(k, trees[i], a)
		default:
			res, err := rep.Replace(mountreplace.Request{Target: a.Target, Old: a.ExpectMountID, Tree: trees[i], Add: a.attrs(),
				NoPeerGroup: a.NoPeerGroup})
			out[i] = Outcome{Replace: res, Err: kernelErr(a.Target, err)}
		}
	}
}

func (a Attach) attrs() mountreplace.Attrs {
	return mountreplace.Attrs{ReadOnly: a.ReadOnly, NoSuid: a.NoSuid, NoDev: a.NoDev, NoExec: a.NoExec, Slave: a.Slave}
}

// nest attaches the clone at a plain directory of the live mount a.ExpectMountID.
func nest(k Kernel, tree int, a Attach) error {
	if err := k.SetAttrs(tree, a.attrs()); err != nil {
		return fmt.Errorf("%w: flags of the clone for %s: %w", ErrAttach, a.Target, err)
	}
	return kernelErr(a.Target, k.MoveOnTop(tree, a.Target, a.ExpectMountID))
}

// kernelErr maps mountreplace's errors to this package's sentinels (and so to metrics reasons).
func kernelErr(target string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mountreplace.ErrTargetChanged):
		return fmt.Errorf("%w: %w", ErrTargetChanged, err)
	case errors.Is(err, mountreplace.ErrVerify):
		return fmt.Errorf("%w: %s: %w", ErrVerify, target, err)
	case errors.Is(err, mountreplace.ErrSource):
		return fmt.Errorf("%w: %w", ErrSource, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrAttach, target, err)
}
