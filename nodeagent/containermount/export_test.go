package containermount

// WaitPrefetch waits until r's latest PrefetchPods list is read.
func WaitPrefetch(r *Remounter) {
	r.scanMu.Lock()
	s := r.scan
	r.scanMu.Unlock()
	<-s.done
}
