//go:build !linux

package kernels

// schedReader is not available here: the pool keeps all its threads.
type schedReader struct{}

func (r *schedReader) read(tid int64) (run, wait int64, ok bool) { return 0, 0, false }

func (r *schedReader) close() {}

func gettid() int64 { return 0 }

func threadCPUTime() int64 { return 0 }
