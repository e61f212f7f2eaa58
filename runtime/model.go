// Package runtime runs Llama-family decoder models (HF LlamaForCausalLM and
// Qwen2ForCausalLM) on the CPU from weights served by a Source, with the
// selective FFN computation of SelectInfer (paper §5): prefill computes every
// loaded neuron and picks dynamic neurons; decode computes static ∪ dynamic.
package runtime

import (
	"fmt"
	"math"
	"sync"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// Source serves weights by HF tensor name as zero-copy views. format serves a
// .sinf file, the HF reader in convert a checkpoint folder.
type Source interface {
	// Tensor returns the named tensor, or an error naming it when absent.
	Tensor(name string) (format.Tensor, error)
	// Has reports whether the named tensor is stored.
	Has(name string) bool
}

// Layer holds one decoder layer's weights (HF LlamaDecoderLayer).
type Layer struct {
	AttnNorm            []float32   // input_layernorm.weight [hidden]
	Q, K, V, O          kernels.Mat // q_proj [heads·hd, hidden], k/v_proj [kv·hd, hidden], o_proj [hidden, heads·hd]
	QBias, KBias, VBias []float32   // Qwen2 / attention_bias; nil when absent
	OBias               []float32   // llama attention_bias only
	MLPNorm             []float32   // post_attention_layernorm.weight [hidden]
	MLP                 MLP
}

// MLP is a SwiGLU FFN layer, down_proj(silu(gate_proj(x)) · up_proj(x)), over
// the neurons stored for it. A sliced layer (spec/sinf.md §tensor naming)
// stores Kept ≤ N neurons: Gate/Up [kept, hidden], DownT [kept, hidden] (the
// transposed down_proj), Index[j] the original neuron of row j, the first Base
// rows the static (base) neurons. A whole layer stores Gate/Up [N, hidden] and
// Down in HF layout [hidden, N].
type MLP struct {
	Gate, Up kernels.Mat
	Down     kernels.Mat // whole layers only: [hidden, N]
	DownT    kernels.Mat // sliced layers only: [kept, hidden]
	Index    []int32     // sliced layers only: [kept] → original neuron in [0, N)
	Base     int         // sliced layers only: static neurons, rows [0, Base)
	Sliced   bool
	// DownBias is a reconstructed sliced layer's output bias (spec §6.2
	// down_proj.bias, F32 [hidden]), added to the layer's output for every
	// token and in every mode; nil when the file stores none.
	DownBias []float32
	// UpSketch is a sliced layer's SK2 sketch of its up_proj rows (spec §6.2
	// up_proj.sketch, [kept, hidden]): GateFirst ranks rows by
	// |silu(g_j)·(sketch_j·x)|·‖down_j‖ when present (Rows 0: absent).
	UpSketch kernels.Sketch
}

// Norms are the weight norms of a layer's stored rows, float32 [kept]:
// Up[j] = ‖W_up[j,:]‖₂ and Down[j] = ‖W_down[:,j]‖₂ (the neuron's row of
// up_proj and column of down_proj).
type Norms struct{ Up, Down []float32 }

// RowNorms returns layer i's Norms, GateFirst's row weights (see
// GateWeights). Computed for every layer once, on first use (one pass over
// the up_proj and down_proj weights; a Model not made by Load computes them
// on every call); safe for concurrent use.
func (mod *Model) RowNorms(i int) Norms {
	c := mod.norms
	if c == nil {
		return mod.Layers[i].MLP.rowNorms()
	}
	c.once.Do(func() {
		c.v = make([]Norms, len(mod.Layers))
		for i := range mod.Layers {
			c.v[i] = mod.Layers[i].MLP.rowNorms()
		}
	})
	return c.v[i]
}

func (m *MLP) rowNorms() Norms {
	n := m.Kept()
	out := Norms{Up: make([]float32, n), Down: make([]float32, n)}
	up := make([]float32, m.Up.Cols)
	var down []float32
	if m.Sliced {
		down = make([]float32, m.DownT.Cols)
	} else {
		down = make([]float32, m.Down.Cols)
	}
	col := make([]float64, n)
	if !m.Sliced { // whole layer: down_proj is [hidden, N], its columns are the neurons
		for r := 0; r < m.Down.Rows; r++ {
			m.Down.RowF32(down, r)
			for j, v := range down {
				col[j] += float64(v) * float64(v)
			}
		}
	}
	for j := 0; j < n; j++ {
		m.Up.RowF32(up, j)
		var su, sd float64
		for _, v := range up {
			su += float64(v) * float64(v)
		}
		if m.Sliced {
			m.DownT.RowF32(down, j)
			for _, v := range down {
				sd += float64(v) * float64(v)
			}
		} else {
			sd = col[j]
		}
		out.Up[j], out.Down[j] = float32(math.Sqrt(su)), float32(math.Sqrt(sd))
	}
	return out
}

// Kept returns the number of neurons stored for the layer.
func (m *MLP) Kept() int { return m.Gate.Rows }

// Model is a loaded model: weights are views into the source's memory.
type Model struct {
	Config Config
	Embed  kernels.Mat // model.embed_tokens.weight [vocab, hidden]
	Layers []Layer
	Norm   []float32   // model.norm.weight [hidden]
	LMHead kernels.Mat // lm_head.weight [vocab, hidden] (the embedding when tied)
	// Path names where the weights are read from (the .sinf file or the
	// HF folder), for errors; set by LoadFile and the HF loader.
	Path string
	// KVCache is the dtype of the KV caches of the sessions made after it
	// is set (kernels.Cache): format.F32, the default (0 too), or
	// format.F16, half the memory and half the bytes attention reads a
	// token, at F16's precision (llama.cpp's default cache type). Any other
	// dtype is a programming error: NewSession panics on it (the commands
	// set it from --kv-cache, which refuses other names).
	KVCache format.DType

	invFreq []float64 // RoPE inverse frequencies [head_dim/2]

	norms *rowNorms // RowNorms' cache; nil in a Model not made by Load
}

// KVCacheType is KVCache with its default: the dtype of the KV caches
// NewSession makes.
func (m *Model) KVCacheType() format.DType {
	if m.KVCache == 0 {
		return format.F32
	}
	return m.KVCache
}

type rowNorms struct {
	once sync.Once
	v    []Norms
}

// LoadOptions says which layers are sliced and how many base neurons each has.
type LoadOptions struct {
	// Base[i] is the base (static) neuron count of layer i when sliced; layers
	// whose Base entry is missing have Base 0.
	Base map[int]int
}

// recorder is a Source that notes the names read through it; with check
// set, mat does not copy unaligned data (the model is not kept).
type recorder struct {
	Source
	used  map[string]bool
	check bool
}

func (r *recorder) Tensor(name string) (format.Tensor, error) {
	r.used[name] = true
	return r.Source.Tensor(name)
}

// Check binds src as Load does, with every presence and shape check, but
// keeps no model (nothing is copied), and returns the names of the tensors
// a model of cfg reads: what a converter stores, and, with UnusedTensors,
// what it reports.
func Check(cfg Config, src Source, opt LoadOptions) (used map[string]bool, err error) {
	r := &recorder{Source: src, used: map[string]bool{}, check: true}
	if _, err := Load(cfg, r, opt); err != nil {
		return nil, err
	}
	return r.used, nil
}

// LoadUsed is Load that also returns the names of the tensors the model
// read (Check's set), in one binding.
func LoadUsed(cfg Config, src Source, opt LoadOptions) (*Model, map[string]bool, error) {
	r := &recorder{Source: src, used: map[string]bool{}}
	m, err := Load(cfg, r, opt)
	if err != nil {
		return nil, nil, err
	}
	return m, r.used, nil
}

// Load binds the source's tensors to a Model of the given config. It checks
// every tensor's presence and shape and returns an error naming the tensor,
// the expected and the found shape. A tied model (tie_word_embeddings, or
// the architecture's default when config.json does not set it: TieDefault) uses
// model.embed_tokens.weight as the output projection even when an
// lm_head.weight is stored, as HF's tie_weights does; one storing only
// lm_head.weight uses that for both (spec §6.1). The o_proj bias is read
// for Llama with attention_bias only (HF Qwen2Attention has none).
func Load(cfg Config, src Source, opt LoadOptions) (*Model, error) {
	m := &Model{Config: cfg, Layers: make([]Layer, cfg.Layers), invFreq: cfg.RopeInvFreq(), norms: &rowNorms{}}
	H, hd := cfg.Hidden, cfg.HeadDim
	qd, kvd := cfg.Heads*hd, cfg.KVHeads*hd
	var err error
	embedName, headName := "model.embed_tokens.weight", "lm_head.weight"
	switch {
	case src.Has(embedName):
	case cfg.TieEmbeddings && src.Has(headName):
		embedName = headName
	}
	if m.Embed, err = mat(src, embedName, cfg.Vocab, H); err != nil {
		return nil, err
	}
	if cfg.TieEmbeddings {
		headName = embedName
	} else if !src.Has(headName) {
		return nil, fmt.Errorf("tensor %s not found, and %s, so the output projection is its own matrix, not the embedding (HF would start it at random): set \"tie_word_embeddings\": true in config.json if the model is tied", headName, cfg.TieNote())
	}
	if m.LMHead, err = mat(src, headName, cfg.Vocab, H); err != nil {
		return nil, err
	}
	if m.Norm, err = vec(src, "model.norm.weight", H); err != nil {
		return nil, err
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		if l.AttnNorm, err = vec(src, p+"input_layernorm.weight", H); err != nil {
			return nil, err
		}
		if l.MLPNorm, err = vec(src, p+"post_attention_layernorm.weight", H); err != nil {
			return nil, err
		}
		for _, w := range []struct {
			dst        *kernels.Mat
			name       string
			rows, cols int
		}{{&l.Q, "self_attn.q_proj.weight", qd, H}, {&l.K, "self_attn.k_proj.weight", kvd, H},
			{&l.V, "self_attn.v_proj.weight", kvd, H}, {&l.O, "self_attn.o_proj.weight", H, qd}} {
			if *w.dst, err = mat(src, p+w.name, w.rows, w.cols); err != nil {
				return nil, err
			}
		}
		if cfg.AttentionBias {
			for _, b := range []struct {
				dst  *[]float32
				name string
				n    int
			}{{&l.QBias, "self_attn.q_proj.bias", qd}, {&l.KBias, "self_attn.k_proj.bias", kvd}, {&l.VBias, "self_attn.v_proj.bias", kvd}} {
				if *b.dst, err = vec(src, p+b.name, b.n); err != nil {
					return nil, err
				}
			}
			if cfg.ModelType == "llama" && src.Has(p+"self_attn.o_proj.bias") {
				if l.OBias, err = vec(src, p+"self_attn.o_proj.bias", H); err != nil {
					return nil, err
				}
			}
		}
		if l.MLP, err = loadMLP(src, p+"mlp.", cfg, opt.Base[i]); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func loadMLP(src Source, p string, cfg Config, base int) (MLP, error) {
	H, N := cfg.Hidden, cfg.Intermediate
	var f MLP
	var err error
	if !src.Has(p + "neuron_index") {
		if f.Gate, err = mat(src, p+"gate_proj.weight", N, H); err != nil {
			return f, err
		}
		if f.Up, err = mat(src, p+"up_proj.weight", N, H); err != nil {
			return f, err
		}
		f.Down, err = mat(src, p+"down_proj.weight", H, N)
		return f, err
	}
	idx, err := src.Tensor(p + "neuron_index")
	if err != nil {
		return f, err
	}
	if len(idx.Shape) != 1 || idx.Shape[0] < 1 || idx.Shape[0] > N {
		return f, fmt.Errorf("tensor %s: expected shape [kept] with 1 ≤ kept ≤ %d, found %v", idx.Name, N, idx.Shape)
	}
	if f.Index, err = idx.I32s(); err != nil {
		return f, err
	}
	if err := format.ValidateIndexMap(f.Index, N); err != nil {
		return f, fmt.Errorf("tensor %s: %w", idx.Name, err)
	}
	kept := len(f.Index)
	if base < 0 || base > kept {
		return f, fmt.Errorf("%sneuron_index: base count %d outside [0, %d]", p, base, kept)
	}
	f.Sliced, f.Base = true, base
	if f.Gate, err = mat(src, p+"gate_proj.weight", kept, H); err != nil {
		return f, err
	}
	if f.Up, err = mat(src, p+"up_proj.weight", kept, H); err != nil {
		return f, err
	}
	if f.DownT, err = mat(src, p+"down_proj.weight_t", kept, H); err != nil {
		return f, err
	}
	if src.Has(p + "down_proj.bias") {
		if f.DownBias, err = vec(src, p+"down_proj.bias", H); err != nil {
			return f, err
		}
	}
	if src.Has(p + "up_proj.sketch") {
		t, err := src.Tensor(p + "up_proj.sketch")
		if err != nil {
			return f, err
		}
		if err := t.CheckShape(kept, H); err != nil {
			return f, err
		}
		if f.UpSketch, err = kernels.NewSketch(t); err != nil {
			return f, err
		}
	}
	return f, nil
}

// mat fetches a 2-D weight and checks its shape.
func mat(src Source, name string, rows, cols int) (kernels.Mat, error) {
	t, err := src.Tensor(name)
	if err != nil {
		return kernels.Mat{}, err
	}
	if err := t.CheckShape(rows, cols); err != nil {
		return kernels.Mat{}, err
	}
	m, err := kernels.NewMat(t)
	if err != nil {
		return kernels.Mat{}, err
	}
	if r, ok := src.(*recorder); ok && r.check {
		return m, nil
	}
	if !m.Aligned() {
		// Safetensors does not align its data; copy rather than read unaligned.
		m.Data = append(make([]byte, 0, len(m.Data)+8), m.Data...)
	}
	return m, nil
}

// vec fetches a 1-D float tensor (norm weights, biases) and decodes it to
// float32; these are small, so a heap copy is cheap.
func vec(src Source, name string, n int) ([]float32, error) {
	t, err := src.Tensor(name)
	if err != nil {
		return nil, err
	}
	if err := t.CheckShape(n); err != nil {
		return nil, err
	}
	return t.ToF32()
}

// WeightBytes returns the bytes of all matrices, and of the FFN matrices only.
func (m *Model) WeightBytes() (total, ffn int) {
	total = m.Embed.Bytes()
	if &m.LMHead.Data[0] != &m.Embed.Data[0] {
		total += m.LMHead.Bytes()
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		total += l.Q.Bytes() + l.K.Bytes() + l.V.Bytes() + l.O.Bytes()
		f := l.MLP.Gate.Bytes() + l.MLP.Up.Bytes() + l.MLP.Down.Bytes() + l.MLP.DownT.Bytes() + l.MLP.UpSketch.Bytes()
		total += f
		ffn += f
	}
	return total, ffn
}
