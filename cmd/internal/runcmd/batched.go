package runcmd

import (
	"sync/atomic"

	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// Batched is the CPU backend of a server's slots whose decode steps are
// batched (runtime.Batcher): groups batchers, each on a pool of its share
// of o.Threads threads, and a session per slot, the slots dealt to the
// groups in turn. One group batches every slot on every thread; more
// groups batch fewer slots each on fewer threads, with no synchronisation
// between groups (as per-slot pools have none). The pools and batchers
// close with the last slot.
type Batched struct {
	groups []batchGroup
	ctx    int
	next   atomic.Int32
	open   atomic.Int32
}

type batchGroup struct {
	pool *kernels.Pool
	b    *runtime.Batcher
}

// NewBatched opens the pools and batchers for l's model: groups of them
// (at least 1, at most the threads), o.Threads (0: kernels.DefaultThreads)
// shared among them as evenly as they divide.
func NewBatched(l *Loaded, o DeviceOptions, groups int) *Batched {
	threads := o.Threads
	if threads <= 0 {
		threads = kernels.DefaultThreads()
	}
	bt := &Batched{ctx: o.Context}
	for _, n := range groupThreads(threads, groups) {
		pool := kernels.NewPool(n)
		bt.groups = append(bt.groups, batchGroup{pool, runtime.NewBatcher(l.Model, pool)})
	}
	return bt
}

// groupThreads deals threads (≥ 1) to groups batches (clamped to [1,
// threads]) as evenly as they divide, the first ones one more.
func groupThreads(threads, groups int) []int {
	groups = max(1, min(groups, threads))
	n := make([]int, groups)
	for g := range n {
		n[g] = threads / groups
		if g < threads%groups {
			n[g]++
		}
	}
	return n
}

// Slot returns one more slot: a session of its own on the next group's
// batcher.
func (b *Batched) Slot() Backend {
	b.open.Add(1)
	g := &b.groups[int(b.next.Add(1)-1)%len(b.groups)]
	return batchedSlot{g.b.NewSession(b.ctx), b}
}

// Stats returns the batchers' counts (steps, tokens), summed.
func (b *Batched) Stats() runtime.BatchStats {
	var s runtime.BatchStats
	for _, g := range b.groups {
		gs := g.b.Stats()
		s.Steps += gs.Steps
		s.Tokens += gs.Tokens
	}
	return s
}

type batchedSlot struct {
	*runtime.Session
	b *Batched
}

func (s batchedSlot) Close() {
	if s.b.open.Add(-1) == 0 {
		for _, g := range s.b.groups {
			g.b.Close()
			g.pool.Close()
		}
	}
}
