package runtime_test

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// sliced converts the shared model name to a .sinf of every layer sliced
// (random selection, γ 0.7) stored as dt, and opens it.
func sliced(t *testing.T, name string, dt format.DType) *runtime.Model {
	t.Helper()
	ck, _ := load(t, name)
	opt := convert.DefaultOptions()
	opt.Random, opt.DType = true, dt
	opt.FirstLayer, opt.LastLayer, opt.ExplicitRange = 0, ck.Config.Layers, true
	out := filepath.Join(t.TempDir(), "m.sinf")
	_, err := convert.Convert(ck, out, opt)
	require.NoError(t, err)
	f, err := format.Open(out)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	m, err := runtime.LoadFile(f)
	require.NoError(t, err)
	return m
}

// TestBatchedGenerate: four sessions generating at once through a Batcher
// (prompts of different lengths, different lengths of generation, one that
// joins late) give each the greedy ids of a session of its own, and their
// teacher-forced NLLs equal bit for bit, while the batcher computes more
// than one token per step on average: on a dense F32 model, Qwen2 with its
// biases, and sliced F16 / Q8_0 / Q4_0 files in dense decode (the batched
// FFN with AddRowsBatch), GateFirst (the gate product batched, each
// session's own rows) and SelectInfer (each session's own FFN), and with
// F16 KV caches.
func TestBatchedGenerate(t *testing.T) {
	_, hf260 := load(t, "stories260k")
	_, qwen := load(t, "tiny-random-qwen2")
	_, hf260kv := load(t, "stories260k")
	hf260kv.KVCache = format.F16
	slicedKV := sliced(t, "stories260k", format.F16)
	slicedKV.KVCache = format.F16
	models := []struct {
		name  string
		m     *runtime.Model
		modes []runtime.Mode
	}{
		{"stories260k", hf260, []runtime.Mode{runtime.Dense}},
		{"tiny-random-qwen2", qwen, []runtime.Mode{runtime.Dense}},
		{"stories260k-f16-g0.7", sliced(t, "stories260k", format.F16), []runtime.Mode{runtime.Dense, runtime.GateFirst, runtime.SelectInfer}},
		{"tinystories-656k-q8_0-g0.7", sliced(t, "tinystories-656k", format.Q8_0), []runtime.Mode{runtime.Dense, runtime.GateFirst}},
		{"tinystories-656k-q4_0-g0.7", sliced(t, "tinystories-656k", format.Q4_0), []runtime.Mode{runtime.Dense}},
		{"stories260k-kv-f16", hf260kv, []runtime.Mode{runtime.Dense}},
		{"stories260k-f16-g0.7-kv-f16", slicedKV, []runtime.Mode{runtime.GateFirst}},
	}
	prompts := [][]int{{1, 5, 9, 33, 2}, {1, 17, 40}, {1, 7, 11, 3, 60, 21, 8, 9, 10}, {1, 2}}
	maxTokens := []int{12, 20, 7, 16}
	for _, mc := range models {
		for _, mode := range mc.modes {
			t.Run(mc.name+"/"+mode.String(), func(t *testing.T) {
				m := mc.m
				sp := runtime.Sparsity{Mode: mode, Phi: 0.4, Alpha: 0.2}
				if mode == runtime.GateFirst {
					sp.Phi = 0.25
				}
				for i := range prompts {
					for j := range prompts[i] {
						prompts[i][j] %= m.Config.Vocab
					}
				}
				pool := kernels.NewPool(2)
				defer pool.Close()
				wantIDs := make([][]int, len(prompts))
				wantNLL := make([][]float64, len(prompts))
				for i, p := range prompts {
					s := m.NewSession(pool, 64)
					res, err := s.Generate(p, runtime.GenerateOptions{MaxTokens: maxTokens[i], Sparsity: sp})
					require.NoError(t, err)
					wantIDs[i] = res.IDs
					s.Reset()
					wantNLL[i], err = s.Score(p, res.IDs, sp)
					require.NoError(t, err)
				}
				bpool := kernels.NewPool(2)
				defer bpool.Close()
				b := runtime.NewBatcher(m, bpool)
				defer b.Close()
				b.Wait = 50 * time.Millisecond // generous under -race; a step still never waits for a session that left
				gotIDs := make([][]int, len(prompts))
				gotNLL := make([][]float64, len(prompts))
				errs := make([]error, len(prompts))
				var wg sync.WaitGroup
				for i, p := range prompts {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if i == len(prompts)-1 {
							time.Sleep(20 * time.Millisecond) // joins while the others decode
						}
						s := b.NewSession(64)
						// A millisecond per token (a client being written to)
						// keeps the generations of these tiny models
						// overlapping; the others' steps wait for it.
						res, err := s.Generate(p, runtime.GenerateOptions{MaxTokens: maxTokens[i], Sparsity: sp,
							OnToken: func(int) { time.Sleep(time.Millisecond) }})
						if err != nil {
							errs[i] = err
							return
						}
						gotIDs[i] = res.IDs
						s.Reset()
						gotNLL[i], errs[i] = s.Score(p, res.IDs, sp)
					}()
				}
				wg.Wait()
				for i := range prompts {
					require.NoError(t, errs[i], "session %d", i)
					require.Equal(t, wantIDs[i], gotIDs[i], "session %d: batched greedy ids", i)
					require.Equal(t, wantNLL[i], gotNLL[i], "session %d: batched NLL, bit for bit", i)
				}
				st := b.Stats()
				require.Greater(t, st.Tokens, st.Steps, "no step batched more than one token: %+v", st)
			})
		}
	}
}

// TestBatcherAdmitsIntoTheNextStep: a session that arrives while another
// decodes joins the step right after its prefill: the batcher holds the
// waiting session's token back for one more gathering instead of decoding it
// alone. Two sessions of 24 tokens, the second arriving at the first's
// first token, then end together, in the steps the first takes alone (a
// step later, the second would take one step alone at its end).
func TestBatcherAdmitsIntoTheNextStep(t *testing.T) {
	_, m := load(t, "stories260k")
	run := func(join bool) runtime.BatchStats {
		pool := kernels.NewPool(2)
		defer pool.Close()
		b := runtime.NewBatcher(m, pool)
		defer b.Close()
		b.Wait = time.Second // every live session hands in its token well within it, -race included
		var wg sync.WaitGroup
		errs := make([]error, 2)
		started := false
		a := b.NewSession(64)
		_, errs[0] = a.Generate([]int{1, 5, 9}, runtime.GenerateOptions{MaxTokens: 24, OnToken: func(int) {
			if !join || started {
				return
			}
			started = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := b.NewSession(64)
				_, errs[1] = s.Generate([]int{1, 17, 40, 2}, runtime.GenerateOptions{MaxTokens: 24})
			}()
			// B becomes live (its prefill then reaches the batcher, which
			// waits up to Wait for it) before A's next token is handed in
			time.Sleep(200 * time.Millisecond)
		}})
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		return b.Stats()
	}
	alone, joined := run(false), run(true)
	require.Equal(t, alone.Steps, joined.Steps, "steps of A alone %+v, with B joining %+v", alone, joined)
	require.Equal(t, 2*alone.Tokens, joined.Tokens, "tokens of A alone %+v, with B joining %+v", alone, joined)
}

// TestBatcherErrors: a batched session past its context gets
// ErrContextFull as a session of its own does, and the others go on.
func TestBatcherErrors(t *testing.T) {
	_, m := load(t, "stories260k")
	pool := kernels.NewPool(2)
	defer pool.Close()
	b := runtime.NewBatcher(m, pool)
	defer b.Close()
	s := b.NewSession(8)
	res, err := s.Generate([]int{1, 2, 3}, runtime.GenerateOptions{MaxTokens: 100})
	require.NoError(t, err)
	require.Len(t, res.IDs, 6, "context 8 after 3 prompt tokens: MaxNewTokens")
	_, err = s.Score([]int{1, 2, 3}, make([]int, 6), runtime.Sparsity{})
	require.ErrorContains(t, err, "not empty")
	s.Reset()
	nll, err := s.Score([]int{1, 2, 3}, make([]int, 6), runtime.Sparsity{})
	require.NoError(t, err, "3 + 5 fed positions fill the context of 8")
	require.Len(t, nll, 6)
	s.Reset()
	_, err = s.Score([]int{1, 2, 3}, make([]int, 7), runtime.Sparsity{})
	require.ErrorIs(t, err, runtime.ErrContextFull)
	other := b.NewSession(8)
	again, err := other.Generate([]int{1, 2, 3}, runtime.GenerateOptions{MaxTokens: 100})
	require.NoError(t, err)
	require.Equal(t, res.IDs, again.IDs)
}
