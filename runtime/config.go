package runtime

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// RopeScaling is HF's RoPE scaling, from config.json's rope_scaling or
// rope_parameters block (transformers modeling_rope_utils.py):
// rope_type "linear" divides every frequency by factor, so position p turns
// as p / factor would (_compute_linear_scaling_rope_parameters); "llama3"
// divides the low frequencies only, smoothly (_compute_llama3_parameters).
// Other types are refused.
type RopeScaling struct {
	Type                          string  `json:"rope_type"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor"`
	HighFreqFactor                float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
}

// Config is the architecture of a decoder-only Llama-family model, read from a
// HuggingFace config.json (transformers LlamaConfig / Qwen2Config).
type Config struct {
	ModelType     string       // "llama" or "qwen2"
	Hidden        int          // hidden_size
	Intermediate  int          // intermediate_size: N, the FFN neurons per layer
	Layers        int          // num_hidden_layers
	Heads         int          // num_attention_heads
	KVHeads       int          // num_key_value_heads
	HeadDim       int          // head_dim, or hidden_size / num_attention_heads
	Vocab         int          // vocab_size
	MaxPositions  int          // max_position_embeddings: the context length
	RMSNormEps    float64      // rms_norm_eps
	RopeTheta     float64      // rope_theta or rope_parameters.rope_theta, else DefaultRopeTheta
	RopeScaling   *RopeScaling // rope_scaling or rope_parameters; nil when none (rope_type default)
	TieEmbeddings bool         // tie_word_embeddings, or the architecture's default (TieDefault)
	// TieFromConfig says tie_word_embeddings was set in config.json; when
	// false, TieEmbeddings is the architecture's default (see TieNote).
	TieFromConfig bool
	AttentionBias bool   // q/k/v (and o for llama) projections carry biases
	BOS           int    // bos_token_id, -1 when absent
	EOS           []int  // eos_token_id (an int or a list)
	HiddenAct     string // hidden_act; only "silu" is supported
	// SlidingWindow is Qwen2's sliding_window when use_sliding_window is
	// true and some layer uses it (a layer i ≥ max_window_layers, HF
	// Qwen2Attention), else 0. sinf computes full attention, which equals
	// HF's sliding-window attention while the sequence fits in the window,
	// so MaxContext caps the context at it.
	SlidingWindow int
}

// Limits on the config values that size allocations; a config.json above
// one is refused (it would ask for more memory than any device has, such as
// max_position_embeddings 2147483647).
const (
	MaxHidden       = 1 << 16 // hidden_size, head_dim · heads
	MaxIntermediate = 1 << 20 // intermediate_size
	MaxLayers       = 1 << 10 // num_hidden_layers
	MaxHeads        = 1 << 10 // num_attention_heads
	MaxHeadDim      = 1 << 10 // head_dim
	MaxVocab        = 1 << 24 // vocab_size
	MaxPositions    = 1 << 24 // max_position_embeddings (16 Mi positions)
)

// DefaultContext is the KV cache length a session gets when none is asked
// for: the model's MaxContext, at most this (4096 positions; a KV cache for a
// model's whole max_position_embeddings can be gigabytes: Llama-3.2-1B's
// 131072 positions take 4 GiB).
const DefaultContext = 4096

// MaxContext returns the longest context this runtime computes exactly for
// the model: max_position_embeddings, or the sliding window when smaller
// (see SlidingWindow).
func (c Config) MaxContext() int {
	if c.SlidingWindow > 0 && c.SlidingWindow < c.MaxPositions {
		return c.SlidingWindow
	}
	return c.MaxPositions
}

// Architectures lists the model_type values this runtime runs.
var Architectures = map[string]bool{"llama": true, "qwen2": true}

// TieDefault is tie_word_embeddings when config.json does not set it, per
// model_type, as HF's config classes default it: LlamaConfig and
// Qwen2Config both say false (transformers configuration_llama.py,
// configuration_qwen2.py), so such a model has its own lm_head.weight.
var TieDefault = map[string]bool{"llama": false, "qwen2": false}

// configClass is HF's config class of a model_type, for messages.
func configClass(modelType string) string {
	if modelType == "qwen2" {
		return "Qwen2Config"
	}
	return "LlamaConfig"
}

// TieNote says what tie_word_embeddings is and where the value came from,
// for messages: `tie_word_embeddings is true (config.json)` or
// `tie_word_embeddings is false (absent from config.json: HF LlamaConfig's
// default)`.
func (c Config) TieNote() string {
	if c.TieFromConfig {
		return fmt.Sprintf("tie_word_embeddings is %v (config.json)", c.TieEmbeddings)
	}
	return fmt.Sprintf("tie_word_embeddings is %v (absent from config.json: HF %s's default)", c.TieEmbeddings, configClass(c.ModelType))
}

type hfConfig struct {
	ModelType         string          `json:"model_type"`
	HiddenSize        int             `json:"hidden_size"`
	IntermediateSize  int             `json:"intermediate_size"`
	NumHiddenLayers   int             `json:"num_hidden_layers"`
	NumAttentionHeads int             `json:"num_attention_heads"`
	NumKeyValueHeads  int             `json:"num_key_value_heads"`
	HeadDim           int             `json:"head_dim"`
	VocabSize         int             `json:"vocab_size"`
	MaxPositions      int             `json:"max_position_embeddings"`
	RMSNormEps        float64         `json:"rms_norm_eps"`
	RopeTheta         *float64        `json:"rope_theta"`
	RopeScaling       json.RawMessage `json:"rope_scaling"`
	RopeParameters    json.RawMessage `json:"rope_parameters"`
	PartialRotary     *float64        `json:"partial_rotary_factor"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	AttentionBias     bool            `json:"attention_bias"`
	MLPBias           bool            `json:"mlp_bias"`
	BOSTokenID        json.RawMessage `json:"bos_token_id"`
	EOSTokenID        json.RawMessage `json:"eos_token_id"`
	HiddenAct         string          `json:"hidden_act"`
	UseSlidingWindow  bool            `json:"use_sliding_window"`
	SlidingWindow     *int            `json:"sliding_window"`
	MaxWindowLayers   *int            `json:"max_window_layers"`
}

// ParseConfig parses a HuggingFace config.json. name labels errors (the file
// path). It rejects unknown model types (naming the supported ones), missing or
// non-positive sizes, and heads that do not divide evenly.
func ParseConfig(name string, data []byte) (Config, error) {
	var h hfConfig
	if err := json.Unmarshal(data, &h); err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	if !Architectures[h.ModelType] {
		known := make([]string, 0, len(Architectures))
		for k := range Architectures {
			known = append(known, k)
		}
		sort.Strings(known)
		return Config{}, fmt.Errorf("%s: model_type %q is not supported (supported: %s)", name, h.ModelType, strings.Join(known, ", "))
	}
	c := Config{
		ModelType:     h.ModelType,
		Hidden:        h.HiddenSize,
		Intermediate:  h.IntermediateSize,
		Layers:        h.NumHiddenLayers,
		Heads:         h.NumAttentionHeads,
		KVHeads:       h.NumKeyValueHeads,
		HeadDim:       h.HeadDim,
		Vocab:         h.VocabSize,
		MaxPositions:  h.MaxPositions,
		RMSNormEps:    h.RMSNormEps,
		TieEmbeddings: TieDefault[h.ModelType],
		AttentionBias: h.AttentionBias || h.ModelType == "qwen2",
		BOS:           -1,
		HiddenAct:     h.HiddenAct,
	}
	if h.TieWordEmbeddings != nil {
		c.TieEmbeddings, c.TieFromConfig = *h.TieWordEmbeddings, true
	}
	var err error
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		return Config{}, fmt.Errorf("%s: field rms_norm_eps %g must be in (0, 1) (absent or 0: 1e-6)", name, c.RMSNormEps)
	}
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
	for _, f := range []struct {
		field string
		v     int
	}{{"hidden_size", c.Hidden}, {"intermediate_size", c.Intermediate}, {"num_hidden_layers", c.Layers},
		{"num_attention_heads", c.Heads}, {"num_key_value_heads", c.KVHeads}, {"vocab_size", c.Vocab},
		{"max_position_embeddings", c.MaxPositions}} {
		if f.v <= 0 {
			return Config{}, fmt.Errorf("%s: field %s must be positive, found %d", name, f.field, f.v)
		}
	}
	for _, f := range []struct {
		field  string
		v, max int
	}{{"hidden_size", c.Hidden, MaxHidden}, {"intermediate_size", c.Intermediate, MaxIntermediate},
		{"num_hidden_layers", c.Layers, MaxLayers}, {"num_attention_heads", c.Heads, MaxHeads},
		{"head_dim", c.HeadDim, MaxHeadDim}, {"vocab_size", c.Vocab, MaxVocab},
		{"max_position_embeddings", c.MaxPositions, MaxPositions}} {
		if f.v > f.max {
			return Config{}, fmt.Errorf("%s: field %s %d is above this runtime's limit of %d", name, f.field, f.v, f.max)
		}
	}
	if c.HeadDim < 0 {
		return Config{}, fmt.Errorf("%s: field head_dim must be positive, found %d", name, c.HeadDim)
	}
	if c.HeadDim == 0 {
		if c.Hidden%c.Heads != 0 {
			return Config{}, fmt.Errorf("%s: hidden_size %d is not divisible by num_attention_heads %d", name, c.Hidden, c.Heads)
		}
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.Heads*c.HeadDim > MaxHidden {
		return Config{}, fmt.Errorf("%s: num_attention_heads %d · head_dim %d is above this runtime's limit of %d", name, c.Heads, c.HeadDim, MaxHidden)
	}
	if c.HeadDim%2 != 0 {
		return Config{}, fmt.Errorf("%s: head_dim %d must be even for RoPE", name, c.HeadDim)
	}
	if c.Heads%c.KVHeads != 0 {
		return Config{}, fmt.Errorf("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", name, c.Heads, c.KVHeads)
	}
	if c.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("%s: hidden_act %q is not supported (supported: silu)", name, c.HiddenAct)
	}
	if h.MLPBias {
		return Config{}, fmt.Errorf("%s: mlp_bias true is not supported", name)
	}
	if c.RopeTheta, c.RopeScaling, err = parseRope(name, h); err != nil {
		return Config{}, err
	}
	if h.UseSlidingWindow && h.SlidingWindow != nil {
		mwl := 28 // Qwen2Config's default
		if h.MaxWindowLayers != nil {
			mwl = *h.MaxWindowLayers
		}
		switch w := *h.SlidingWindow; {
		case w <= 0:
			return Config{}, fmt.Errorf("%s: field sliding_window %d must be positive when use_sliding_window is true", name, w)
		case mwl < c.Layers:
			c.SlidingWindow = w
		}
	}
	if c.BOS, err = parseTokenIDs(h.BOSTokenID, -1); err != nil {
		return Config{}, fmt.Errorf("%s: field bos_token_id: %w", name, err)
	}
	if c.EOS, err = parseTokenList(h.EOSTokenID); err != nil {
		return Config{}, fmt.Errorf("%s: field eos_token_id: %w", name, err)
	}
	return c, nil
}

// parseTokenIDs reads an int, null, or the first of a list; def when absent.
func parseTokenIDs(raw json.RawMessage, def int) (int, error) {
	l, err := parseTokenList(raw)
	if err != nil || len(l) == 0 {
		return def, err
	}
	return l[0], nil
}

// parseTokenList reads an int, a list of ints, or null.
func parseTokenList(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want an int or a list of ints, found %s", raw)
	}
	return many, nil
}

// RopeInvFreq returns the inverse frequencies θ_i = theta^(-2i/d), i < d/2,
// adjusted by the rope_scaling when configured: linear divides each by
// factor (HF _compute_linear_scaling_rope_parameters), llama3 as HF
// _compute_llama3_parameters.
func (c Config) RopeInvFreq() []float64 {
	half := c.HeadDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
	}
	rs := c.RopeScaling
	if rs != nil && rs.Type == "linear" {
		for i := range inv {
			inv[i] /= rs.Factor
		}
		return inv
	}
	if rs == nil || rs.Type != "llama3" {
		return inv
	}
	old := float64(rs.OriginalMaxPositionEmbeddings)
	lowWave := old / rs.LowFreqFactor
	highWave := old / rs.HighFreqFactor
	for i, f := range inv {
		wave := 2 * math.Pi / f
		switch {
		case wave < highWave:
			// high frequency: unchanged
		case wave > lowWave:
			inv[i] = f / rs.Factor
		default:
			smooth := (old/wave - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
			inv[i] = (1-smooth)*f/rs.Factor + smooth*f
		}
	}
	return inv
}
