package s3fs

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-logr/logr"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// A bridge retires when no live pod's target holds its bind any more. Its s3fs is never
// stopped then: an application may still hold a file open through a bind we detached lazily
// (the hand-back to the driver, when the bridge retires), and stopping s3fs would fail its next write with ENOTCONN
// and lose what s3fs had not uploaded yet. Instead the bridge's own mount is detached lazily too;
// once the last file open on it is closed the kernel releases the filesystem, s3fs's session
// ends and it exits by itself, flushing as usual. The agent keeps watching it (its child, or
// through a pidfd once adopted) and removes its record and cgroup after it exited. The record
// is kept as <bridges>/<pv>.<pid>.retiring, so a restarted agent watches it again.

const retiringSuffix = ".retiring"

// RetiringRecordFile is the record of one retiring bridge process.
func (l Layout) RetiringRecordFile(pvName string, pid int) string {
	return filepath.Join(l.BridgesDir(), fmt.Sprintf("%s.%d%s", pvName, pid, retiringSuffix))
}

// parseRetiringRecord returns the PV and pid of a retiring record's file name.
func parseRetiringRecord(name string) (pv string, pid int, ok bool) {
	base, ok := strings.CutSuffix(name, retiringSuffix)
	if !ok {
		return "", 0, false
	}
	return cutPID(base, '.')
}

// cutPID splits "<stem><sep><pid>" at the last sep; ok=false without a stem or a positive pid.
func cutPID(s string, sep byte) (stem string, pid int, ok bool) {
	i := strings.LastIndexByte(s, sep)
	if i <= 0 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(s[i+1:])
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	return s[:i], pid, true
}

// Retire detaches pv's unused bridge and lets its s3fs exit when its last user is gone.
func (s *Supervisor) Retire(ctx context.Context, pv string) {
	log := logr.FromContextOrDiscard(ctx).WithValues("pv", pv)
	pid := 0
	if st := s.take(pv, true); st != nil && st.proc != nil {
		rec := BridgeRecord{Proc: st.proc.ID(), Cgroup: st.cgroup}
		pid = rec.Proc.Pid
		if data, err := json.Marshal(rec); err == nil {
			if err := s.os.FS.WriteFile(s.layout.RetiringRecordFile(pv, pid), data, 0o600); err != nil {
				log.Error(err, "recording the retiring bridge: a restarted agent will not watch it")
			}
		}
		if cur, ok, _ := s.readRecord(pv); ok && cur.Proc == rec.Proc {
			_ = s.os.FS.Remove(s.layout.BridgeRecordFile(pv))
		}
	}
	if table, err := s.os.Mounter.MountTable(); err == nil {
		stack.UnmountAll(s.os.Mounter, s.layout.MountPoint(pv), table)
	}
	log.Info("bridge retired: its mount detached, its s3fs exits once the last file open on it is closed", "pid", pid)
}

// adoptRetiring watches again the retiring bridges an earlier agent left (their records),
// forgets those whose process has exited meanwhile, and returns the cgroups of those it watches.
func (s *Supervisor) adoptRetiring(ctx context.Context) (cgroups []string) {
	log := logr.FromContextOrDiscard(ctx)
	names, err := s.os.FS.ReadDir(s.layout.BridgesDir())
	if err != nil {
		return nil
	}
	for _, name := range names {
		pv, pid, ok := parseRetiringRecord(name)
		if !ok {
			continue
		}
		rec, err := s.readRetiring(name, pid)
		if err != nil {
			log.Error(err, "unreadable retiring bridge record; removing it", "file", name)
			_ = s.os.FS.Remove(filepath.Join(s.layout.BridgesDir(), name))
			continue
		}
		proc, err := s.os.Procs.Adopt(rec.Proc, s.layout.MountPoint(pv))
		if err != nil {
			log.Info("retiring bridge has exited", "pv", pv, "pid", pid)
			s.forget(ctx, pv, rec, true)
			continue
		}
		log.Info("watching a retiring bridge again until it exits", "pv", pv, "pid", pid)
		cgroups = append(cgroups, rec.Cgroup)
		go func() {
			_ = proc.Wait()
			s.forget(ctx, pv, rec, true)
		}()
	}
	return cgroups
}

// readRetiring reads the retiring record file name, of process pid.
func (s *Supervisor) readRetiring(name string, pid int) (BridgeRecord, error) {
	data, err := s.os.FS.ReadFile(filepath.Join(s.layout.BridgesDir(), name))
	var rec BridgeRecord
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err == nil && rec.Proc.Pid != pid {
		err = fmt.Errorf("record of pid %d in %s", rec.Proc.Pid, name)
	}
	return rec, err
}
