package runtime

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// BenchmarkBatchDecode times one batched decode step of B sessions (dense
// decode) on the .sinf file named by $SINF_BENCH_FILE, and B single-token
// steps of Forward for comparison: tokens/s in the "tok/s" metric.
//
//	SINF_BENCH_FILE=smol-f16.sinf go test -run - -bench BatchDecode ./runtime/
func BenchmarkBatchDecode(b *testing.B) {
	m := benchModel(b)
	pool := kernels.NewPool(0)
	defer pool.Close()
	bt := &Batcher{m: m, pool: pool}
	for _, B := range []int{1, 2, 4} {
		ss := make([]*Session, B)
		ids := make([]int, B)
		for i := range ss {
			ss[i] = m.NewSession(pool, 4096)
			if _, err := ss[i].Forward([]int{1, 2 + i, 3}, false); err != nil {
				b.Fatal(err)
			}
			ids[i] = 7 + i
		}
		b.Run(fmt.Sprintf("batched/B=%d", B), func(b *testing.B) {
			for range b.N {
				if err := bt.decode(ss, ids); err != nil {
					b.Fatal(err)
				}
				for _, s := range ss {
					s.pos = 3
				}
			}
			b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
		b.Run(fmt.Sprintf("single/B=%d", B), func(b *testing.B) {
			for range b.N {
				for i, s := range ss {
					if _, err := s.Forward(ids[i:i+1], false); err != nil {
						b.Fatal(err)
					}
					s.pos = 3
				}
			}
			b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkBatchGenerate times whole greedy generations (a 5-token prompt,
// 32 new tokens, a fresh session each, as a server's requests) by B
// goroutines at once through one Batcher on $SINF_BENCH_FILE: tokens/s of
// all of them together in the "tok/s" metric, the batcher's prefills and
// step gathering included.
func BenchmarkBatchGenerate(b *testing.B) {
	m := benchModel(b)
	for _, B := range []int{1, 4} {
		b.Run(fmt.Sprintf("B=%d", B), func(b *testing.B) {
			pool := kernels.NewPool(0)
			bt := NewBatcher(m, pool)
			defer func() { bt.Close(); pool.Close() }()
			ss := make([]*Session, B)
			for i := range ss {
				ss[i] = bt.NewSession(64)
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			errs := make([]error, B)
			for i, s := range ss {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range b.N {
						s.Reset()
						if _, err := s.Generate([]int{1, 2 + i, 3, 4, 5}, GenerateOptions{MaxTokens: 32}); err != nil {
							errs[i] = err
							return
						}
					}
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(32*B*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// benchModel loads the .sinf file named by $SINF_BENCH_FILE (skipping the
// benchmark without one), closed when the benchmark ends.
func benchModel(b *testing.B) *Model {
	path := os.Getenv("SINF_BENCH_FILE")
	if path == "" {
		b.Skip("set SINF_BENCH_FILE to a .sinf file")
	}
	f, err := format.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	m, err := LoadFile(f)
	if err != nil {
		b.Fatal(err)
	}
	return m
}
