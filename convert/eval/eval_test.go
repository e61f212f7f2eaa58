package eval_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/convert/eval"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

const threads = 2

func loadModel(t *testing.T, name string) (*runtime.Model, *tokenizer.Tokenizer, string) {
	t.Helper()
	dir := sharedtest.Path(t, "models", name)
	ck, m, err := hf.Load(dir)
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	tok, err := tokenizer.Load(dir)
	require.NoError(t, err)
	return m, tok, dir
}

// shortStory is a TinyStories-like text of three paragraphs (blank-line
// separated, as the tinystories loader splits them).
var shortStory = []string{
	"Once upon a time, there was a little girl named Lily. She loved to play outside with her dog, Max. One day, they found a big red ball in the park.",
	"Lily threw the ball and Max ran after it. He was very fast! He brought the ball back and wagged his tail. Lily laughed and hugged him.",
	"Then it started to rain. Lily and Max ran home. Mom gave them a warm towel and a cup of milk. It was a happy day.",
}

func storyDataDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tinystories"), 0o755))
	text := "\n" + strings.Join(shortStory, "\n\n") + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tinystories", "validation-prefix.txt"), []byte(text), 0o644))
	return dir
}

// TestPerplexityByHand recomputes the perplexity of a short text: each
// paragraph encoded without BOS and concatenated; windows of W positions
// (BOS + W−1 text tokens) every S text tokens; per window one Forward over
// it with every position's logits, NLL (float64 log-softmax) of tokens
// P = W/4 … W−1 from the logits at the position before; exp of the mean.
func TestPerplexityByHand(t *testing.T) {
	m, tok, _ := loadModel(t, "tinystories-656k")
	data := storyDataDir(t)
	require.True(t, tok.AddsBOS())
	bos := tok.BOS()
	var stream []int
	for _, p := range shortStory {
		stream = append(stream, tok.Encode(p, false)...)
	}
	t.Logf("%d text tokens", len(stream))
	pool := kernels.NewPool(threads)
	defer pool.Close()
	V := m.Config.Vocab
	for _, c := range []struct{ W, S, limit, windows int }{
		{W: 32, windows: len(stream) / 31},                           // default stride W−1: no overlap
		{W: 24, S: 10, windows: (len(stream)-23)/10 + 1},             // overlapping windows
		{W: 40, S: 7, limit: 2, windows: 2},                          // limit counts windows
		{W: len(stream) + 1, windows: 1},                             // the whole text in one window
		{W: 20, S: 19, limit: 100, windows: (len(stream)-19)/19 + 1}, // more asked than there are
	} {
		S := c.S
		if S == 0 {
			S = c.W - 1
		}
		P := c.W / 4
		sum, count, windows := 0.0, 0, 0
		for k := 0; c.limit == 0 || k < c.limit; k++ {
			if k*S+c.W-1 > len(stream) {
				break
			}
			w := append([]int{bos}, stream[k*S:k*S+c.W-1]...)
			s := m.NewSession(pool, 0)
			logits, err := s.Forward(w, true)
			require.NoError(t, err)
			for i := P; i < c.W; i++ {
				row := logits[(i-1)*V : i*V]
				mx := math.Inf(-1)
				for _, v := range row {
					mx = math.Max(mx, float64(v))
				}
				z := 0.0
				for _, v := range row {
					z += math.Exp(float64(v) - mx)
				}
				sum += -(float64(row[w[i]]) - mx - math.Log(z))
				count++
			}
			windows++
		}
		require.Equal(t, c.windows, windows)
		want := math.Exp(sum / float64(count))
		res, err := eval.Evaluate(m, tok, "tinystories", eval.Options{DataDir: data, Split: dataset.SplitAll, Window: c.W, Stride: c.S, Limit: c.limit, Threads: threads})
		require.NoError(t, err)
		assert.Equal(t, windows, res.N)
		assert.Equal(t, count, res.Tokens)
		assert.InEpsilon(t, want, res.Metrics["perplexity"], 1e-9, "W=%d S=%d", c.W, c.S)
		t.Logf("W=%d S=%d: %d windows, %d tokens scored, perplexity %.6f (by hand %.6f)", c.W, S, windows, count, res.Metrics["perplexity"], want)
	}
}

// TestPerplexityDenseEqualsScore: the batched dense computation gives the
// NLLs of the prefill + teacher-forced decode path (Session.Score) that the
// sparse modes use, up to float32 rounding.
func TestPerplexityDenseEqualsScore(t *testing.T) {
	m, tok, _ := loadModel(t, "tinystories-656k")
	data := storyDataDir(t)
	res, err := eval.Evaluate(m, tok, "tinystories", eval.Options{DataDir: data, Split: dataset.SplitAll, Window: 32, Threads: threads})
	require.NoError(t, err)
	var stream []int
	for _, p := range shortStory {
		stream = append(stream, tok.Encode(p, false)...)
	}
	pool := kernels.NewPool(threads)
	defer pool.Close()
	s := m.NewSession(pool, 0)
	sum, n := 0.0, 0
	for _, w := range eval.Windows(stream, 32, 31, tok.BOS(), 0) {
		s.Reset()
		nll, err := s.Score(w[:8], w[8:], runtime.Sparsity{})
		require.NoError(t, err)
		for _, v := range nll {
			sum += v
			n++
		}
	}
	assert.Equal(t, res.Tokens, n)
	assert.InEpsilon(t, math.Exp(sum/float64(n)), res.Metrics["perplexity"], 1e-5)
}

// TestKinds runs every task kind on two examples of the shared data and
// checks the metrics' keys and ranges, and that a run is deterministic.
func TestKinds(t *testing.T) {
	m, tok, _ := loadModel(t, "tinystories-656k")
	data := sharedtest.Path(t, "data")
	for task, keys := range map[string][]string{
		"squad_v2": {"exact_match", "f1"}, "mlqa": {"exact_match", "f1"}, "piqa": {"accuracy"},
		"wmt16-de-en": {"bleu"}, "xsum": {"rouge1", "rouge2", "rougeL"}, "wikitext2": {"perplexity"},
	} {
		opt := eval.Options{DataDir: data, Limit: 2, Threads: threads, MaxNewTokens: 16, Context: 256}
		res, err := eval.Evaluate(m, tok, task, opt)
		require.NoError(t, err, task)
		assert.Equal(t, 2, res.N, task)
		require.Len(t, res.Metrics, len(keys), task)
		for _, k := range keys {
			v, ok := res.Metrics[k]
			require.True(t, ok, "%s: %s", task, k)
			if k == "perplexity" {
				assert.Greater(t, v, 1.0, task)
			} else {
				assert.True(t, v >= 0 && v <= 100, "%s: %s = %g", task, k, v)
			}
		}
		again, err := eval.Evaluate(m, tok, task, opt)
		require.NoError(t, err)
		assert.Equal(t, res.Metrics, again.Metrics, task)
	}
}

// TestSparseModes: on a γ=1 file (every neuron, permuted), dense and
// CoreInfer with φ=1 (which computes every neuron through the sparse scoring
// path, prefill + teacher-forced decode) give the HF model's perplexity up to
// float32 rounding; φ=0.4 changes it; the HF model has no sliced layer.
func TestSparseModes(t *testing.T) {
	m, tok, dir := loadModel(t, "tinystories-656k")
	data := storyDataDir(t)
	opt := eval.Options{DataDir: data, Split: dataset.SplitAll, Window: 32, Threads: threads}
	ref, err := eval.Evaluate(m, tok, "tinystories", opt)
	require.NoError(t, err)

	ck, err := hf.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	path := filepath.Join(t.TempDir(), "full.sinf")
	_, err = convert.Convert(ck, path, convert.Options{Gamma: 1, Delta: 0.3, FirstLayer: 0, LastLayer: 2, ExplicitRange: true, Random: true, Seed: 3})
	require.NoError(t, err)
	l, err := eval.Open(path)
	require.NoError(t, err)
	defer l.Close()
	for _, sp := range []runtime.Sparsity{{Mode: runtime.Dense}, {Mode: runtime.CoreInfer, Phi: 1, Alpha: 0.2}} {
		opt.Sparsity = sp
		res, err := eval.Evaluate(l.Model, l.Tok, "tinystories", opt)
		require.NoError(t, err)
		assert.InEpsilon(t, ref.Metrics["perplexity"], res.Metrics["perplexity"], 1e-5, sp.Mode.String())
	}
	for _, mode := range []runtime.Mode{runtime.SelectInfer, runtime.CoreInfer} {
		opt.Sparsity = runtime.Sparsity{Mode: mode, Phi: 0.4, Alpha: 0.2}
		res, err := eval.Evaluate(l.Model, l.Tok, "tinystories", opt)
		require.NoError(t, err)
		assert.Greater(t, math.Abs(res.Metrics["perplexity"]/ref.Metrics["perplexity"]-1), 1e-3, mode.String())
		_, err = eval.Evaluate(m, tok, "tinystories", opt)
		require.Error(t, err, "an HF model has no sliced layer")
		assert.Contains(t, err.Error(), "sliced layers")
	}
}

func TestBadInput(t *testing.T) {
	m, tok, _ := loadModel(t, "tinystories-656k")
	data := sharedtest.Path(t, "data")

	_, err := eval.Evaluate(m, tok, "squad_v3", eval.Options{DataDir: data})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown task "squad_v3"`)
	assert.Contains(t, err.Error(), "squad_v2, tinystories")

	empty := t.TempDir()
	_, err = eval.Evaluate(m, tok, "xsum", eval.Options{DataDir: empty})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "xsum")
	assert.Contains(t, err.Error(), filepath.Join(empty, "xsum", "test-sample.jsonl"))

	// The SQuAD template's fixed text alone is longer than a tiny context
	// leaves once the answer's tokens are set aside.
	_, err = eval.Evaluate(m, tok, "squad_v2", eval.Options{DataDir: data, Limit: 1, Context: 24, MaxNewTokens: 4})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fixed text of the prompt template")
	assert.Contains(t, err.Error(), "context of 24 positions")
	// ... while a long prompt whose template fits is cut from the left.
	res, err := eval.Evaluate(m, tok, "squad_v2", eval.Options{DataDir: data, Limit: 1, Context: 64, MaxNewTokens: 4})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Truncated)

	_, err = eval.Evaluate(m, tok, "piqa", eval.Options{DataDir: data, Limit: 1, Context: 8})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fixed text of the prompt template")

	_, err = eval.Evaluate(m, tok, "tinystories", eval.Options{DataDir: data, Limit: 1, Context: 64, Window: 128})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exceeds the context of 64")

	_, err = eval.Evaluate(m, tok, "tinystories", eval.Options{DataDir: storyDataDir(t), Window: 512})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fewer than one window")
}
