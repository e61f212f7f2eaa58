package runtime

import (
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestBatcherOneThread: the batcher's loop runs every request (prefills and
// decode steps, which call the pool) on one OS thread while other
// goroutines come and go around it, so that the pool's caller reads its own
// scheduler times from one thread: a loop that moved between the Go
// runtime's threads made the pool's run-delay signal read both the loop's
// threads competing for a CPU (on a free 2-vCPU VM, 4 sessions of the
// SmolLM2 F16 shape: 0.16–0.34 of waiting, so the pool dropped to one
// thread and generated 130–190 tok/s instead of 220–250).
func TestBatcherOneThread(t *testing.T) {
	b := &Batcher{reqs: make(chan *batchReq), done: make(chan struct{}), Wait: time.Millisecond}
	go b.loop()
	defer b.Close()
	var mu sync.Mutex
	tids := map[int]int{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &Session{batch: b}
			s.breq = batchReq{s: s, err: make(chan error, 1)}
			for i := range 40 {
				err := s.submit(func() error {
					mu.Lock()
					tids[syscall.Gettid()]++
					mu.Unlock()
					return nil
				}, 0)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(g+i%3) * 20 * time.Microsecond) // the loop parks meanwhile
			}
		}()
	}
	wg.Wait()
	if len(tids) != 1 {
		t.Fatalf("the batcher ran its requests on %d OS threads (requests per thread id: %v), want 1", len(tids), tids)
	}
}
