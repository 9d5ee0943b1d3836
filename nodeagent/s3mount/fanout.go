package s3mount

import "sync"

// fanout runs one incident's per-target work (a bridge bind, a replayed publish, a hand-back,
// and each pod's container remount) on at most Options.Workers goroutines. The targets of one
// PV are independent of each other (each its own kubelet path and pod), and done one after the
// other the last pod of a PV shared by many waited for every pod before it: its window grew
// with the number of pods.
type fanout struct {
	sem chan struct{}
	wg  sync.WaitGroup
}

func (r *Restorer) newFanout() *fanout {
	return &fanout{sem: make(chan struct{}, max(1, r.opts.Workers))}
}

// Go runs fn once a worker is free; it blocks while all are busy.
func (f *fanout) Go(fn func()) {
	f.sem <- struct{}{}
	f.wg.Add(1)
	go func() {
		defer func() {
			<-f.sem
			f.wg.Done()
		}()
		fn()
	}()
}

// Wait returns when every fn started by Go has returned.
func (f *fanout) Wait() { f.wg.Wait() }
