package convert_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nlpodyssey/safetensors"
	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/profile"
	"github.com/selectinfer/sinf/convert/scores"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

var sharedModels = []string{"tinystories-656k", "stories260k", "babyllama-936k"}

func openHF(t *testing.T, name string) (*hf.Checkpoint, *runtime.Model) {
	t.Helper()
	ck, m, err := hf.Load(sharedtest.Path(t, "models", name))
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	return ck, m
}

func pool(t *testing.T) *kernels.Pool {
	p := kernels.NewPool(2)
	t.Cleanup(p.Close)
	return p
}

// convertFile converts ck into a temp .sinf and opens it as a model.
func convertFile(t *testing.T, ck *hf.Checkpoint, opt convert.Options) (*format.File, *runtime.Model, *convert.Report) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "m.sinf")
	rep, err := convert.Convert(ck, out, opt)
	require.NoError(t, err)
	f, err := format.Open(out)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	require.NoError(t, f.Verify())
	m, err := runtime.LoadFile(f)
	require.NoError(t, err)
	return f, m, rep
}

// profileScores profiles a few token sequences and returns a raw score file.
func profileScores(t *testing.T, ck *hf.Checkpoint, m *runtime.Model, task string, prompts [][]int) *scores.File {
	t.Helper()
	res, err := profile.Run(m, prompts, profile.Options{MaxNewTokens: 4, Threads: 2, BOS: -1})
	require.NoError(t, err)
	return &scores.File{ModelDigest: scores.ModelDigest(ck.ConfigJSON, convert.FFNShapes(ck)), Task: task, Dataset: task,
		Prompts: res.Prompts, InputTokens: res.InputTokens, GeneratedTokens: res.GeneratedTokens, Scores: res.Sums}
}

func allLayers(ck *hf.Checkpoint, o convert.Options) convert.Options {
	o.FirstLayer, o.LastLayer, o.ExplicitRange = 0, ck.Config.Layers, true
	return o
}

// TestGammaOneDenseEqualsHF: a γ=1 file (every neuron kept, in a permuted
// order) run densely gives the HF folder's greedy ids and logits within 1e-5.
func TestGammaOneDenseEqualsHF(t *testing.T) {
	for _, name := range sharedModels {
		t.Run(name, func(t *testing.T) {
			ck, ref := openHF(t, name)
			opt := allLayers(ck, convert.Options{Gamma: 1, Delta: 0.3, Random: true, Seed: 3})
			_, m, _ := convertFile(t, ck, opt)
			require.True(t, m.Layers[0].MLP.Sliced)
			require.Equal(t, ck.Config.Intermediate, m.Layers[0].MLP.Kept())
			p := pool(t)
			prompt := []int{1, 20, 30, 40, 50}
			a, b := ref.NewSession(p, 0), m.NewSession(p, 0)
			la, err := a.Forward(prompt, true)
			require.NoError(t, err)
			lb, err := b.Forward(prompt, true)
			require.NoError(t, err)
			for j := range la {
				requireClose(t, la[j], lb[j], "logit %d", j)
			}
			ra, err := ref.NewSession(p, 0).Generate(prompt, runtime.GenerateOptions{MaxTokens: 24})
			require.NoError(t, err)
			rb, err := m.NewSession(p, 0).Generate(prompt, runtime.GenerateOptions{MaxTokens: 24})
			require.NoError(t, err)
			require.Equal(t, ra.IDs, rb.IDs)
		})
	}
}

// TestSparseEqualsMaskedReference: for selectinfer, coreinfer and gatefirst
// (φ=0.25) on a γ=0.7 file, every decode step's logits equal those of the
// masked dense
// reference (all loaded neurons computed, those outside the active set
// zeroed) within 1e-5 of the step's largest logit magnitude: the two sum
// different lists of float32 terms in different orders, so a logit near zero
// carries rounding of the order of the vector's scale, not its own (1.1e-5
// at logit -0.296 of stories260k with AVX2).
func TestSparseEqualsMaskedReference(t *testing.T) {
	for _, name := range sharedModels {
		t.Run(name, func(t *testing.T) { sparseEqualsMasked(t, name) })
	}
}

// sparseEqualsMasked is TestSparseEqualsMaskedReference on one model; a model
// missing from ../shared skips only its own case.
func sparseEqualsMasked(t *testing.T, name string) {
	ck, hm := openHF(t, name)
	task := profileScores(t, ck, hm, "a", [][]int{{1, 5, 6, 7, 8, 9}, {1, 10, 11, 12}})
	other := profileScores(t, ck, hm, "b", [][]int{{1, 40, 41, 42}, {1, 3, 2, 4, 9}})
	model, err := scores.Merge([]*scores.File{task, other}, []string{"a", "b"})
	require.NoError(t, err)
	opt := allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, TaskScores: task, ModelScores: model})
	_, m, _ := convertFile(t, ck, opt)
	// GateFirst's row norms: the sliced layer's ‖up row‖ and ‖downT row‖
	// equal the whole layer's ‖up row‖ and ‖down_proj column‖ of the same
	// neuron.
	for i := range m.Layers {
		whole, sliced := hm.RowNorms(i), m.RowNorms(i)
		require.Len(t, sliced.Up, m.Layers[i].MLP.Kept())
		require.Len(t, sliced.Down, m.Layers[i].MLP.Kept())
		for j, n := range m.Layers[i].MLP.Index {
			requireWithin(t, whole.Up[n], sliced.Up[j], 1e-6*float64(whole.Up[n]), "layer %d row %d (neuron %d) up", i, j, n)
			requireWithin(t, whole.Down[n], sliced.Down[j], 1e-6*float64(whole.Down[n]), "layer %d row %d (neuron %d) down", i, j, n)
		}
	}
	for _, mode := range []runtime.Mode{runtime.SelectInfer, runtime.CoreInfer, runtime.GateFirst} {
		t.Run(mode.String(), func(t *testing.T) {
			p := pool(t)
			sp := runtime.Sparsity{Mode: mode, Phi: 0.4, Alpha: 0.2}
			if mode == runtime.GateFirst {
				sp.Phi = 0.25
			}
			prompt := []int{1, 21, 22, 23, 24, 25, 26, 27}
			for i := range prompt {
				prompt[i] %= m.Config.Vocab
			}
			sparse, ref := m.NewSession(p, 0), m.NewSession(p, 0)
			ref.MaskedReference = true
			rs, err := sparse.Generate(prompt, runtime.GenerateOptions{MaxTokens: 1, Sparsity: sp})
			require.NoError(t, err)
			_, err = ref.Generate(prompt, runtime.GenerateOptions{MaxTokens: 1, Sparsity: sp})
			require.NoError(t, err)
			N := m.Config.Intermediate
			for i := range m.Layers {
				require.Equal(t, sparse.Active(i), ref.Active(i))
				require.Equal(t, runtime.RoundCount(sp.Phi, N), rs.ComputedNeurons[i])
				if mode.PerToken() {
					require.Nil(t, sparse.Active(i))
					require.Equal(t, runtime.RoundCount(sp.Phi, N), sparse.PerToken(i))
				} else {
					require.Len(t, sparse.Active(i), runtime.RoundCount(sp.Phi, N))
				}
			}
			next := rs.IDs[0]
			for step := 0; step < 12; step++ {
				ls, err := sparse.Forward([]int{next}, false)
				require.NoError(t, err)
				lr, err := ref.Forward([]int{next}, false)
				require.NoError(t, err)
				scale := float32(1)
				for _, v := range lr {
					scale = max(scale, v, -v)
				}
				for j := range lr {
					requireWithin(t, lr[j], ls[j], 1e-5*float64(scale), "step %d logit %d", step, j)
				}
				next = runtime.Argmax(lr)
			}
		})
	}
}

// capture records the prefill activations of every layer.
type capture struct{ act map[int][]float32 }

func (c *capture) ObserveFFN(layer int, act []float32, T int, rows []int32) {
	c.act[layer] = append([]float32(nil), act...)
}

// TestDynamicSetByHand recomputes the dynamic set of layer 1 of
// tinystories-656k for a fixed prompt from the captured prefill activations,
// with plain loops, and compares it with the runtime's.
func TestDynamicSetByHand(t *testing.T) {
	ck, hm := openHF(t, "tinystories-656k")
	_, m, _ := convertFile(t, ck, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true, Seed: 11}))
	p := pool(t)
	prompt := []int{1, 80, 147, 201, 282, 57, 313, 598, 303, 1049}
	s := m.NewSession(p, 0)
	cap := &capture{act: map[int][]float32{}}
	s.Observe = cap
	const alpha, phi = 0.2, 0.4
	for _, mode := range []runtime.Mode{runtime.SelectInfer, runtime.CoreInfer} {
		s.Reset()
		_, err := s.Generate(prompt, runtime.GenerateOptions{MaxTokens: 0, Sparsity: runtime.Sparsity{Mode: mode, Phi: phi, Alpha: alpha}})
		require.NoError(t, err)
		f := &m.Layers[1].MLP
		kept, T := f.Kept(), len(prompt)
		act := cap.act[1]
		require.Len(t, act, T*kept)
		count := make([]int, kept)
		for tok := 0; tok < T; tok++ {
			row := act[tok*kept : (tok+1)*kept]
			pos := 0
			for _, v := range row {
				if v > 0 {
					pos++
				}
			}
			k := int(math.Round(alpha * float64(pos)))
			used := make([]bool, kept)
			for n := 0; n < k; n++ { // pick the largest unused, lowest index on ties
				best := -1
				for j, v := range row {
					if v > 0 && !used[j] && (best < 0 || v > row[best]) {
						best = j
					}
				}
				used[best] = true
				count[best]++
			}
		}
		target := int(math.Round(phi * float64(hm.Config.Intermediate)))
		want := map[int32]bool{}
		if mode == runtime.SelectInfer {
			for j := 0; j < f.Base; j++ {
				want[int32(j)] = true
			}
		}
		for len(want) < target {
			best := -1
			for j := range count {
				if !want[int32(j)] && (best < 0 || count[j] > count[best]) {
					best = j
				}
			}
			want[int32(best)] = true
		}
		got := s.Active(1)
		require.Len(t, got, target)
		for _, r := range got {
			require.True(t, want[r], "%v: row %d is not in the hand-computed set", mode, r)
		}
	}
}

// TestSizeFollowsEq2: the γ=0.7 file is smaller than the γ=1 file by exactly
// ΔM = Σ_layers (N−kept)·3·hidden·s bytes of weights (paper Eq. 2) plus
// (N−kept)·4 bytes of index map, and the file sizes differ by that plus at
// most the alignment padding of the changed tensors.
func TestSizeFollowsEq2(t *testing.T) {
	ck, _ := openHF(t, "stories260k")
	opt := allLayers(ck, convert.Options{Gamma: 1, Delta: 0.3, Random: true})
	full, _, repFull := convertFile(t, ck, opt)
	opt.Gamma = 0.7
	slim, _, repSlim := convertFile(t, ck, opt)
	payload := func(f *format.File) (n int64) {
		for _, ti := range f.Tensors() {
			n += ti.Length
		}
		return n
	}
	c := ck.Config
	N, H, s := int64(c.Intermediate), int64(c.Hidden), int64(4)
	kept := int64(runtime.RoundCount(0.7, c.Intermediate))
	deltaM := int64(c.Layers) * (N - kept) * 3 * H * s
	idx := int64(c.Layers) * (N - kept) * 4
	require.Equal(t, deltaM+idx, payload(full)-payload(slim))
	diff := repFull.Bytes - repSlim.Bytes
	require.GreaterOrEqual(t, diff, deltaM+idx-int64(4*c.Layers)*64)
	require.LessOrEqual(t, diff, deltaM+idx+int64(4*c.Layers)*64)
}

// TestConvertFailureLeavesOldFile: conversions that fail before writing
// (an empty default layer range, scores of another model) or part-way (a
// wrong-shaped down_proj in the last layer) leave an existing file untouched
// and no temporary file behind.
func TestConvertFailureLeavesOldFile(t *testing.T) {
	ck, _ := openHF(t, "stories260k")
	dir := t.TempDir()
	out := filepath.Join(dir, "m.sinf")
	require.NoError(t, os.WriteFile(out, []byte("old"), 0o644))
	_, err := convert.Convert(ck, out, convert.Options{Gamma: 0.7, Delta: 0.3, FirstLayer: 5, LastLayer: -2})
	require.ErrorContains(t, err, "explicitly")

	other, om := openHF(t, "babyllama-936k")
	wrong := profileScores(t, other, om, "x", [][]int{{1, 2, 3}})
	_, err = convert.Convert(ck, out, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3,
		TaskScores: wrong, ModelScores: wrong, TaskScoresPath: "w.scores", ModelScoresPath: "w.scores"}))
	require.ErrorContains(t, err, "w.scores")

	bad := badCheckpoint(t, "stories260k", "model.layers.4.mlp.down_proj.weight")
	_, err = convert.Convert(bad, out, allLayers(bad, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true}))
	require.ErrorContains(t, err, "model.layers.4.mlp.down_proj.weight")
	require.ErrorContains(t, err, "expected shape [64 172]")

	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "old", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "a temporary file was left behind")
}

// badCheckpoint copies a shared model into a temp folder with one tensor's
// last column dropped (a wrong shape).
func badCheckpoint(t *testing.T, name, tensor string) *hf.Checkpoint {
	t.Helper()
	src, _ := openHF(t, name)
	dir := copyConfigFiles(t, src.Dir)
	views := map[string]safetensors.TensorView{}
	for _, n := range src.Names() {
		tt, err := src.Tensor(n)
		require.NoError(t, err)
		shape := []uint64{}
		for _, d := range tt.Shape {
			shape = append(shape, uint64(d))
		}
		data := tt.Data
		if n == tensor {
			shape[len(shape)-1]--
			data = data[:len(data)-int(shape[0])*4]
		}
		v, err := safetensors.NewTensorView(safetensors.F32, shape, data)
		require.NoError(t, err)
		views[n] = v
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	require.NoError(t, safetensors.SerializeToWriter(views, nil, f))
	require.NoError(t, f.Close())
	ck, err := hf.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	return ck
}

func TestResolveRange(t *testing.T) {
	for _, c := range []struct {
		first, last, layers int
		explicit            bool
		lo, hi              int
		err                 string
	}{
		{5, -2, 16, false, 5, 14, ""},
		{5, -2, 28, false, 5, 26, ""},
		{0, 2, 2, true, 0, 2, ""},
		{0, 0, 5, true, 0, 5, ""},
		{-3, -1, 5, true, 2, 4, ""},
		{5, -2, 2, false, 0, 0, "explicitly"},
		{5, -2, 5, true, 0, 0, "not a non-empty range"},
		{0, 9, 5, true, 0, 0, "not a non-empty range"},
	} {
		lo, hi, err := convert.ResolveRange(c.first, c.last, c.layers, c.explicit)
		if c.err != "" {
			require.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, [2]int{c.lo, c.hi}, [2]int{lo, hi})
	}
}

// TestSelect: base = top round(δN) of the task ranking, then the model
// ranking's best not yet kept, until round(γN).
func TestSelect(t *testing.T) {
	task := []int32{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}
	model := []int32{8, 0, 1, 9, 2, 3, 4, 5, 6, 7}
	kept, base, err := convert.Select(task, model, 10, 0.6, 0.3)
	require.NoError(t, err)
	require.Equal(t, 3, base)
	require.Equal(t, []int32{9, 8, 7, 0, 1, 2}, kept)
	_, _, err = convert.Select(task, model, 10, 0.2, 0.3)
	require.Error(t, err)
}

// TestChooseGamma: the chosen γ is the largest whose estimate fits, and the
// estimate at that γ matches the file written within 1%.
func TestChooseGamma(t *testing.T) {
	ck, _ := openHF(t, "tinystories-656k")
	opt := allLayers(ck, convert.Options{Delta: 0.3, Random: true})
	p1, err := convert.Estimate(ck, opt, 1, 512)
	require.NoError(t, err)
	p7, err := convert.Estimate(ck, opt, 0.7, 512)
	require.NoError(t, err)
	plan, err := convert.ChooseGamma(ck, opt, (p1.Total()+p7.Total())/2, 512)
	require.NoError(t, err)
	require.Greater(t, plan.Gamma, 0.7)
	require.Less(t, plan.Gamma, 1.0)
	next, err := convert.Estimate(ck, opt, plan.Gamma+0.01, 512)
	require.NoError(t, err)
	require.Greater(t, next.Total(), (p1.Total()+p7.Total())/2)
	opt.Gamma = plan.Gamma
	_, _, rep := convertFile(t, ck, opt)
	require.InEpsilon(t, float64(plan.FileBytes), float64(rep.Bytes), 0.01)
	_, err = convert.ChooseGamma(ck, opt, 1<<20, 512)
	require.ErrorContains(t, err, "too small")
	// An F16 KV cache (sinf-run --kv-cache f16) is half the float32 one's
	// bytes, and the rest of the estimate is the same.
	h := opt
	h.KVCache = format.F16
	p16, err := convert.Estimate(ck, h, 0.7, 512)
	require.NoError(t, err)
	require.Equal(t, p7.KVBytes/2, p16.KVBytes)
	require.Equal(t, p7.FileBytes, p16.FileBytes)
	require.Equal(t, p7.RuntimeBytes, p16.RuntimeBytes)
}

// requireClose asserts |got − want| ≤ 1e-5·max(1, |want|): logits agree to
// 1e-5, relative for logits larger than 1 (float32 carries ~7 digits, and
// summation order differs between the compared paths).
func requireClose(t *testing.T, want, got float32, msg string, args ...any) {
	t.Helper()
	requireWithin(t, want, got, 1e-5*math.Max(1, math.Abs(float64(want))), msg, args...)
}

// requireWithin fails unless |got - want| ≤ tol.
func requireWithin(t *testing.T, want, got float32, tol float64, msg string, args ...any) {
	t.Helper()
	if d := math.Abs(float64(got) - float64(want)); d > tol {
		t.Fatalf("%s: got %v, want %v (difference %.3g > %.3g)", fmt.Sprintf(msg, args...), got, want, d, tol)
	}
}

// TestWeightAware: with WeightAware each sliced layer keeps what Select
// picks from the task and model scores multiplied by the neuron's down_proj
// column norm, computed here from the checkpoint's tensor in float64; the
// selection records it, and the choice differs from the unweighted one.
func TestWeightAware(t *testing.T) {
	ck, hm := openHF(t, "tinystories-656k")
	task := profileScores(t, ck, hm, "a", [][]int{{1, 5, 6, 7, 8, 9}, {1, 10, 11, 12}})
	other := profileScores(t, ck, hm, "b", [][]int{{1, 40, 41, 42}, {1, 3, 2, 4, 9}})
	model, err := scores.Merge([]*scores.File{task, other}, []string{"a", "b"})
	require.NoError(t, err)
	opt := allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, TaskScores: task, ModelScores: model, WeightAware: true})
	f, m, _ := convertFile(t, ck, opt)
	require.True(t, f.Metadata().Selection.WeightAware)
	opt.WeightAware = false
	_, plain, _ := convertFile(t, ck, opt)
	N := ck.Config.Intermediate
	differ := false
	for l := range m.Layers {
		tt, err := ck.Tensor(fmt.Sprintf("model.layers.%d.mlp.down_proj.weight", l))
		require.NoError(t, err)
		w, err := tt.ToF32()
		require.NoError(t, err)
		rank := func(s []float64) []int32 {
			sc := make([]float64, N)
			for n := range sc {
				var ss float64
				for h := 0; h < len(w)/N; h++ {
					ss += float64(w[h*N+n]) * float64(w[h*N+n])
				}
				sc[n] = s[n] * math.Sqrt(ss)
			}
			return scores.Rank(sc)
		}
		kept, base, err := convert.Select(rank(task.Scores[l]), rank(model.Scores[l]), N, 0.7, 0.3)
		require.NoError(t, err)
		require.Equal(t, kept, m.Layers[l].MLP.Index, "layer %d", l)
		require.Equal(t, base, m.Layers[l].MLP.Base, "layer %d", l)
		differ = differ || !slices.Equal(kept, plain.Layers[l].MLP.Index)
	}
	require.True(t, differ, "weighting changed no layer's neurons: the test cannot tell the two apart")
}

// copyConfigFiles copies a checkpoint folder's config.json, tokenizer.json
// and tokenizer_config.json into a new temp folder, which it returns.
func copyConfigFiles(t *testing.T, srcDir string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(srcDir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	return dir
}
