package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
)

// aheadPages lists the pages of a that Prefetch's workers read: each
// matrix's, from its first byte every aheadPage bytes, in order.
func aheadPages(a *Ahead) [][2]int {
	var pages [][2]int
	for mi, m := range a.Mats {
		for off := 0; off < len(m.Data); off += aheadPage {
			pages = append(pages, [2]int{mi, off})
		}
	}
	return pages
}

// TestPrefetch: the idle workers of a pool read every page of the weights
// handed to Prefetch once between them, worker i the pages i, i+n, … (n
// workers), the pages of an empty matrix none; an Ahead handed again, or a
// new one, is read from its start; once done the workers park; nil, or a
// pool whose adapt keeps workers asleep, reads nothing; and calls made
// meanwhile compute what they compute without it.
func TestPrefetch(t *testing.T) {
	raw := func(n int) Mat { return Mat{DType: format.F32, Rows: 1, Cols: n / 4, Data: make([]byte, n)} }
	a := &Ahead{Mats: []Mat{raw(3*aheadPage + 100), raw(0), raw(64), raw(5 * aheadPage)}}
	b := &Ahead{Mats: []Mat{raw(2*aheadPage + 4)}}
	const threads = 3
	p := NewPool(threads)
	defer p.Close()
	p.testFixed = true
	var mu sync.Mutex
	read := map[int][][2]int{} // worker → pages read
	p.testAhead = func(w, mi, off int) {
		mu.Lock()
		read[w] = append(read[w], [2]int{mi, off})
		mu.Unlock()
	}
	rng := rand.New(rand.NewPCG(7, 8))
	m := randMat(rng, format.F32, 256, 64, 0)
	x, want, got := randVec(rng, 64), make([]float32, 256), make([]float32, 256)
	MatVec(p, want, m.Mat, x)
	// waitFor makes calls until the workers read n pages or the time is up,
	// and returns the pages each read.
	waitFor := func(n int, limit time.Duration) map[int][][2]int {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			MatVec(p, got, m.Mat, x) // wakes parked workers; they read after it
			require.Equal(t, want, got)
			mu.Lock()
			got := 0
			for _, r := range read {
				got += len(r)
			}
			mu.Unlock()
			if got >= n || time.Now().After(deadline) {
				time.Sleep(10 * time.Millisecond) // any page read twice would show now
				mu.Lock()
				defer mu.Unlock()
				out := read
				read = map[int][][2]int{}
				return out
			}
			time.Sleep(time.Millisecond)
		}
	}
	check := func(a *Ahead) {
		t.Helper()
		p.Prefetch(a)
		pages := aheadPages(a)
		byWorker := waitFor(len(pages), 20*time.Second)
		var all [][2]int
		for w, r := range byWorker {
			// worker w's share: every (threads−1)-th page from its w-th
			var share [][2]int
			for k := w; k < len(pages); k += threads - 1 {
				share = append(share, pages[k])
			}
			sortPages(r)
			require.Equal(t, share, r, "worker %d", w)
			all = append(all, r...)
		}
		sortPages(all)
		require.Equal(t, pages, all)
	}
	require.Len(t, aheadPages(a), 4+1+5)
	check(a)
	check(b) // a new Ahead is read from its start
	check(a) // and so is a again, handed after b

	// Done with a, the workers park (they do not poll a finished Ahead).
	require.Eventually(t, func() bool { return p.parked[0].Load() && p.parked[1].Load() }, 10*time.Second, time.Millisecond)
	check(a) // a handed again, with nothing in between: read again

	p.Prefetch(nil)
	require.Empty(t, waitFor(1, 100*time.Millisecond))

	p.active = threads - 1 // adapt keeps a worker asleep: no reading ahead
	p.Prefetch(a)
	require.Nil(t, p.ahead.Load())
	p.active = threads
}

func sortPages(p [][2]int) {
	sort.Slice(p, func(i, j int) bool { return p[i][0] < p[j][0] || p[i][0] == p[j][0] && p[i][1] < p[j][1] })
}

// TestPrefetchYields: a worker reading ahead stops at the next call: it
// claims the call's chunks before it reads another page, and then goes on
// from the page after the last it read.
func TestPrefetchYields(t *testing.T) {
	raw := Mat{DType: format.F32, Rows: 1, Cols: 16 * aheadPage / 4, Data: make([]byte, 16*aheadPage)}
	p := NewPool(2)
	defer p.Close()
	p.testFixed = true
	var mu sync.Mutex
	var events []string
	hold, holding := make(chan struct{}), make(chan struct{})
	first := true
	p.testAhead = func(_, mi, off int) {
		mu.Lock()
		events = append(events, fmt.Sprintf("page %d", off/aheadPage))
		f := first
		first = false
		mu.Unlock()
		if f {
			close(holding)
			<-hold // the test publishes a call meanwhile
		}
	}
	p.testClaim = func(int) {
		mu.Lock()
		events = append(events, "call")
		mu.Unlock()
	}
	rng := rand.New(rand.NewPCG(9, 10))
	m := randMat(rng, format.F32, 256, 64, 0)
	x, dst := randVec(rng, 64), make([]float32, 256)
	MatVec(p, dst, m.Mat, x)
	p.Prefetch(&Ahead{Mats: []Mat{raw}})
	MatVec(p, dst, m.Mat, x) // wakes the worker if it parked (Prefetch does not)
	<-holding
	MatVec(p, dst, m.Mat, x) // the caller takes every chunk: the worker is held
	close(hold)
	require.Eventually(t, func() bool {
		MatVec(p, dst, m.Mat, x) // resumes a worker paused by a preemption
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(events, "page 15")
	}, 10*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	// the first call's claim, page 0, the held call's claim, pages 1–15
	i := slices.Index(events, "page 0")
	require.Greater(t, i, 0, "%v", events)
	require.Equal(t, "call", events[i+1], "the worker read on past a call: %v", events)
	var pages []string
	for _, e := range events[i:] {
		if e != "call" {
			pages = append(pages, e)
		}
	}
	want := make([]string, 16)
	for k := range want {
		want[k] = fmt.Sprintf("page %d", k)
	}
	require.Equal(t, want, pages, "each page once, in order")
}

// TestPrefetchReplaced: a worker reading ahead turns to new weights handed
// to Prefetch while it reads, with no call in between.
func TestPrefetchReplaced(t *testing.T) {
	raw := func() Mat {
		return Mat{DType: format.F32, Rows: 1, Cols: 16 * aheadPage / 4, Data: make([]byte, 16*aheadPage)}
	}
	a, b := &Ahead{Mats: []Mat{raw()}}, &Ahead{Mats: []Mat{{}, raw()}}
	p := NewPool(2)
	defer p.Close()
	p.testFixed = true
	var mu sync.Mutex
	var pages [][2]int
	hold, holding := make(chan struct{}), make(chan struct{})
	p.testAhead = func(_, mi, off int) {
		mu.Lock()
		pages = append(pages, [2]int{mi, off})
		n := len(pages)
		mu.Unlock()
		if n == 1 {
			close(holding)
			<-hold
		}
	}
	rng := rand.New(rand.NewPCG(11, 12))
	m := randMat(rng, format.F32, 256, 64, 0)
	x, dst := randVec(rng, 64), make([]float32, 256)
	MatVec(p, dst, m.Mat, x)
	p.Prefetch(a)
	MatVec(p, dst, m.Mat, x) // wakes the worker if it parked (Prefetch does not)
	<-holding
	p.Prefetch(b)
	close(hold)
	time.Sleep(20 * time.Millisecond) // with no call: the worker turns to b by itself
	require.Eventually(t, func() bool {
		MatVec(p, dst, m.Mat, x) // resumes a worker paused by a preemption
		mu.Lock()
		defer mu.Unlock()
		return len(pages) == 1+16
	}, 10*time.Second, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	want := [][2]int{{0, 0}}
	for k := range 16 {
		want = append(want, [2]int{1, k * aheadPage})
	}
	require.Equal(t, want, pages, "a's first page, then b's pages only")
}
