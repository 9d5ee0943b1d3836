package stack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// A dead driver mount at a target and a driver's live mount at a fresh directory (shared, as
// under kubelet's directory), and our bridge's staging mount (private).
const replaceFixture = `26 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
41 26 0:38 / /k/pods/u/volumes/kubernetes.io~csi/pv/mount ro,nosuid,nodev,relatime shared:7 - fuse.s3fs s3fs rw
50 26 0:50 / /k/fresh rw,nosuid,nodev,relatime shared:9 - fuse.s3fs s3fs rw
60 26 0:60 / /state/s3/staging/pv rw,nosuid,nodev,relatime - fuse pvrescue-s3:pv rw
`

const replaceTarget = "/k/pods/u/volumes/kubernetes.io~csi/pv/mount"

type replaceMounter struct {
	table    Table
	binds    []string
	replaced *bool
	reads    int
}

func (m *replaceMounter) MountTable() (Table, error) { m.reads++; return m.table, nil }
func (m *replaceMounter) Bind(source, target string, ro bool) error {
	m.binds = append(m.binds, fmt.Sprintf("%s->%s ro=%v", source, target, ro))
	*m.replaced = true
	return nil
}
func (m *replaceMounter) Unmount(string, bool) error     { return errors.New("unexpected unmount") }
func (m *replaceMounter) MountTmpfs(string, int64) error { return errors.New("unexpected tmpfs") }

// memFS keeps files in memory (Placed's record).
type memFS map[string][]byte

func (m memFS) MkdirAll(string, fs.FileMode) error { return nil }
func (m memFS) WriteFile(p string, d []byte, _ fs.FileMode) error {
	m[p] = d
	return nil
}
func (m memFS) ReadFile(p string) ([]byte, error) {
	if b, ok := m[p]; ok {
		return b, nil
	}
	return nil, fs.ErrNotExist
}
func (m memFS) ReadDir(string) ([]string, error) { return nil, nil }
func (m memFS) Remove(p string) error {
	delete(m, p)
	return nil
}

// replaceStatfs: the target is dead until replaced; everything else answers.
type replaceStatfs struct{ replaced *bool }

func (s replaceStatfs) Statfs(_ context.Context, path string, _ time.Duration) error {
	if path == replaceTarget && !*s.replaced {
		return syscall.ENOTCONN
	}
	return nil
}

type fakeReplacer struct {
	calls    []string
	res      mountreplace.Result
	replaced *bool
}

func (f *fakeReplacer) Replace(source, target string, old int, ro, noPeer bool, table Table) (mountreplace.Result, error) {
	m, inTable := table.ByID(old)
	f.calls = append(f.calls, fmt.Sprintf("%s->%s old=%d ro=%v noPeer=%v oldInTable=%v", source, target, old, ro, noPeer, inTable && m.MountPoint == target))
	*f.replaced = true
	return f.res, nil
}

func TestCoverReplacesTheDeadMount(t *testing.T) {
	for _, tc := range []struct {
		name, source, dev string
		res               mountreplace.Result
		want              string
	}{
		// The dead mount is read-only: so is its replacement; the driver's fresh mount is shared.
		{"driver's mount beneath", "/k/fresh", "0:50", mountreplace.Result{Mode: mountreplace.Beneath, New: 70},
			"/k/fresh->" + replaceTarget + " old=41 ro=true noPeer=false oldInTable=true"},
		// Our bridge's staging mount is in no peer group; the kernel refused: stacked, counted.
		{"bridge stacked by the kernel", "/state/s3/staging/pv", "0:60", mountreplace.Result{Mode: mountreplace.Stacked, Reason: mountreplace.ReasonRefused, New: 70},
			"/state/s3/staging/pv->" + replaceTarget + " old=41 ro=true noPeer=true oldInTable=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := ParseMountInfo(replaceFixture)
			if err != nil {
				t.Fatal(err)
			}
			replaced := false
			m := &replaceMounter{table: tab, replaced: &replaced}
			rep := &fakeReplacer{res: tc.res, replaced: &replaced}
			metrics, err := mountreplace.NewMetrics(nil)
			if err != nil {
				t.Fatal(err)
			}
			r := &Rules{Mounter: m, Statfs: replaceStatfs{&replaced}, StatfsTimeout: func() time.Duration { return time.Second },
				Placed: NewPlaced(memFS{}, "/state/placed.json"), Replacer: rep, Replacements: metrics}
			dead, ro, ok, err := r.Cover(context.Background(), tc.source, replaceTarget, false, func(tab Table) Check {
				c := CheckFor(tab, replaceTarget, "fuse.s3fs")
				c.FUSETypes = append(c.FUSETypes, OurFUSETypes...)
				return c
			})
			if err != nil || !ok || !ro {
				t.Fatalf("Cover: ok %v, ro %v, %v", ok, ro, err)
			}
			if len(rep.calls) != 1 || rep.calls[0] != tc.want || len(m.binds) != 0 {
				t.Errorf("replacer calls %q, binds %q; want one replacement %q and no bind", rep.calls, m.binds, tc.want)
			}
			if len(dead) != 1 || dead[0].ID != 41 {
				t.Errorf("dead %+v, want mount 41 (containers still hold it)", dead)
			}
			// The source is checked, the old mount found and the new one recorded on the table
			// Cover read: each read of a long table waits for the kernel's mount lock while
			// kubelet and the runtime hold it.
			if m.reads != 1 {
				t.Errorf("mount table read %d times, want once", m.reads)
			}
			if got := r.Placed.Dev(replaceTarget); got != tc.dev {
				t.Errorf("recorded device at the target %q, want the source's %q", got, tc.dev)
			}
			if got := counterOf(t, metrics, tc.res); got != 1 {
				t.Errorf("pvrescue_mount_replace_total{%s,%q} = %v, want 1", tc.res.Mode, tc.res.Reason, got)
			}
		})
	}
}

func TestCoverWithoutAReplacerBindsOnTop(t *testing.T) {
	tab, err := ParseMountInfo(replaceFixture)
	if err != nil {
		t.Fatal(err)
	}
	replaced := false
	m := &replaceMounter{table: tab, replaced: &replaced}
	r := &Rules{Mounter: m, Statfs: replaceStatfs{&replaced}, StatfsTimeout: func() time.Duration { return time.Second }, Placed: NewPlaced(memFS{}, "/state/placed.json")}
	if _, _, ok, err := r.Cover(context.Background(), "/k/fresh", replaceTarget, false, func(tab Table) Check {
		return CheckFor(tab, replaceTarget, "fuse.s3fs")
	}); err != nil || !ok {
		t.Fatalf("Cover: ok %v, %v", ok, err)
	}
	if want := "/k/fresh->" + replaceTarget + " ro=true"; len(m.binds) != 1 || m.binds[0] != want {
		t.Errorf("binds %q, want [%q]", m.binds, want)
	}
}

func counterOf(t *testing.T, m *mountreplace.Metrics, res mountreplace.Result) float64 {
	t.Helper()
	c, err := m.Replacements.GetMetricWithLabelValues(string(res.Mode), res.Reason)
	if err != nil {
		t.Fatal(err)
	}
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}
