package kernels

import (
	"math/rand/v2"
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
// workers), the pages of an empty matrix none; a new Ahead is read from
// its start; nil, or a pool whose adapt keeps workers asleep, reads
// nothing; and calls made meanwhile compute what they compute without it.
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
	check(a) // and so is a again, handed anew

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
