package containermount

import (
	"fmt"
	"time"
)

// A restore pass puts one volume back for every pod of the node and only then asks RemountPods
// about their containers, whose first step lists the node's processes (each one's cgroup,
// namespaces and stat): the first container of a 20-pod pass waited 25–57 ms for that list,
// after every target was already live. PrefetchPods reads the list while the targets are put
// back; the pass then reads only the processes started since and drops those that ended.

// prefetchFresh bounds the age of a prefetched list a pass may use. A pid the list saw is
// never read again within it, so a pid reused for a pod's process in that time would be missed;
// the kernel hands out pids in increasing order up to pid_max before reusing one, which takes
// far longer than this on a node.
const prefetchFresh = 10 * time.Second

// procScan is a list of the processes of some pods, read by PrefetchPods.
type procScan struct {
	uids  map[string]bool
	start time.Time
	done  chan struct{}
	// Set before done is closed; afterwards changed only by refresh, under Remounter.mu.
	seen  map[int]bool // every pid looked at, of those pods or not
	procs map[string][]Proc
	err   error
}

// PrefetchPods starts listing the processes of the pods with the given UIDs in the background,
// for the RemountPods passes over (some of) those pods in the next prefetchFresh (see
// procScan). The caller goes on restoring their targets meanwhile.
func (r *Remounter) PrefetchPods(podUIDs []string) {
	uids := map[string]bool{}
	for _, u := range podUIDs {
		uids[NormalizeUID(u)] = true
	}
	s := &procScan{uids: uids, start: r.clock.Now(), done: make(chan struct{})}
	r.scanMu.Lock()
	r.scan = s
	r.scanMu.Unlock()
	go func() {
		defer close(s.done)
		pids, err := r.os.Proc.Pids()
		if err != nil {
			s.err = fmt.Errorf("list processes: %w", err)
			return
		}
		s.seen, s.procs = map[int]bool{}, map[string][]Proc{}
		r.readProcs(pids, uids, s.procs, s.seen)
	}()
}

// prefetched returns the latest prefetched list when it covers every pod in uids and is fresh,
// once it is read; else nil (the pass lists every process itself).
func (r *Remounter) prefetched(uids map[string]bool) *procScan {
	r.scanMu.Lock()
	s := r.scan
	r.scanMu.Unlock()
	if s == nil || r.clock.Since(s.start) > prefetchFresh {
		return nil
	}
	for u := range uids {
		if !s.uids[u] {
			return nil
		}
	}
	<-s.done // a read of /proc: it ends
	if s.err != nil {
		return nil
	}
	return s
}

// refresh brings the prefetched list s up to date — processes that ended dropped, those started
// since read — and returns the processes of the pods in uids. Run under r.mu.
func (r *Remounter) refresh(s *procScan, uids map[string]bool) (map[string][]Proc, error) {
	pids, err := r.os.Proc.Pids()
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	alive := make(map[int]bool, len(pids))
	var fresh []int
	for _, pid := range pids {
		alive[pid] = true
		if !s.seen[pid] {
			fresh = append(fresh, pid)
		}
	}
	for pid := range s.seen {
		if !alive[pid] {
			delete(s.seen, pid)
		}
	}
	for uid, ps := range s.procs {
		kept := ps[:0]
		for _, p := range ps {
			if alive[p.Pid] {
				kept = append(kept, p)
			}
		}
		s.procs[uid] = kept
	}
	r.readProcs(fresh, s.uids, s.procs, s.seen)
	out := map[string][]Proc{}
	for uid := range uids {
		if ps := s.procs[uid]; len(ps) > 0 {
			out[uid] = append([]Proc(nil), ps...)
		}
	}
	return out, nil
}
