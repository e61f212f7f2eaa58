package synth

import (
	"fmt"
	"sort"
	"strings"

	"github.com/selectinfer/sinf/runtime"
)

// Shape is the architecture of a real model, as its HuggingFace config.json
// gives it: everything a synthetic checkpoint needs to have that model's
// tensor shapes, and so its speed and memory.
type Shape struct {
	Name          string // the --shape name, e.g. "llama-3.2-1b"
	Model         string // the real model it copies, e.g. "meta-llama/Llama-3.2-1B"
	ModelType     string // "llama" or "qwen2"
	Hidden        int    // hidden_size
	Intermediate  int    // intermediate_size: N
	Layers        int    // num_hidden_layers
	Heads         int    // num_attention_heads
	KVHeads       int    // num_key_value_heads
	HeadDim       int    // head_dim
	Vocab         int    // the real model's vocab_size
	MaxPositions  int    // max_position_embeddings
	RMSNormEps    float64
	RopeTheta     float64
	RopeScaling   *runtime.RopeScaling // nil: none
	TieEmbeddings bool
	BOS, EOS      int // the real model's bos/eos_token_id
	// Generation holds generation_config.json fields other than the token ids.
	Generation map[string]any
	// Extra holds config.json fields of the real model that the runtime does
	// not read (they override the defaults Config writes).
	Extra map[string]any
	// Test marks shapes for tests only: accepted but not listed.
	Test bool
}

// llama32Scaling is Llama-3.2's rope_scaling block.
var llama32Scaling = &runtime.RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}

// shapes is the registry of known shapes, by name.
var shapes = map[string]Shape{}

func register(s Shape) { shapes[s.Name] = s }

func init() {
	register(Shape{Name: "smollm2-135m", Model: "HuggingFaceTB/SmolLM2-135M", ModelType: "llama",
		Hidden: 576, Intermediate: 1536, Layers: 30, Heads: 9, KVHeads: 3, HeadDim: 64, Vocab: 49152,
		MaxPositions: 8192, RMSNormEps: 1e-5, RopeTheta: 100000, TieEmbeddings: true, BOS: 0, EOS: 0})
	register(Shape{Name: "qwen2.5-0.5b", Model: "Qwen/Qwen2.5-0.5B", ModelType: "qwen2",
		Hidden: 896, Intermediate: 4864, Layers: 24, Heads: 14, KVHeads: 2, HeadDim: 64, Vocab: 151936,
		MaxPositions: 32768, RMSNormEps: 1e-6, RopeTheta: 1000000, TieEmbeddings: true, BOS: 151643, EOS: 151643,
		Generation: map[string]any{"do_sample": false, "max_new_tokens": 2048}, Extra: map[string]any{"max_window_layers": 24}})
	register(Shape{Name: "qwen2.5-3b", Model: "Qwen/Qwen2.5-3B", ModelType: "qwen2",
		Hidden: 2048, Intermediate: 11008, Layers: 36, Heads: 16, KVHeads: 2, HeadDim: 128, Vocab: 151936,
		MaxPositions: 32768, RMSNormEps: 1e-6, RopeTheta: 1000000, TieEmbeddings: true, BOS: 151643, EOS: 151643,
		Generation: map[string]any{"do_sample": false, "max_new_tokens": 2048}, Extra: map[string]any{"max_window_layers": 70}})
	register(Shape{Name: "llama-3.2-1b", Model: "meta-llama/Llama-3.2-1B", ModelType: "llama",
		Hidden: 2048, Intermediate: 8192, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, Vocab: 128256,
		MaxPositions: 131072, RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: llama32Scaling, TieEmbeddings: true,
		BOS: 128000, EOS: 128001, Generation: map[string]any{"do_sample": true, "temperature": 0.6, "top_p": 0.9}})
	register(Shape{Name: "llama-3.2-3b", Model: "meta-llama/Llama-3.2-3B", ModelType: "llama",
		Hidden: 3072, Intermediate: 8192, Layers: 28, Heads: 24, KVHeads: 8, HeadDim: 128, Vocab: 128256,
		MaxPositions: 131072, RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: llama32Scaling, TieEmbeddings: true,
		BOS: 128000, EOS: 128001, Generation: map[string]any{"do_sample": true, "temperature": 0.6, "top_p": 0.9}})

	// Test shapes: a few kilobytes to a megabyte, one per code path (untied
	// head with llama3 RoPE scaling; Qwen2 biases with a tied head; rows of
	// whole 256-element K-quant blocks).
	register(Shape{Name: "test-tiny", Model: "(test shape)", ModelType: "llama",
		Hidden: 32, Intermediate: 64, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8, Vocab: 256,
		MaxPositions: 128, RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: &runtime.RopeScaling{Type: "llama3",
			Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 64},
		TieEmbeddings: false, BOS: 1, EOS: 2, Test: true})
	register(Shape{Name: "test-tiny-qwen2", Model: "(test shape)", ModelType: "qwen2",
		Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 1, HeadDim: 8, Vocab: 4096,
		MaxPositions: 128, RMSNormEps: 1e-6, RopeTheta: 1000000, TieEmbeddings: true, BOS: 1, EOS: 2, Test: true})
	register(Shape{Name: "test-kquant", Model: "(test shape)", ModelType: "llama",
		Hidden: 256, Intermediate: 512, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 512,
		MaxPositions: 128, RMSNormEps: 1e-5, RopeTheta: 10000, TieEmbeddings: true, BOS: 1, EOS: 2, Test: true})
}

// Names lists the shapes for users (test shapes left out), sorted.
func Names() []string {
	var out []string
	for n, s := range shapes {
		if !s.Test {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Lookup returns the named shape (case-insensitive), or an error listing the
// known ones.
func Lookup(name string) (Shape, error) {
	if s, ok := shapes[strings.ToLower(name)]; ok {
		return s, nil
	}
	return Shape{}, fmt.Errorf("unknown shape %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Tensor is one tensor of a synthetic checkpoint and how it is filled.
type Tensor struct {
	Name  string
	Shape []int
	Init  Init
}

// Init says how a tensor's values are drawn.
type Init int

const (
	// Normal draws from normal(0, MatrixStd): weight matrices.
	Normal Init = iota
	// Ones fills with 1: RMSNorm weights.
	Ones
	// Bias draws from normal(0, BiasStd): Qwen2's q/k/v biases.
	Bias
)

// Standard deviations of the random values (HF's initializer_range is 0.02).
const (
	MatrixStd = 0.02
	BiasStd   = 0.01
)

// Elems returns the number of elements of t.
func (t Tensor) Elems() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Tensors lists the checkpoint's tensors in file order (the embedding, the
// layers in order, the final norm, and lm_head when untied), with the HF
// names and shapes of LlamaForCausalLM / Qwen2ForCausalLM, for a vocabulary
// of vocab tokens.
func (s Shape) Tensors(vocab int) []Tensor {
	H, N := s.Hidden, s.Intermediate
	qd, kvd := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	out := []Tensor{{"model.embed_tokens.weight", []int{vocab, H}, Normal}}
	for i := 0; i < s.Layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		out = append(out,
			Tensor{p + "input_layernorm.weight", []int{H}, Ones},
			Tensor{p + "self_attn.q_proj.weight", []int{qd, H}, Normal},
			Tensor{p + "self_attn.k_proj.weight", []int{kvd, H}, Normal},
			Tensor{p + "self_attn.v_proj.weight", []int{kvd, H}, Normal},
		)
		if s.ModelType == "qwen2" {
			out = append(out,
				Tensor{p + "self_attn.q_proj.bias", []int{qd}, Bias},
				Tensor{p + "self_attn.k_proj.bias", []int{kvd}, Bias},
				Tensor{p + "self_attn.v_proj.bias", []int{kvd}, Bias},
			)
		}
		out = append(out,
			Tensor{p + "self_attn.o_proj.weight", []int{H, qd}, Normal},
			Tensor{p + "post_attention_layernorm.weight", []int{H}, Ones},
			Tensor{p + "mlp.gate_proj.weight", []int{N, H}, Normal},
			Tensor{p + "mlp.up_proj.weight", []int{N, H}, Normal},
			Tensor{p + "mlp.down_proj.weight", []int{H, N}, Normal},
		)
	}
	out = append(out, Tensor{"model.norm.weight", []int{H}, Ones})
	if !s.TieEmbeddings {
		out = append(out, Tensor{"lm_head.weight", []int{vocab, H}, Normal})
	}
	return out
}

// Params returns the number of parameters for a vocabulary of vocab tokens.
func (s Shape) Params(vocab int) int64 {
	var n int64
	for _, t := range s.Tensors(vocab) {
		n += int64(t.Elems())
	}
	return n
}

// Config returns config.json's fields for the shape as HF transformers
// writes them for the real model, with the given vocabulary, token ids
// (bos < 0: null; eos empty: null) and torch_dtype, plus a sinf_synthetic
// field saying the weights are random.
func (s Shape) Config(vocab, bos int, eos []int, torchDType, note string) map[string]any {
	c := map[string]any{
		"model_type":              s.ModelType,
		"hidden_act":              "silu",
		"hidden_size":             s.Hidden,
		"intermediate_size":       s.Intermediate,
		"num_hidden_layers":       s.Layers,
		"num_attention_heads":     s.Heads,
		"num_key_value_heads":     s.KVHeads,
		"vocab_size":              vocab,
		"max_position_embeddings": s.MaxPositions,
		"rms_norm_eps":            s.RMSNormEps,
		"rope_theta":              s.RopeTheta,
		"tie_word_embeddings":     s.TieEmbeddings,
		"torch_dtype":             torchDType,
		"initializer_range":       MatrixStd,
		"attention_dropout":       0.0,
		"use_cache":               true,
		"bos_token_id":            tokenField(bos),
		"eos_token_id":            tokenListField(eos),
		"sinf_synthetic":          note,
	}
	switch s.ModelType {
	case "qwen2":
		c["architectures"] = []string{"Qwen2ForCausalLM"}
		c["sliding_window"] = s.MaxPositions
		c["use_sliding_window"] = false
		c["max_window_layers"] = s.Layers
		c["rope_scaling"] = nil
	default:
		c["architectures"] = []string{"LlamaForCausalLM"}
		c["attention_bias"] = false
		c["mlp_bias"] = false
		c["head_dim"] = s.HeadDim
		c["pretraining_tp"] = 1
		if s.RopeScaling != nil {
			c["rope_scaling"] = s.RopeScaling
		} else {
			c["rope_scaling"] = nil
		}
	}
	for k, v := range s.Extra {
		c[k] = v
	}
	return c
}

// GenerationConfig returns generation_config.json's fields.
func (s Shape) GenerationConfig(bos int, eos []int) map[string]any {
	g := map[string]any{"bos_token_id": tokenField(bos), "eos_token_id": tokenListField(eos)}
	for k, v := range s.Generation {
		g[k] = v
	}
	return g
}

func tokenField(id int) any {
	if id < 0 {
		return nil
	}
	return id
}

func tokenListField(ids []int) any {
	switch len(ids) {
	case 0:
		return nil
	case 1:
		return ids[0]
	}
	return ids
}
