package runtime

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
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

// Generate runs the prompt as one batched prefill, computing every loaded
// neuron; in a sparse mode it counts activations (Counter) and fixes each
// sliced layer's active set (ActiveSet); then it samples and feeds tokens one
// at a time until MaxTokens, an EOS id, Stop, or the end of the context. The
// session must be empty (Pos() == 0).
func (s *Session) Generate(prompt []int, opt GenerateOptions) (Result, error) {
	res := Result{PromptIDs: slices.Clone(prompt)}
	if len(prompt) == 0 {
		return res, errors.New("generate: empty prompt")
	}
	if s.pos != 0 {
		return res, errors.New("generate: session is not empty; call Reset first")
	}
	if len(prompt) > s.ctx {
		return res, fmt.Errorf("%w: prompt of %d tokens, context %d", ErrContextFull, len(prompt), s.ctx)
	}
	sp := opt.Sparsity
	if err := sp.Validate(s.m); err != nil {
		return res, err
	}
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
	start := time.Now()
	logits, err := s.Forward(prompt, false)
	s.Observe = saved
	calib := s.calib
	s.calib = nil // decode adds nothing
	if err != nil {
		return res, err
	}
	res.PrefillSeconds = time.Since(start).Seconds()
	res.PrefillTokensPerS = float64(len(prompt)) / res.PrefillSeconds
	N := s.m.Config.Intermediate
	for i := range s.m.Layers {
		f := &s.m.Layers[i].MLP
		res.LoadedNeurons = append(res.LoadedNeurons, f.Kept())
		if counter != nil && f.Sliced {
			s.SetActive(i, ActiveSet(f, counter.Counts[i], sp, N))
		}
		if sp.Mode.PerToken() && f.Sliced {
			s.setPerToken(i, RoundCount(sp.Phi, N), calib[i])
		}
		if k := s.perToken[i]; k > 0 {
			res.ComputedNeurons = append(res.ComputedNeurons, k)
		} else if a := s.active[i]; a != nil {
			res.ComputedNeurons = append(res.ComputedNeurons, len(a))
		} else {
			res.ComputedNeurons = append(res.ComputedNeurons, f.Kept())
		}
	}
	sampler := opt.Sampler
	if sampler == nil {
		sampler = NewSampler(0, 0, 0, 0)
	}
	start = time.Now()
	steps := 0
	for len(res.IDs) < opt.MaxTokens {
		if v := logits[0]; v != v || math.IsInf(float64(v), 0) {
			return res, fmt.Errorf("generate: logits are not finite at position %d: the weights or the config hold NaN or Inf (check the file with sinf verify)", s.pos)
		}
		id := sampler.Sample(logits)
		res.IDs = append(res.IDs, id)
		if opt.OnToken != nil {
			opt.OnToken(id)
		}
		if slices.Contains(opt.EOS, id) || len(res.IDs) == opt.MaxTokens || s.pos == s.ctx || (opt.Stop != nil && opt.Stop()) {
			break
		}
		if logits, err = s.Forward([]int{id}, false); err != nil {
			return res, err
		}
		steps++
	}
	res.DecodeSeconds = time.Since(start).Seconds()
	if steps > 0 {
		res.DecodeTokensPerS = float64(steps) / res.DecodeSeconds
	}
	return res, nil
}

// Score returns the negative log-likelihood (natural log) of each token of
// cont given the prompt and the tokens of cont before it: the prompt runs as
// one prefill (which, in a sparse mode, fixes the active sets as Generate
// does), then cont is fed one token at a time through decode (teacher
// forcing). nll[i] = −log p(cont[i] | prompt, cont[:i]). The session must be
// empty. Used for perplexity and log-likelihood evaluation.
func (s *Session) Score(prompt, cont []int, sp Sparsity) ([]float64, error) {
	if len(cont) == 0 {
		return nil, nil
	}
	var nll []float64
	first := true
	_, err := s.Generate(prompt, GenerateOptions{MaxTokens: 0, Sparsity: sp})
	if err != nil {
		return nil, err
	}
	logits := s.buf.logits[:s.m.Config.Vocab]
	for i, id := range cont {
		if !first {
			if logits, err = s.Forward(cont[i-1:i], false); err != nil {
				return nil, err
			}
		}
		first = false
		if id < 0 || id >= len(logits) {
			return nil, fmt.Errorf("score: token id %d outside [0, %d)", id, len(logits))
		}
		nll = append(nll, -LogSoftmaxAt(logits, id))
	}
	return nll, nil
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
