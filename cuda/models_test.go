package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/recon"
	"github.com/selectinfer/sinf/convert/synth"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// modelCase is one model the GPU (or the reference backend) must run as the
// CPU does, with the sparsity modes to try.
type modelCase struct {
	name  string
	model *runtime.Model
	modes []runtime.Sparsity
}

var (
	denseOnly = []runtime.Sparsity{{Mode: runtime.Dense}}
	allModes  = []runtime.Sparsity{
		{Mode: runtime.Dense},
		{Mode: runtime.SelectInfer, Phi: 0.5, Alpha: 0.2},
		{Mode: runtime.CoreInfer, Phi: 0.4, Alpha: 0.3},
		{Mode: runtime.GateFirst, Phi: 0.25, Alpha: 0.2},
	}
)

func testPool(t testing.TB) *kernels.Pool {
	p := kernels.NewPool(2)
	t.Cleanup(p.Close)
	return p
}

// The test models are built once per test binary, in a folder removed by
// TestMain; their files stay open (mapped) until the process exits.
var (
	modelsOnce sync.Once
	modelsDir  string
	models     []modelCase
	modelsErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if modelsDir != "" {
		os.RemoveAll(modelsDir)
	}
	os.Exit(code)
}

// sliced converts ck with a random γ = 0.7, δ = 0.3 selection of every layer
// stored as dtype and loads the .sinf file.
// With r, the file is reconstructed (convert.Reconstruct: an output bias per
// layer and refitted rows).
func sliced(ck *hf.Checkpoint, layers int, dtype format.DType, out string, r ...convert.Reconstruct) (*runtime.Model, error) {
	return slicedAs(ck, layers, storage{dtype: dtype}, out, r...)
}

// storage is a conversion's weight dtype: with mix, llama-quantize's _M mix
// of that K-quant (Q4_K_M, Q5_K_M).
type storage struct {
	dtype  format.DType
	mix    bool
	sketch bool // convert --predictor sketch: up_proj sketches, GateFirst's predictor
}

func (st storage) String() string {
	s := st.dtype.String()
	if st.mix {
		s += "_M"
	}
	if st.sketch {
		s += "-sketch"
	}
	return s
}

// slicedAs is sliced stored as st.
func slicedAs(ck *hf.Checkpoint, layers int, st storage, out string, r ...convert.Reconstruct) (*runtime.Model, error) {
	opt := convert.Options{Gamma: 0.7, Delta: 0.3, FirstLayer: 0, LastLayer: layers,
		ExplicitRange: true, Random: true, Seed: 7, DType: st.dtype, Mix: st.mix, Sketch: st.sketch}
	if len(r) > 0 {
		opt.Reconstruct = r[0]
	}
	_, err := convert.Convert(ck, out, opt)
	if err != nil {
		return nil, err
	}
	f, err := format.Open(out)
	if err != nil {
		return nil, err
	}
	return runtime.LoadFile(f)
}

// synthetic writes a random checkpoint of a test shape (its own small
// vocabulary) with the shared Llama-3 tokenizer.
func synthetic(shape string, dtype format.DType, tokenizer, dir string) (*hf.Checkpoint, *runtime.Model, error) {
	s, err := synth.Lookup(shape)
	if err != nil {
		return nil, nil, err
	}
	if _, err = synth.Write(dir, synth.Options{Shape: s, TokenizerDir: tokenizer, DType: dtype, Seed: 3, Vocab: s.Vocab, Workers: 2}); err != nil {
		return nil, nil, err
	}
	return hf.Load(dir)
}

// testModels returns the shared trained models (F32; the Qwen2 fixture BF16),
// sliced F32, F16, Q8_0 and Q4_0 conversions of two of them, Q4_K_M and
// Q5_K_M conversions of a random test-kquant checkpoint (rows of whole
// 256-blocks), and random checkpoints of
// the test shapes (llama3 RoPE scaling and an untied head in F16; Qwen2
// biases in BF16) with their sliced conversions. It skips without
// ../shared.
func testModels(t testing.TB) []modelCase {
	t.Helper()
	root := sharedtest.Root(t)
	modelsOnce.Do(func() { models, modelsErr = buildModels(root) })
	require.NoError(t, modelsErr)
	return models
}

func buildModels(root string) ([]modelCase, error) {
	dir, err := os.MkdirTemp("", "sinf-cuda-test-")
	if err != nil {
		return nil, err
	}
	modelsDir = dir
	var cases []modelCase
	for _, name := range []string{"tinystories-656k", "stories260k", "babyllama-936k", "tiny-random-qwen2"} {
		ck, m, err := hf.Load(filepath.Join(root, "models", name))
		if err != nil {
			return nil, err
		}
		cases = append(cases, modelCase{name, m, denseOnly})
		if name == "tinystories-656k" || name == "stories260k" {
			for _, dt := range []format.DType{format.F32, format.F16, format.Q8_0, format.Q4_0} {
				sm, err := sliced(ck, m.Config.Layers, dt, filepath.Join(dir, fmt.Sprintf("%s-%v.sinf", name, dt)))
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				cases = append(cases, modelCase{fmt.Sprintf("%s/sliced-%v", name, dt), sm, allModes})
			}
			// GateFirst ranks rows by the up_proj sketch (sinf_sketch_weights)
			st := storage{dtype: format.F16, sketch: true}
			if name == "stories260k" {
				st.dtype = format.Q8_0
			}
			sm, err := slicedAs(ck, m.Config.Layers, st, filepath.Join(dir, name+"-"+st.String()+".sinf"))
			if err != nil {
				return nil, fmt.Errorf("%s %v: %w", name, st, err)
			}
			if sm.Layers[0].MLP.UpSketch.Rows == 0 {
				return nil, fmt.Errorf("%s %v: no sketch loaded", name, st)
			}
			cases = append(cases, modelCase{name + "/sliced-" + st.String(), sm, allModes})
		}
	}
	for _, sh := range []struct {
		shape string
		dtype format.DType
		// stored: the dtypes of the sliced conversions (the checkpoint's
		// own when empty).
		stored []storage
	}{{"test-tiny", format.F16, nil}, {"test-tiny-qwen2", format.BF16, nil},
		// Q4_K_M and Q5_K_M hold Q4_K, Q5_K and Q6_K matrices; Q5_0 and Q5_1
		// are the kernel tests' alone (the emulator under ASan has 10 minutes).
		{"test-kquant", format.F16, []storage{{dtype: format.Q4_K, mix: true}, {dtype: format.Q5_K, mix: true}}}} {
		ck, m, err := synthetic(sh.shape, sh.dtype, filepath.Join(root, "tokenizers", "llama3"), filepath.Join(dir, sh.shape))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sh.shape, err)
		}
		if sh.stored == nil {
			cases = append(cases, modelCase{sh.shape + "/" + sh.dtype.String(), m, denseOnly})
			sh.stored = []storage{{dtype: sh.dtype}}
		}
		for _, st := range sh.stored {
			sm, err := slicedAs(ck, m.Config.Layers, st, filepath.Join(dir, sh.shape+"-"+st.String()+".sinf"))
			if err != nil {
				return nil, fmt.Errorf("%s %v: %w", sh.shape, st, err)
			}
			cases = append(cases, modelCase{sh.shape + "/sliced-" + st.String(), sm, allModes})
		}
	}
	// A reconstructed F16 file: every layer's output bias is added as one
	// more row (Session.ffn), in every mode.
	ck, m, err := hf.Load(filepath.Join(root, "models", "tinystories-656k"))
	if err != nil {
		return nil, err
	}
	var prompts [][]int
	for p := 0; p < 4; p++ {
		prompts = append(prompts, testPrompt(12+p, m.Config.Vocab))
	}
	rm, err := sliced(ck, m.Config.Layers, format.F16, filepath.Join(dir, "reconstructed.sinf"), convert.Reconstruct{Method: recon.Both, Prompts: prompts})
	if err != nil {
		return nil, fmt.Errorf("reconstructed: %w", err)
	}
	if rm.Layers[0].MLP.DownBias == nil {
		return nil, errors.New("reconstructed: no output bias loaded")
	}
	cases = append(cases, modelCase{"tinystories-656k/reconstructed-F16", rm, allModes})
	return cases, nil
}

// testPrompt returns a fixed prompt of n valid ids.
func testPrompt(n, vocab int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = (1 + 7*i + i*i) % vocab
	}
	return p
}

// cpuGreedy decodes n tokens greedily on the CPU after a dense prefill of
// prompt, with the given active rows per layer (nil: all).
func cpuGreedy(t testing.TB, m *runtime.Model, prompt []int, n int, active [][]int32) []int {
	t.Helper()
	s := m.NewSession(testPool(t), 0)
	logits, err := s.Forward(prompt, false)
	require.NoError(t, err)
	for i, rows := range active {
		s.SetActive(i, rows)
	}
	var ids []int
	for len(ids) < n {
		id := runtime.Argmax(logits)
		ids = append(ids, id)
		if len(ids) == n {
			break
		}
		logits, err = s.Forward([]int{id}, false)
		require.NoError(t, err)
	}
	return ids
}
