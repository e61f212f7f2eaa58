package runtime

import (
	"fmt"
	"math"
	goruntime "runtime"
)

// GenerateOptions configures Session.Generate.
type GenerateOptions struct {
	MaxTokens int          // tokens to generate at most
	Sampler   *Sampler     // nil: greedy
	Sparsity  Sparsity     // which neurons decode computes
	EOS       []int        // generation stops after emitting one of these
	OnToken   func(id int) // called with each generated id as it is produced
	// Stop, when set, is called after each generated id (after OnToken);
	// true ends the generation there, before the next decode step: a
	// server's client went away, or a stop string matched.
	Stop func() bool
}

// Result reports a generation: ids, timings and the neurons computed.
type Result struct {
	PromptIDs         []int
	IDs               []int // generated, EOS included when emitted
	PrefillSeconds    float64
	DecodeSeconds     float64
	PrefillTokensPerS float64
	DecodeTokensPerS  float64 // decode steps (tokens fed after the prompt) per second
	LoadedNeurons     []int   // per layer: neurons stored
	ComputedNeurons   []int   // per layer: neurons computed per decode step
}

// multiObserver fans one activation batch out to several observers.
type multiObserver []Observer

func (m multiObserver) ObserveFFN(layer int, act []float32, T int, rows []int32) {
	for _, o := range m {
		o.ObserveFFN(layer, act, T, rows)
	}
}

// MaxNewTokens is the end-of-context rule of every generation loop (this
// package's, cuda's, and the server's): after a prompt of prompt tokens, a
// session of context positions generates at most context − prompt + 1
// tokens, and at most maxTokens. The prompt fills positions [0, prompt),
// each generated token but the last is fed at the next position, and the
// last is sampled from the logits of position context − 1 and never fed:
// no more than context positions are ever processed.
func MaxNewTokens(context, prompt, maxTokens int) int {
	return max(0, min(maxTokens, context-prompt+1))
}

// Generate runs the prompt as one batched prefill, computing every loaded
// neuron; in a sparse mode it counts activations (Counter) and fixes each
// sliced layer's active set (ActiveSet); then it samples and feeds tokens one
// at a time until MaxTokens, an EOS id, Stop, or the end of the context. The
// session must be empty (Pos() == 0). It is GenerateOn over the CPU's
// forward pass.
func (s *Session) Generate(prompt []int, opt GenerateOptions) (Result, error) {
	if s.batch != nil {
		return s.batch.generate(s, prompt, opt)
	}
	defer lockThread()()
	return GenerateOn(cpuDecoder{s}, prompt, opt)
}

// lockThread keeps the calling goroutine on its OS thread until the
// returned function runs. A goroutine that calls the pool (its caller
// thread) between waits — a server's handler streaming tokens, a batcher's
// loop — otherwise resumes on another of the Go runtime's threads, and the
// pool's run-delay signal (kernels' adapt) reads the thread it left still
// competing for a CPU: one client of `sinf-run serve` (SmolLM2 F16, 2
// threads, AVX2-only Zen 3) decoded at 58–69 tok/s where sinf-run did
// 77–87. Locks nest, so a caller that already holds one keeps it.
func lockThread() func() {
	goruntime.LockOSThread()
	return goruntime.UnlockOSThread
}

// Score returns the negative log-likelihood (natural log) of each token of
// cont given the prompt and the tokens of cont before it (ScoreOn over the
// CPU's forward pass). The session must be empty. Used for perplexity and
// log-likelihood evaluation.
func (s *Session) Score(prompt, cont []int, sp Sparsity) ([]float64, error) {
	if s.batch != nil {
		return s.batch.score(s, prompt, cont, sp)
	}
	defer lockThread()()
	return ScoreOn(cpuDecoder{s}, prompt, cont, sp)
}

// cpuDecoder is the Session as the Decoder of GenerateOn and ScoreOn.
type cpuDecoder struct{ s *Session }

func (d cpuDecoder) Model() *Model { return d.s.m }
func (d cpuDecoder) Pos() int      { return d.s.pos }
func (d cpuDecoder) Context() int  { return d.s.ctx }
func (d cpuDecoder) Sync() error   { return nil }

// Prefill: the prompt through Forward with a Counter observing the FFN
// activations (SelectInfer, CoreInfer) or GateFirst's calibration, then the
// active sets (ActiveSet) or per-token counts of the sliced layers.
func (d cpuDecoder) Prefill(prompt []int, sp Sparsity) ([]int, error) {
	s := d.s
	var counter *Counter
	saved := s.Observe
	if sp.Mode != Dense && !sp.Mode.PerToken() {
		counter = NewCounter(s.m, sp.Alpha)
		if saved != nil {
			s.Observe = multiObserver{saved, counter}
		} else {
			s.Observe = counter
		}
	}
	if sp.Mode.PerToken() {
		s.startCalib()
	}
	s.oracle = sp.Mode == Oracle
	_, err := s.Forward(prompt, false)
	s.Observe = saved
	calib := s.calib
	s.calib = nil // decode adds nothing
	if err != nil {
		return nil, err
	}
	N := s.m.Config.Intermediate
	computed := make([]int, 0, len(s.m.Layers))
	for i := range s.m.Layers {
		f := &s.m.Layers[i].MLP
		if counter != nil && f.Sliced {
			s.SetActive(i, ActiveSet(f, counter.Counts[i], sp, N))
		}
		if sp.Mode.PerToken() && f.Sliced {
			s.setPerToken(i, RoundCount(sp.Phi, N), calib[i])
		}
		if k := s.perToken[i]; k > 0 {
			computed = append(computed, k)
		} else if a := s.active[i]; a != nil {
			computed = append(computed, len(a))
		} else {
			computed = append(computed, f.Kept())
		}
	}
	return computed, nil
}

func (d cpuDecoder) Decode(id int) error {
	_, err := d.s.Forward([]int{id}, false)
	return err
}

// Logits: the last token's logits, where Forward left them.
func (d cpuDecoder) Logits() ([]float32, error) { return d.s.buf.logits[:d.s.m.Config.Vocab], nil }

// Next: the argmax (sampler nil) or the sampler's pick from the last
// logits, which must be finite.
func (d cpuDecoder) Next(sampler *Sampler) (int, error) {
	logits := d.s.buf.logits[:d.s.m.Config.Vocab]
	if v := logits[0]; v != v || math.IsInf(float64(v), 0) {
		return 0, fmt.Errorf("generate: logits are not finite at position %d: the weights or the config hold NaN or Inf (check the file with sinf verify)", d.s.pos)
	}
	if sampler == nil {
		return Argmax(logits), nil
	}
	return sampler.Sample(logits), nil
}

// LogSoftmaxAt returns log softmax(logits)[id], computed in float64.
func LogSoftmaxAt(logits []float32, id int) float64 {
	m := float64(logits[0])
	for _, v := range logits {
		m = max(m, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - m)
	}
	return float64(logits[id]) - m - math.Log(sum)
}

// Generator is what a command needs of a backend: the CPU Session, or a GPU
// session of the cuda package (built with -tags cuda).
type Generator interface {
	// Generate runs prefill, picks the active sets, and decodes (see
	// Session.Generate for the contract).
	Generate(prompt []int, opt GenerateOptions) (Result, error)
	// Score returns per-token NLL of cont after prompt (see Session.Score).
	Score(prompt, cont []int, sp Sparsity) ([]float64, error)
	// Reset empties the KV cache and the active sets.
	Reset()
	// Context returns the KV cache length in positions.
	Context() int
}

var _ Generator = (*Session)(nil)
