// Package profile runs task prompts through a model and scores every FFN
// neuron: s_n = Σ_t |a_n(t)|, a = the input of down_proj (silu(gate)·up), over
// every processed token, prompt and generated (paper §3).
package profile

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// Accumulator sums |a_n| per layer and original neuron index in float64.
// It implements runtime.Observer.
type Accumulator struct {
	Sums [][]float64 // [layer][intermediate_size]
}

// NewAccumulator returns zeroed sums for layers × n neurons.
func NewAccumulator(layers, n int) *Accumulator {
	a := &Accumulator{Sums: make([][]float64, layers)}
	for i := range a.Sums {
		a.Sums[i] = make([]float64, n)
	}
	return a
}

// ObserveFFN adds |act| of T tokens to the sums; rows maps columns to
// original neurons (nil: column j is neuron j).
func (a *Accumulator) ObserveFFN(layer int, act []float32, T int, rows []int32) {
	s := a.Sums[layer]
	kept := len(act) / T
	for t := 0; t < T; t++ {
		row := act[t*kept : (t+1)*kept]
		if rows == nil {
			for j, v := range row {
				s[j] += math.Abs(float64(v))
			}
			continue
		}
		for j, v := range row {
			s[rows[j]] += math.Abs(float64(v))
		}
	}
}

// Add adds b's sums into a.
func (a *Accumulator) Add(b *Accumulator) {
	for i, s := range b.Sums {
		for j, v := range s {
			a.Sums[i][j] += v
		}
	}
}

func (a *Accumulator) clear() {
	for _, s := range a.Sums {
		clear(s)
	}
}

// Options configures Run.
type Options struct {
	MaxNewTokens int // greedy tokens generated (and fed back) after each prompt
	Workers      int // prompts profiled at once, each with its own session (≤ 0: 1)
	Threads      int // kernel threads per worker (≤ 0: kernels.DefaultThreads() / Workers, at least 1)
	Context      int // KV cache positions (≤ 0: min(Config.MaxContext, runtime.DefaultContext); capped at MaxContext)
	BOS          int // kept as the first token when a prompt is cut (-1: none)
	// Progress, when set, is called after each prompt with the prompts and
	// tokens done so far (from one goroutine at a time).
	Progress func(prompts int, tokens int64)
	// ChunkSize > 0 calls OnChunk for each run of ChunkSize consecutive
	// prompts (the last may be shorter) with that chunk's own raw profile:
	// the within-task stability analysis of the paper's Fig 3.
	ChunkSize int
	OnChunk   func(chunk int, r *Result) error
}

// Result is a profile: raw sums and exact token counts.
type Result struct {
	Sums            [][]float64
	Prompts         int
	InputTokens     int64 // prompt tokens processed (after cutting)
	GeneratedTokens int64 // generated tokens processed (fed back through the model)
	Truncated       int   // prompts cut from the left to fit the context
	CutTokens       int64 // tokens removed by cutting
}

// Truncate cuts a prompt from the left so that it and maxNew generated tokens
// fit in ctx positions, keeping a leading BOS. It returns the prompt and the
// number of tokens removed.
func Truncate(p []int, ctx, maxNew, bos int) ([]int, int) {
	room := ctx - maxNew
	if len(p) <= room {
		return p, 0
	}
	if bos >= 0 && len(p) > 0 && p[0] == bos && room > 1 {
		cut := len(p) - room
		return append([]int{bos}, p[1+cut:]...), cut
	}
	return p[len(p)-room:], len(p) - room
}

// Run profiles every prompt (token ids): one batched prefill computing all
// neurons, then MaxNewTokens greedy tokens, each fed back through the model,
// so each processed token contributes |a| once. Per-prompt sums are added in
// prompt order, so the result does not depend on Workers. Errors: no
// prompts, an empty prompt (naming its index), a context too small.
func Run(m *runtime.Model, prompts [][]int, opt Options) (*Result, error) {
	if len(prompts) == 0 {
		return nil, errors.New("profile: no prompts")
	}
	workers := max(opt.Workers, 1)
	workers = min(workers, len(prompts))
	c := m.Config
	ctx := opt.Context
	if ctx <= 0 {
		ctx = min(c.MaxContext(), runtime.DefaultContext)
	}
	ctx = min(ctx, c.MaxContext())
	if opt.MaxNewTokens < 0 || opt.MaxNewTokens >= ctx {
		return nil, fmt.Errorf("profile: max new tokens %d must be in [0, context %d)", opt.MaxNewTokens, ctx)
	}
	res := &Result{Sums: NewAccumulator(c.Layers, c.Intermediate).Sums}
	total := &Accumulator{Sums: res.Sums}
	type done struct {
		acc       *Accumulator
		in, gen   int64
		cut       int
		err       error
		readySlot chan struct{}
	}
	threads := opt.Threads
	if threads <= 0 {
		threads = max(1, kernels.DefaultThreads()/workers)
	}
	// Per-prompt slots keep the order of summation fixed.
	slots := make([]done, len(prompts))
	for i := range slots {
		slots[i].readySlot = make(chan struct{})
	}
	next := make(chan int)
	free := make(chan *Accumulator, workers)
	for range workers {
		free <- NewAccumulator(c.Layers, c.Intermediate)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool := kernels.NewPool(threads)
			defer pool.Close()
			s := m.NewSession(pool, ctx)
			for {
				// Take an accumulator before a prompt: prompts are handed
				// out in order, so the prompt the collector waits for always
				// has one (taking it after could deadlock when every
				// accumulator sits in a later, finished slot).
				acc := <-free
				i, ok := <-next
				if !ok {
					free <- acc
					return
				}
				acc.clear()
				d := &slots[i]
				d.acc = acc
				d.in, d.gen, d.cut, d.err = profileOne(s, acc, prompts[i], i, ctx, opt)
				close(d.readySlot)
			}
		}()
	}
	go func() {
		for i := range prompts {
			next <- i
		}
		close(next)
	}()
	var firstErr error
	var chunk *Result
	for i := range slots {
		d := &slots[i]
		<-d.readySlot
		if d.err != nil && firstErr == nil {
			firstErr = d.err
		}
		if firstErr == nil {
			total.Add(d.acc)
			res.Prompts++
			res.InputTokens += d.in
			res.GeneratedTokens += d.gen
			if d.cut > 0 {
				res.Truncated++
				res.CutTokens += int64(d.cut)
			}
			if opt.ChunkSize > 0 && opt.OnChunk != nil {
				if chunk == nil {
					chunk = &Result{Sums: NewAccumulator(c.Layers, c.Intermediate).Sums}
				}
				(&Accumulator{Sums: chunk.Sums}).Add(d.acc)
				chunk.Prompts++
				chunk.InputTokens += d.in
				chunk.GeneratedTokens += d.gen
				if chunk.Prompts == opt.ChunkSize || i == len(slots)-1 {
					if err := opt.OnChunk(i/opt.ChunkSize, chunk); err != nil {
						firstErr = err
					}
					chunk = nil
				}
			}
			if opt.Progress != nil {
				opt.Progress(res.Prompts, res.InputTokens+res.GeneratedTokens)
			}
		}
		free <- d.acc
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return res, nil
}

func profileOne(s *runtime.Session, acc *Accumulator, prompt []int, i, ctx int, opt Options) (in, gen int64, cut int, err error) {
	if len(prompt) == 0 {
		return 0, 0, 0, fmt.Errorf("profile: prompt %d is empty", i)
	}
	p, cut := Truncate(prompt, ctx, opt.MaxNewTokens, opt.BOS)
	s.Reset()
	s.Observe = acc
	defer func() { s.Observe = nil }()
	logits, err := s.Forward(p, false)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("profile: prompt %d: %w", i, err)
	}
	for g := 0; g < opt.MaxNewTokens; g++ {
		if logits, err = s.Forward([]int{runtime.Argmax(logits)}, false); err != nil {
			return 0, 0, 0, fmt.Errorf("profile: prompt %d: %w", i, err)
		}
		gen++
	}
	return int64(len(p)), gen, cut, nil
}
