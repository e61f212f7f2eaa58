package runtime

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Decoder is the forward pass a generation runs on: the CPU's Session, or a
// GPU session of the cuda package (a real or an emulated device).
// GenerateOn and ScoreOn, the generation loop and its stop rules, are
// written once over it; each implementation keeps its own forward pass.
type Decoder interface {
	// Model is the model the decoder runs.
	Model() *Model
	// Pos is the number of positions in the KV cache; Context its length.
	Pos() int
	Context() int
	// Prefill runs the prompt as one batch computing every loaded neuron
	// and, in a sparse mode, fixes what decode computes per layer: the
	// active rows picked from the prompt's activations (SelectInfer,
	// CoreInfer: Counter, ActiveSet) or GateFirst's calibrated per-token
	// count. It returns the neurons decode computes per layer.
	Prefill(prompt []int, sp Sparsity) (computed []int, err error)
	// Decode feeds one token (a decode step over the active rows).
	Decode(id int) error
	// Next picks the next token from the last token's logits: the greedy
	// argmax when sampler is nil or at temperature 0, else a sample.
	Next(sampler *Sampler) (int, error)
	// Logits returns the last token's logits [vocab] on the CPU (reused by
	// the next call).
	Logits() ([]float32, error)
	// Sync waits for the queued work (a GPU's stream), so that a timing
	// ends when the work does.
	Sync() error
}

// GenerateOn runs a generation on d: the prompt as one prefill (Prefill:
// the active sets of a sparse mode are fixed there), then one token at a
// time until MaxTokens, an EOS id, Stop, or the end of the context
// (MaxNewTokens). d must be empty (Pos() == 0). Session.Generate is GenerateOn over the CPU.
func GenerateOn(d Decoder, prompt []int, opt GenerateOptions) (Result, error) {
	res := Result{PromptIDs: slices.Clone(prompt)}
	if len(prompt) == 0 {
		return res, errors.New("generate: empty prompt")
	}
	if d.Pos() != 0 {
		return res, errors.New("generate: session is not empty; call Reset first")
	}
	if len(prompt) > d.Context() {
		return res, fmt.Errorf("%w: prompt of %d tokens, context %d", ErrContextFull, len(prompt), d.Context())
	}
	m := d.Model()
	if err := opt.Sparsity.Validate(m); err != nil {
		return res, err
	}
	start := time.Now()
	computed, err := d.Prefill(prompt, opt.Sparsity)
	if err == nil {
		err = d.Sync()
	}
	if err != nil {
		return res, err
	}
	res.PrefillSeconds = time.Since(start).Seconds()
	res.PrefillTokensPerS = float64(len(prompt)) / res.PrefillSeconds
	for i := range m.Layers {
		res.LoadedNeurons = append(res.LoadedNeurons, m.Layers[i].MLP.Kept())
	}
	res.ComputedNeurons = computed
	if opt.Sampler != nil {
		opt.Sampler.Start(prompt)
	}
	start = time.Now()
	steps := 0
	limit := MaxNewTokens(d.Context(), len(prompt), opt.MaxTokens)
	for len(res.IDs) < limit {
		id, err := d.Next(opt.Sampler)
		if err != nil {
			return res, err
		}
		res.IDs = append(res.IDs, id)
		if opt.OnToken != nil {
			opt.OnToken(id)
		}
		if slices.Contains(opt.EOS, id) || len(res.IDs) == limit || (opt.Stop != nil && opt.Stop()) {
			break
		}
		if err := d.Decode(id); err != nil {
			return res, err
		}
		steps++
	}
	if err := d.Sync(); err != nil {
		return res, err
	}
	res.DecodeSeconds = time.Since(start).Seconds()
	if steps > 0 {
		res.DecodeTokensPerS = float64(steps) / res.DecodeSeconds
	}
	return res, nil
}

// ScoreOn returns the negative log-likelihood (natural log) of each token
// of cont given the prompt and the tokens of cont before it: the prompt
// runs as one prefill (which, in a sparse mode, fixes the active sets as
// GenerateOn does), then cont is fed one token at a time through decode
// (teacher forcing). nll[i] = −log p(cont[i] | prompt, cont[:i]). d must be
// empty. Used for perplexity and log-likelihood evaluation.
func ScoreOn(d Decoder, prompt, cont []int, sp Sparsity) ([]float64, error) {
	if len(cont) == 0 {
		return nil, nil
	}
	if _, err := GenerateOn(d, prompt, GenerateOptions{MaxTokens: 0, Sparsity: sp}); err != nil {
		return nil, err
	}
	nll := make([]float64, 0, len(cont))
	for i, id := range cont {
		if i > 0 {
			if err := d.Decode(cont[i-1]); err != nil {
				return nil, err
			}
		}
		logits, err := d.Logits()
		if err != nil {
			return nil, err
		}
		if id < 0 || id >= len(logits) {
			return nil, fmt.Errorf("score: token id %d outside [0, %d)", id, len(logits))
		}
		nll = append(nll, -LogSoftmaxAt(logits, id))
	}
	return nll, nil
}
