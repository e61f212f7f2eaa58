package synth

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// tokDir is a small tokenizer (2048 ids) in the repository.
var tokDir = filepath.Join("..", "..", "testdata", "models", "tinystories-656k")

func write(t *testing.T, shape string, opt Options) (string, *Report) {
	t.Helper()
	s, err := Lookup(shape)
	require.NoError(t, err)
	opt.Shape, opt.TokenizerDir = s, tokDir
	dir := filepath.Join(t.TempDir(), shape)
	rep, err := Write(dir, opt)
	require.NoError(t, err)
	return dir, rep
}

// TestRealParameterCounts checks the registered shapes against the published
// parameter counts of the real models.
func TestRealParameterCounts(t *testing.T) {
	want := map[string]int64{
		"smollm2-135m": 134_515_008,
		"qwen2.5-0.5b": 494_032_768,
		"llama-3.2-1b": 1_235_814_400,
		"llama-3.2-3b": 3_212_749_824,
		"qwen2.5-3b":   3_085_938_688,
	}
	require.ElementsMatch(t, []string{"smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b", "llama-3.2-3b", "qwen2.5-3b"}, Names())
	for name, n := range want {
		s, err := Lookup(name)
		require.NoError(t, err)
		require.Equal(t, n, s.Params(s.Vocab), name)
		// The config parses to the same architecture.
		b, err := json.Marshal(s.Config(s.Vocab, s.BOS, []int{s.EOS}, "bfloat16", "x"))
		require.NoError(t, err)
		c, err := runtime.ParseConfig(name, b)
		require.NoError(t, err)
		require.Equal(t, [7]int{s.Hidden, s.Intermediate, s.Layers, s.Heads, s.KVHeads, s.HeadDim, s.Vocab},
			[7]int{c.Hidden, c.Intermediate, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Vocab}, name)
		require.Equal(t, s.ModelType == "qwen2", c.AttentionBias, name)
		require.Equal(t, strings.HasPrefix(name, "llama-3.2"), c.RopeScaling != nil, name)
		require.True(t, c.TieEmbeddings, name)
	}
	_, err := Lookup("llama-9b")
	require.ErrorContains(t, err, "smollm2-135m")
}

// TestTinyLoadsAndRuns writes the test shapes, reads them back with the HF
// reader and runs a forward pass and a short generation.
func TestTinyLoadsAndRuns(t *testing.T) {
	for _, c := range []struct {
		shape string
		dt    format.DType
	}{{"test-tiny", format.F32}, {"test-tiny", format.BF16}, {"test-tiny-qwen2", format.F16}} {
		t.Run(c.shape+"-"+c.dt.String(), func(t *testing.T) {
			dir, rep := write(t, c.shape, Options{DType: c.dt, Seed: 7})
			s, _ := Lookup(c.shape)
			require.Equal(t, max(s.Vocab, 2048), rep.Vocab)
			ck, m, err := hf.Load(dir)
			require.NoError(t, err)
			defer ck.Close()
			cfg := m.Config
			require.Equal(t, rep.Vocab, cfg.Vocab)
			require.Equal(t, s.Layers, cfg.Layers)
			require.Equal(t, s.TieEmbeddings, cfg.TieEmbeddings)
			require.Equal(t, c.shape == "test-tiny-qwen2", cfg.AttentionBias)
			require.Equal(t, 1, cfg.BOS) // from the tokenizer
			require.Len(t, ck.Names(), len(s.Tensors(rep.Vocab)))
			for _, ts := range s.Tensors(rep.Vocab) {
				x, err := ck.Tensor(ts.Name)
				require.NoError(t, err)
				require.Equal(t, ts.Shape, x.Shape, ts.Name)
				require.Equal(t, c.dt, x.DType, ts.Name)
			}
			// Norm weights are 1; biases are small and not all zero.
			require.Equal(t, []float32{1, 1, 1}, m.Norm[:3])
			if cfg.AttentionBias {
				require.NotZero(t, m.Layers[0].QBias[0])
				require.Less(t, math.Abs(float64(m.Layers[0].QBias[0])), 0.1)
			}
			pool := kernels.NewPool(2)
			defer pool.Close()
			sess := m.NewSession(pool, 32)
			logits, err := sess.Forward([]int{1, 100, 2000, 5}, false)
			require.NoError(t, err)
			require.Len(t, logits, cfg.Vocab)
			for _, v := range logits {
				require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0))
			}
			sess.Reset()
			res, err := sess.Generate([]int{1, 2, 3}, runtime.GenerateOptions{MaxTokens: 4})
			require.NoError(t, err)
			require.Len(t, res.IDs, 4)
		})
	}
}

// TestSaysRandom checks the marks: safetensors __metadata__, config.json,
// the index and README.md.
func TestSaysRandom(t *testing.T) {
	dir, rep := write(t, "test-tiny", Options{Seed: 42, MaxShardBytes: 40_000})
	note := "random weights, seed 42, shape test-tiny"
	require.Equal(t, note, rep.Note)
	require.Greater(t, len(rep.Files), 1)
	for _, f := range rep.Files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		n := binary.LittleEndian.Uint64(b)
		require.Zero(t, n%8, "header length keeps the data 8-byte aligned")
		var h map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b[8:8+n], &h))
		var meta map[string]string
		require.NoError(t, json.Unmarshal(h["__metadata__"], &meta))
		require.Equal(t, note, meta[MetadataKey], f)
	}
	var cfg, idx map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &cfg))
	require.Equal(t, note, cfg[MetadataKey])
	b, err = os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &idx))
	require.Equal(t, note, idx["metadata"].(map[string]any)[MetadataKey])
	b, err = os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(b), "RANDOM WEIGHTS")
	require.Contains(t, string(b), note)
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	// No temporary files are left behind.
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasSuffix(e.Name(), ".tmp"), e.Name())
	}
}

// TestDeterministic: the same seed gives the same bytes, whatever the number
// of goroutines; another seed other values; the shard layout does not change
// the values.
func TestDeterministic(t *testing.T) {
	read := func(dir string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
		require.NoError(t, err)
		return b
	}
	a, _ := write(t, "test-tiny-qwen2", Options{Seed: 5, Workers: 1})
	b, _ := write(t, "test-tiny-qwen2", Options{Seed: 5, Workers: 3})
	c, _ := write(t, "test-tiny-qwen2", Options{Seed: 6})
	require.Equal(t, read(a), read(b))
	require.NotEqual(t, read(a), read(c))
	for _, f := range []string{"config.json", "generation_config.json", "README.md"} {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		require.Equal(t, x, y, f)
	}

	sharded, rep := write(t, "test-tiny-qwen2", Options{Seed: 5, MaxShardBytes: 50_000})
	require.Greater(t, len(rep.Files), 1)
	ca, err := hf.Open(a)
	require.NoError(t, err)
	defer ca.Close()
	cs, err := hf.Open(sharded)
	require.NoError(t, err)
	defer cs.Close()
	require.Equal(t, ca.Names(), cs.Names())
	for _, n := range ca.Names() {
		x, _ := ca.Tensor(n)
		y, _ := cs.Tensor(n)
		require.True(t, bytes.Equal(x.Data, y.Data), n)
	}
}

// TestValues checks the distribution: normal(0, 0.02) matrices whose values
// do not depend on where a chunk starts, ones for norms.
func TestValues(t *testing.T) {
	const n = 1 << 18
	buf := make([]byte, 4*n)
	Fill(buf, Tensor{Name: "w", Init: Normal}, 0, 1, format.F32)
	var sum, sq float64
	var beyond3 int
	vals := make([]float32, n)
	for i := range vals {
		v := math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		vals[i] = v
		sum += float64(v)
		sq += float64(v) * float64(v)
		if math.Abs(float64(v)) > 3*MatrixStd {
			beyond3++
		}
	}
	mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	require.InDelta(t, 0, mean, 0.0002)
	require.InDelta(t, MatrixStd, std, 0.0002)
	require.InDelta(t, 0.0027, float64(beyond3)/n, 0.0008) // P(|z| > 3)
	// An odd start and a short buffer give the same values.
	part := make([]byte, 4*101)
	Fill(part, Tensor{Name: "w", Init: Normal}, 333, 1, format.F32)
	for i := 0; i < 101; i++ {
		require.Equal(t, vals[333+i], math.Float32frombits(binary.LittleEndian.Uint32(part[4*i:])))
	}
	ones := make([]byte, 2*8)
	Fill(ones, Tensor{Name: "n", Init: Ones}, 0, 1, format.BF16)
	require.Equal(t, uint16(0x3f80), binary.LittleEndian.Uint16(ones[14:]))
	// The outermost bins are computed exactly.
	require.InDelta(t, -6.34, invNormal(0), 0.01)
	require.InDelta(t, 6.34, invNormal(math.MaxUint32), 0.01)
	require.InDelta(t, 0, invNormal(1<<31), 1e-6)
}

func TestVocabAndFolder(t *testing.T) {
	// An explicit vocabulary smaller than the tokenizer's is kept (exact
	// real shapes), and token ids it cannot hold are dropped from the config.
	dir, rep := write(t, "test-tiny", Options{Vocab: 256})
	require.Equal(t, 256, rep.Vocab)
	ck, err := hf.Open(dir)
	require.NoError(t, err)
	require.Equal(t, 256, ck.Config.Vocab)
	ck.Close()
	b, _ := os.ReadFile(filepath.Join(dir, "README.md"))
	require.Contains(t, string(b), "smaller than the tokenizer's")

	// A non-empty folder needs Force, which replaces the old weight layout.
	s, _ := Lookup("test-tiny")
	_, err = Write(dir, Options{Shape: s, TokenizerDir: tokDir, MaxShardBytes: 40_000})
	require.ErrorContains(t, err, "not empty")
	_, err = Write(dir, Options{Shape: s, TokenizerDir: tokDir, MaxShardBytes: 40_000, Force: true})
	require.NoError(t, err)
	require.NoFileExists(t, filepath.Join(dir, "model.safetensors"))
	_, err = Write(dir, Options{Shape: s, TokenizerDir: tokDir, Force: true})
	require.NoError(t, err)
	require.NoFileExists(t, filepath.Join(dir, "model.safetensors.index.json"))
	ck, _, err = hf.Load(dir)
	require.NoError(t, err)
	ck.Close()

	_, err = Write(filepath.Join(t.TempDir(), "x"), Options{Shape: s, TokenizerDir: t.TempDir()})
	require.Error(t, err)
	_, err = Write(filepath.Join(t.TempDir(), "x"), Options{Shape: s, TokenizerDir: tokDir, DType: format.I32})
	require.ErrorContains(t, err, "dtype")
}

// TestBytesPerToken checks BytesPerToken on test-tiny in F32 by hand:
// hidden 32, N 64, 3 layers, q/o 32×32, k/v 16×32, vocab 2048, untied head.
func TestBytesPerToken(t *testing.T) {
	dir, _ := write(t, "test-tiny", Options{DType: format.F32})
	ck, m, err := hf.Load(dir)
	require.NoError(t, err)
	defer ck.Close()
	const (
		attn   = 3 * (32*32 + 16*32 + 16*32 + 32*32) * 4 // 36864
		ffnAll = 3 * 64 * 32 * 4                         // one whole layer: 24576
		head   = 2048 * 32 * 4                           // 262144
	)
	require.Equal(t, DecodeBytes{Attention: attn, FFN: 3 * ffnAll, LMHead: head}, BytesPerToken(m, nil))
	require.Equal(t, int64(372736), BytesPerToken(m, nil).Total())
	// An active set on a whole layer counts its rows: 5 neurons of layer 2.
	act := planFunc(func(i int) []int32 {
		if i == 2 {
			return []int32{0, 1, 2, 3, 4}
		}
		return nil
	})
	require.Equal(t, int64(2*ffnAll+5*3*32*4), BytesPerToken(m, act).FFN)

	// A slim file: layer 1 sliced to γ=0.5 (32 of 64 neurons), then decode
	// in selectinfer mode with φ=0.25 computes 16 of them.
	out := filepath.Join(t.TempDir(), "slim.sinf")
	_, err = convert.Convert(ck, out, convert.Options{Gamma: 0.5, Delta: 0.1, FirstLayer: 1, LastLayer: 2,
		ExplicitRange: true, Random: true, Seed: 1})
	require.NoError(t, err)
	f, err := format.Open(out)
	require.NoError(t, err)
	defer f.Close()
	sm, err := runtime.LoadFile(f)
	require.NoError(t, err)
	require.True(t, sm.Layers[1].MLP.Sliced)
	require.Equal(t, int64(attn+2*ffnAll+32*3*32*4+head), BytesPerToken(sm, nil).Total())
	pool := kernels.NewPool(1)
	defer pool.Close()
	s := sm.NewSession(pool, 16)
	_, err = s.Generate([]int{1, 50, 60, 70}, runtime.GenerateOptions{MaxTokens: 3,
		Sparsity: runtime.Sparsity{Mode: runtime.SelectInfer, Phi: 0.25, Alpha: 0.2}})
	require.NoError(t, err)
	require.Len(t, s.Active(1), 16)
	require.Equal(t, int64(354304), BytesPerToken(sm, s).Total()) // 36864 + 2·24576 + 16·384 + 262144

	// gatefirst with φ=0.125 (8 rows): all 32 gate rows, 8 up and down rows.
	s.Reset()
	_, err = s.Generate([]int{1, 50, 60, 70}, runtime.GenerateOptions{MaxTokens: 3,
		Sparsity: runtime.Sparsity{Mode: runtime.GateFirst, Phi: 0.125, Alpha: 0.2}})
	require.NoError(t, err)
	require.Nil(t, s.Active(1))
	require.Equal(t, 8, s.PerToken(1))
	require.Equal(t, int64(attn+2*ffnAll+(32+2*8)*32*4+head), BytesPerToken(sm, s).Total())
}

// planFunc is a Plan of fixed active sets.
type planFunc func(int) []int32

func (p planFunc) Active(i int) []int32 { return p(i) }
func (p planFunc) PerToken(int) int     { return 0 }
