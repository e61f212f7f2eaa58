package runcmd

import (
	"sync/atomic"

	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// Batched is the CPU backend of a server's slots whose decode steps are
// batched (runtime.Batcher): one pool of o.Threads threads shared by every
// slot, one batcher, a session per slot. The pool and the batcher close
// with the last slot.
type Batched struct {
	pool *kernels.Pool
	b    *runtime.Batcher
	ctx  int
	open atomic.Int32
}

// NewBatched opens the shared pool and batcher for l's model.
func NewBatched(l *Loaded, o DeviceOptions) *Batched {
	pool := kernels.NewPool(o.Threads)
	return &Batched{pool: pool, b: runtime.NewBatcher(l.Model, pool), ctx: o.Context}
}

// Slot returns one more slot: a session of its own on the shared batcher.
func (b *Batched) Slot() Backend {
	b.open.Add(1)
	return batchedSlot{b.b.NewSession(b.ctx), b}
}

// Stats returns the batcher's counts (steps, tokens).
func (b *Batched) Stats() runtime.BatchStats { return b.b.Stats() }

type batchedSlot struct {
	*runtime.Session
	b *Batched
}

func (s batchedSlot) Close() {
	if s.b.open.Add(-1) == 0 {
		s.b.b.Close()
		s.b.pool.Close()
	}
}
