// Package eval scores a model on the built-in tasks of convert/dataset with
// the metrics of convert/metrics, in any of the runtime's sparsity modes
// (Evaluate), and runs the SelectInfer paper's grid of methods × tasks plus
// its parameter sweeps (Study).
package eval

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/convert/metrics"
	"github.com/selectinfer/sinf/convert/profile"
	"github.com/selectinfer/sinf/convert/synth"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// Default generation lengths per task kind (Options.MaxNewTokens 0).
const (
	DefaultQATokens            = 32
	DefaultTranslationTokens   = 128
	DefaultSummarizationTokens = 128
	// DefaultWindow caps the default perplexity window (min(context, 256)).
	DefaultWindow = 256
)

// Options configures Evaluate. The zero value evaluates densely on every
// example with the task's defaults.
type Options struct {
	DataDir string // folder of the built-in datasets' files
	Limit   int    // examples (perplexity: windows) at most; ≤ 0: all
	// Split is the part of a built-in dataset evaluated ("": SplitEval, the
	// half that profiling's default split does not read; see
	// dataset.Split); Offset examples of it are skipped first (perplexity:
	// texts, before the windows are cut).
	Split    dataset.Split
	Offset   int
	Sparsity runtime.Sparsity // mode, φ and α of every generation and scoring
	// MaxNewTokens bounds generation (≤ 0: 32 for QA, 128 for translation
	// and summarization). QA and translation also stop at a newline,
	// every kind at EOS.
	MaxNewTokens int
	Threads      int // kernel threads (≤ 0: kernels.DefaultThreads())
	Context      int // KV cache positions (≤ 0: runtime.NewSession's default, min(max_position_embeddings, 4096))
	// Window and Stride are the perplexity windows in tokens (see
	// Evaluate); ≤ 0 selects the defaults.
	Window, Stride int
	// Mass measures the activation mass decode's neurons hold
	// (runtime.MassMeter; Result.Mass) in a sparse mode. The run then
	// computes every loaded neuron and zeroes the skipped ones (the masked
	// reference: the same results up to float32 rounding, at dense speed).
	Mass bool
	// Progress, when set, is called after each example (window) with the
	// number done and the total.
	Progress func(done, total int)
	// Strict is for a Runner that opens an HF checkpoint folder: refuse
	// stored tensors the architecture does not have (hf.Options.Strict,
	// `sinf eval --strict`). Evaluate does not read it.
	Strict bool
}

// Result is one task's evaluation.
type Result struct {
	Task    string
	Kind    string
	N       int                // examples (perplexity: windows) evaluated
	Metrics map[string]float64 // see Evaluate for the keys
	Seconds float64            // wall time of the evaluation
	PeakRSS int64              // the process's peak resident set size (VmHWM) afterwards
	// Tokens is, for perplexity, the number of scored tokens; for the
	// other kinds the number of generated (or scored) tokens.
	Tokens    int
	Truncated int   // prompts cut from the left to fit the context
	Context   int   // KV cache positions of the session
	KVBytes   int64 // size of that KV cache
	// Mass is the activation-mass report of Options.Mass, nil otherwise.
	Mass *MassReport
	// DecodeBytes is the weight bytes a decoded token reads in the mode
	// evaluated (synth.BytesPerToken of the session after the run).
	DecodeBytes synth.DecodeBytes
}

// Evaluate runs the built-in task on m and returns its metrics. Every
// prompt is encoded with the tokenizer's BOS (when it adds one) and, when it
// does not leave room for the tokens to generate or score, cut from the left
// keeping the BOS (profile.Truncate); when the fixed text of the task's
// template alone does not fit, Evaluate fails saying so. Per task kind:
//
//   - qa (squad_v2, mlqa): greedy generation with opt.Sparsity (prefill
//     computes every loaded neuron and fixes the active sets), at most
//     MaxNewTokens (32), stopping at EOS or at the first token whose text
//     holds a newline; the prediction is the text up to the first newline,
//     trimmed. Metrics exact_match and f1: the means of metrics.ExactMatch
//     and metrics.F1, ×100 as the official SQuAD script reports them.
//   - multiple_choice (piqa): the prompt is the context; a choice's tokens
//     are those of context + " " + choice after the context's own tokens
//     (as lm-evaluation-harness splits them); each choice is scored with
//     Session.Score (the prompt's prefill fixes the selection, the choice is
//     teacher-forced through decode) and the choice with the lowest total
//     NLL wins: a raw sum, not length-normalised, as lm-evaluation-harness's
//     "acc" (ties: the first). Metric accuracy ×100.
//   - translation (wmt*): greedy, stop at EOS or newline, at most 128
//     tokens; metric bleu: metrics.CorpusBLEU (sacreBLEU defaults, 0..100).
//   - summarization (xsum, cnndm): greedy, stop at EOS, at most 128 tokens;
//     the prediction is the generated text, trimmed. Metrics rouge1, rouge2,
//     rougeL: the mean over examples of the F-measure against the
//     reference(s) (metrics.RougeMax), ×100.
//   - perplexity (tinystories, wikitext2): see Perplexity procedure below.
//     Metric perplexity.
//
// Perplexity procedure. Each example's text is encoded on its own without
// BOS and the ids are concatenated in file order into one stream. With
// b = 1 when the tokenizer adds a BOS (else 0), window k holds BOS (when
// b = 1) followed by the stream tokens [k·S, k·S + W − b): W positions in
// all, W = opt.Window (default min(context, 256)), S = opt.Stride (default
// W − b, so consecutive windows tile the stream without overlap). Only full
// windows are used; opt.Limit is the number of windows. Each window is run
// on an empty session: its first P = ⌊W/4⌋ tokens are the prompt (one
// prefill computing every loaded neuron, which in a sparse mode fixes the
// active sets) and the NLL of each of the remaining W − P tokens given all
// the tokens before it in the window is summed (teacher forcing; sparse
// modes through Session.Score, i.e. decode with the active sets). The
// perplexity is exp(Σ NLL / number of scored tokens) over all windows. In
// dense mode nothing is selected, so the same NLLs are computed by one
// batched Forward over the window (all logits) instead of prefill + decode:
// the same numbers up to float32 rounding (about 1e-7 relative), and faster.
func Evaluate(m *runtime.Model, tok *tokenizer.Tokenizer, task string, opt Options) (*Result, error) {
	t, err := dataset.Lookup(task)
	if err != nil {
		return nil, err
	}
	limit := opt.Limit
	if t.Kind == dataset.KindPerplexity {
		limit = 0 // Limit counts windows
	}
	split := opt.Split
	if split == "" {
		split = dataset.SplitEval
	}
	_, examples, err := dataset.LoadSelection(task, opt.DataDir, dataset.Selection{Split: split, Offset: opt.Offset, Limit: limit})
	if err != nil {
		return nil, err
	}
	return run(m, tok, t, examples, opt)
}

// EvaluateText is Evaluate's perplexity over one text of the user's own (the
// contents of a file, as llama-perplexity -f reads it): the whole text is
// encoded at once, without BOS, and cut into windows by the Perplexity
// procedure below; name (the file's path) names the task in the result and
// in errors. opt.DataDir, Split, Offset and MaxNewTokens do not apply.
// Errors: text not valid UTF-8, shorter than one window, and Evaluate's.
func EvaluateText(m *runtime.Model, tok *tokenizer.Tokenizer, name, text string, opt Options) (*Result, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("%s: not UTF-8 text", name)
	}
	t := dataset.Task{Name: name, Kind: dataset.KindPerplexity}
	return run(m, tok, t, []dataset.Example{{ID: "0", Prompt: text, Text: text}}, opt)
}

// run scores examples of task t.
func run(m *runtime.Model, tok *tokenizer.Tokenizer, t dataset.Task, examples []dataset.Example, opt Options) (*Result, error) {
	if err := opt.Sparsity.Validate(m); err != nil {
		return nil, err
	}
	var err error
	pool := kernels.NewPool(opt.Threads)
	defer pool.Close()
	if opt.Mass && opt.Sparsity.Mode == runtime.Dense {
		return nil, fmt.Errorf("task %s: the mass report needs a sparse mode (dense computes every loaded neuron)", t.Name)
	}
	e := &evaluator{m: m, tok: tok, task: t, opt: opt, s: m.NewSession(pool, opt.Context), bos: -1, fixed: -1}
	if opt.Mass {
		e.mass = &runtime.MassMeter{}
		e.s.Mass(e.mass)
	}
	e.ctx = e.s.Context()
	if tok.AddsBOS() && tok.BOS() >= 0 {
		e.bos = tok.BOS()
	}
	if e.eos = tok.EOS(); len(e.eos) == 0 {
		e.eos = m.Config.EOS
	}
	c := m.Config
	res := &Result{Task: t.Name, Kind: t.Kind, Metrics: map[string]float64{}, Context: e.ctx,
		KVBytes: runtime.KVCacheBytes(c, e.ctx)}
	start := time.Now()
	switch t.Kind {
	case dataset.KindQA, dataset.KindTranslation, dataset.KindSummarization:
		err = e.generation(examples, res)
	case dataset.KindMultipleChoice:
		err = e.multipleChoice(examples, res)
	case dataset.KindPerplexity:
		err = e.perplexity(examples, res)
	default:
		err = fmt.Errorf("task %s: kind %q has no metric", t.Name, t.Kind)
	}
	if err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.PeakRSS = runtime.PeakRSS()
	res.Mass = NewMassReport(e.mass)
	res.DecodeBytes = synth.BytesPerToken(m, e.s)
	return res, nil
}

type evaluator struct {
	m    *runtime.Model
	tok  *tokenizer.Tokenizer
	task dataset.Task
	opt  Options
	s    *runtime.Session
	ctx  int
	bos  int // BOS id added to prompts, -1: none
	eos  []int
	// fixed is the token count of the template's fixed text (-1: not yet
	// counted).
	fixed int
	mass  *runtime.MassMeter
}

var placeholder = regexp.MustCompile(`\{[A-Za-z_]+\}`)

// checkTemplate fails when the fixed text of the task's template (the
// template without its {fields}) cannot fit with reserve positions to spare.
func (e *evaluator) checkTemplate(reserve int) error {
	if e.fixed < 0 {
		fixed := placeholder.ReplaceAllString(e.task.Template, "")
		e.fixed = len(e.tok.Encode(fixed, e.bos >= 0))
	}
	if n, room := e.fixed, e.ctx-reserve; n > room {
		return fmt.Errorf("task %s: the fixed text of the prompt template (%d tokens) does not fit in the context of %d positions with %d kept for the answer (%d left): raise the context (at most max_position_embeddings %d) or lower the new tokens",
			e.task.Name, n, e.ctx, reserve, room, e.m.Config.MaxPositions)
	}
	return nil
}

// encode returns the prompt's ids cut from the left to leave reserve
// positions, and whether it was cut.
func (e *evaluator) encode(ex dataset.Example, reserve int) ([]int, bool, error) {
	ids, err := e.tok.EncodeChecked(ex.Prompt, e.bos >= 0)
	if err != nil {
		return nil, false, fmt.Errorf("task %s: example %s: %w", e.task.Name, ex.ID, err)
	}
	if len(ids) == 0 {
		return nil, false, fmt.Errorf("task %s: example %s: the prompt encodes to no tokens", e.task.Name, ex.ID)
	}
	p, cut := profile.Truncate(ids, e.ctx, reserve, e.bos)
	return p, cut > 0, nil
}

func (e *evaluator) progress(done, total int) {
	if e.opt.Progress != nil {
		e.opt.Progress(done, total)
	}
}

// newlineIDs returns the ids whose decoded text holds a line break.
func (e *evaluator) newlineIDs() []int {
	var out []int
	for id := 0; id < e.m.Config.Vocab; id++ {
		if strings.ContainsAny(e.tok.Decode([]int{id}), "\n\r") {
			out = append(out, id)
		}
	}
	return out
}

func (e *evaluator) generation(examples []dataset.Example, res *Result) error {
	maxNew := e.opt.MaxNewTokens
	stopAtNewline := e.task.Kind != dataset.KindSummarization
	if maxNew <= 0 {
		maxNew = map[string]int{dataset.KindQA: DefaultQATokens, dataset.KindTranslation: DefaultTranslationTokens,
			dataset.KindSummarization: DefaultSummarizationTokens}[e.task.Kind]
	}
	if err := e.checkTemplate(maxNew); err != nil {
		return err
	}
	stop := append([]int(nil), e.eos...)
	if stopAtNewline {
		stop = append(stop, e.newlineIDs()...)
	}
	var em, f1 float64
	var r1, r2, rl float64
	hyps := make([]string, 0, len(examples))
	refs := make([][]string, 0, len(examples))
	for i, ex := range examples {
		prompt, cut, err := e.encode(ex, maxNew)
		if err != nil {
			return err
		}
		if cut {
			res.Truncated++
		}
		e.s.Reset()
		out, err := e.s.Generate(prompt, runtime.GenerateOptions{MaxTokens: maxNew, Sparsity: e.opt.Sparsity, EOS: stop})
		if err != nil {
			return fmt.Errorf("task %s: example %s: %w", e.task.Name, ex.ID, err)
		}
		res.Tokens += len(out.IDs)
		text := e.tok.Decode(out.IDs)
		if stopAtNewline {
			if j := strings.IndexAny(text, "\n\r"); j >= 0 {
				text = text[:j]
			}
		}
		pred := strings.TrimSpace(text)
		switch e.task.Kind {
		case dataset.KindQA:
			em += metrics.ExactMatch(pred, ex.Refs)
			f1 += metrics.F1(pred, ex.Refs)
		case dataset.KindTranslation:
			hyps = append(hyps, pred)
			refs = append(refs, ex.Refs)
		case dataset.KindSummarization:
			s := metrics.RougeMax(pred, ex.Refs)
			r1 += s.R1.F
			r2 += s.R2.F
			rl += s.RL.F
		}
		e.progress(i+1, len(examples))
	}
	n := float64(len(examples))
	res.N = len(examples)
	switch e.task.Kind {
	case dataset.KindQA:
		res.Metrics["exact_match"] = 100 * em / n
		res.Metrics["f1"] = 100 * f1 / n
	case dataset.KindTranslation:
		res.Metrics["bleu"] = metrics.CorpusBLEU(hyps, refs).Score
	case dataset.KindSummarization:
		res.Metrics["rouge1"] = 100 * r1 / n
		res.Metrics["rouge2"] = 100 * r2 / n
		res.Metrics["rougeL"] = 100 * rl / n
	}
	return nil
}

func (e *evaluator) multipleChoice(examples []dataset.Example, res *Result) error {
	correct := 0
	for i, ex := range examples {
		ctxIDs := e.tok.Encode(ex.Prompt, e.bos >= 0)
		if len(ctxIDs) == 0 {
			return fmt.Errorf("task %s: example %s: the prompt encodes to no tokens", e.task.Name, ex.ID)
		}
		conts := make([][]int, len(ex.Choices))
		longest := 0
		for j, ch := range ex.Choices {
			whole := e.tok.Encode(ex.Prompt+" "+ch, e.bos >= 0)
			if len(whole) <= len(ctxIDs) {
				return fmt.Errorf("task %s: example %s: choice %d encodes to no tokens after the prompt", e.task.Name, ex.ID, j)
			}
			conts[j] = whole[len(ctxIDs):]
			longest = max(longest, len(conts[j]))
		}
		if err := e.checkTemplate(longest); err != nil {
			return err
		}
		prompt, cut := profile.Truncate(ctxIDs, e.ctx, longest, e.bos)
		if cut > 0 {
			res.Truncated++
		}
		best, bestNLL := -1, math.Inf(1)
		for j, cont := range conts {
			e.s.Reset()
			nll, err := e.s.Score(prompt, cont, e.opt.Sparsity)
			if err != nil {
				return fmt.Errorf("task %s: example %s: %w", e.task.Name, ex.ID, err)
			}
			res.Tokens += len(cont)
			sum := 0.0
			for _, v := range nll {
				sum += v
			}
			if sum < bestNLL {
				best, bestNLL = j, sum
			}
		}
		if best == ex.Label {
			correct++
		}
		e.progress(i+1, len(examples))
	}
	res.N = len(examples)
	res.Metrics["accuracy"] = 100 * float64(correct) / float64(len(examples))
	return nil
}

// Windows returns the perplexity windows of Evaluate's procedure over the
// token stream: W positions each, BOS first when bos ≥ 0, stride S in
// stream tokens, full windows only, at most limit (≤ 0: all).
func Windows(stream []int, W, S, bos, limit int) [][]int {
	b := 0
	if bos >= 0 {
		b = 1
	}
	n := W - b
	var out [][]int
	for k := 0; limit <= 0 || k < limit; k++ {
		lo := k * S
		if lo+n > len(stream) {
			break
		}
		w := make([]int, 0, W)
		if b == 1 {
			w = append(w, bos)
		}
		out = append(out, append(w, stream[lo:lo+n]...))
	}
	return out
}

// PerplexityShape returns the window W, stride S and prompt length P that
// Evaluate uses for a context of ctx positions.
func PerplexityShape(opt Options, ctx int, bos bool) (W, S, P int, err error) {
	W = opt.Window
	if W <= 0 {
		W = min(ctx, DefaultWindow)
	}
	if W > ctx {
		return 0, 0, 0, fmt.Errorf("perplexity window of %d tokens exceeds the context of %d positions", W, ctx)
	}
	if W < 4 {
		return 0, 0, 0, fmt.Errorf("perplexity window of %d tokens is too small (at least 4: a quarter is the prompt)", W)
	}
	S = opt.Stride
	if S <= 0 {
		S = W
		if bos {
			S--
		}
	}
	return W, S, W / 4, nil
}

func (e *evaluator) perplexity(examples []dataset.Example, res *Result) error {
	W, S, P, err := PerplexityShape(e.opt, e.ctx, e.bos >= 0)
	if err != nil {
		return fmt.Errorf("task %s: %w", e.task.Name, err)
	}
	b := 0
	if e.bos >= 0 {
		b = 1
	}
	// Encode only the texts the windows need.
	var stream []int
	next := 0
	fill := func(n int) {
		for len(stream) < n && next < len(examples) {
			stream = append(stream, e.tok.Encode(examples[next].Text, false)...)
			next++
		}
	}
	total := e.opt.Limit
	if total > 0 {
		fill((total-1)*S + W - b)
	} else {
		fill(math.MaxInt)
	}
	windows := Windows(stream, W, S, e.bos, e.opt.Limit)
	if len(windows) == 0 {
		return fmt.Errorf("task %s: the text is %d tokens, fewer than one window of %d", e.task.Name, len(stream), W-b)
	}
	V := e.m.Config.Vocab
	sum := 0.0
	count := 0
	for k, w := range windows {
		e.s.Reset()
		if e.opt.Sparsity.Mode == runtime.Dense {
			logits, err := e.s.Forward(w, true)
			if err != nil {
				return fmt.Errorf("task %s: window %d: %w", e.task.Name, k, err)
			}
			for i := P; i < W; i++ {
				sum -= runtime.LogSoftmaxAt(logits[(i-1)*V:i*V], w[i])
				count++
			}
		} else {
			nll, err := e.s.Score(w[:P], w[P:], e.opt.Sparsity)
			if err != nil {
				return fmt.Errorf("task %s: window %d: %w", e.task.Name, k, err)
			}
			for _, v := range nll {
				sum += v
			}
			count += len(nll)
		}
		e.progress(k+1, len(windows))
	}
	res.N = len(windows)
	res.Tokens = count
	res.Metrics["perplexity"] = math.Exp(sum / float64(count))
	return nil
}

// PrimaryMetric returns the metric a task is ranked by and whether higher is
// better: perplexity (lower), f1, accuracy, bleu, rougeL.
func PrimaryMetric(kind string) (string, bool) {
	switch kind {
	case dataset.KindQA:
		return "f1", true
	case dataset.KindMultipleChoice:
		return "accuracy", true
	case dataset.KindTranslation:
		return "bleu", true
	case dataset.KindSummarization:
		return "rougeL", true
	case dataset.KindPerplexity:
		return "perplexity", false
	}
	return "", true
}

// MetricKeys lists, in display order, the metrics Evaluate reports for a kind.
func MetricKeys(kind string) []string {
	switch kind {
	case dataset.KindQA:
		return []string{"exact_match", "f1"}
	case dataset.KindMultipleChoice:
		return []string{"accuracy"}
	case dataset.KindTranslation:
		return []string{"bleu"}
	case dataset.KindSummarization:
		return []string{"rouge1", "rouge2", "rougeL"}
	case dataset.KindPerplexity:
		return []string{"perplexity"}
	}
	return nil
}
