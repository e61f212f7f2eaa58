package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// DefaultRopeTheta is rope_theta when config.json gives none: HF's
// RotaryEmbeddingConfigMixin.default_theta (transformers
// modeling_rope_utils.py), which LlamaConfig and Qwen2Config keep.
const DefaultRopeTheta = 10000.0

// ropeBlock is one RoPE dict of config.json: rope_scaling (transformers
// before v5) or rope_parameters (v5, which also holds rope_theta and may hold
// partial_rotary_factor). rope_type may be spelled type, as older configs do.
type ropeBlock struct {
	RopeScaling
	LegacyType    string   `json:"type"`
	RopeTheta     *float64 `json:"rope_theta"`
	PartialRotary *float64 `json:"partial_rotary_factor"`
}

// parsedRope is a ropeBlock checked: scaling is nil for rope_type default.
type parsedRope struct {
	scaling *RopeScaling
	theta   *float64
}

// parseRopeBlock reads and checks the RoPE dict in field (rope_scaling or
// rope_parameters); nil when the field is absent or null. As HF's
// standardize_rope_params, rope_type is rope_type, else type, else
// "default". Refused, naming name and field: a dict keyed by layer type (HF
// nested rope_parameters, one RoPE per attention kind), a rope_type other
// than default, linear and llama3, a linear factor that is not positive, a
// llama3 block missing its fields, a rope_theta that is not a positive
// number, and a partial_rotary_factor other than 1 (this runtime rotates the
// whole head).
func parseRopeBlock(name, field string, raw json.RawMessage) (*parsedRope, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("%s: field %s: want an object, found %s", name, field, truncate(raw))
	}
	nested := make([]string, 0, len(keys))
	for k, v := range keys {
		if v = bytes.TrimSpace(v); len(v) > 0 && v[0] == '{' {
			nested = append(nested, k)
		}
	}
	if len(nested) > 0 {
		sort.Strings(nested)
		return nil, fmt.Errorf("%s: field %s: RoPE parameters per layer type (key %q) are not supported", name, field, nested[0])
	}
	var b ropeBlock
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("%s: field %s: %w", name, field, err)
	}
	rs := b.RopeScaling
	if rs.Type == "" {
		rs.Type = b.LegacyType
	}
	p := &parsedRope{theta: b.RopeTheta}
	switch rs.Type {
	case "default", "":
	case "linear":
		if !(rs.Factor > 0) || math.IsInf(rs.Factor, 0) {
			return nil, fmt.Errorf("%s: field %s: linear needs a positive factor, found %g", name, field, rs.Factor)
		}
		p.scaling = &RopeScaling{Type: rs.Type, Factor: rs.Factor}
	case "llama3":
		if rs.Factor <= 0 || rs.LowFreqFactor <= 0 || rs.HighFreqFactor <= rs.LowFreqFactor || rs.OriginalMaxPositionEmbeddings <= 0 {
			return nil, fmt.Errorf("%s: field %s: llama3 needs factor, low_freq_factor < high_freq_factor and original_max_position_embeddings", name, field)
		}
		p.scaling = &rs
	default:
		return nil, fmt.Errorf("%s: field %s: rope_type %q is not supported (supported: default, linear, llama3)", name, field, rs.Type)
	}
	if b.RopeTheta != nil {
		if err := checkTheta(name, field+".rope_theta", *b.RopeTheta); err != nil {
			return nil, err
		}
	}
	if b.PartialRotary != nil && *b.PartialRotary != 1 {
		return nil, fmt.Errorf("%s: field %s.partial_rotary_factor %g is not supported (RoPE on the whole head only: 1)", name, field, *b.PartialRotary)
	}
	return p, nil
}

func checkTheta(name, field string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("%s: field %s %g must be a positive number", name, field, v)
	}
	return nil
}

// truncate shortens a JSON value for a message.
func truncate(raw []byte) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}

// parseRope returns rope_theta and the RoPE scaling (nil: none) of a
// config.json, read as HF's RotaryEmbeddingConfigMixin reads them: from
// rope_parameters (transformers v5), from the top-level rope_theta and
// rope_scaling (older configs), or from both. Where both forms give a value
// they must agree, else the config is refused naming both fields (HF would
// silently prefer one: rope_scaling over rope_parameters, but
// rope_parameters' rope_theta over the top-level one). rope_theta defaults
// to DefaultRopeTheta.
func parseRope(name string, h hfConfig) (float64, *RopeScaling, error) {
	scaling, err := parseRopeBlock(name, "rope_scaling", h.RopeScaling)
	if err != nil {
		return 0, nil, err
	}
	params, err := parseRopeBlock(name, "rope_parameters", h.RopeParameters)
	if err != nil {
		return 0, nil, err
	}
	if h.PartialRotary != nil && *h.PartialRotary != 1 {
		return 0, nil, fmt.Errorf("%s: field partial_rotary_factor %g is not supported (RoPE on the whole head only: 1)", name, *h.PartialRotary)
	}

	type given struct {
		field string
		v     float64
	}
	var thetas []given
	if h.RopeTheta != nil {
		if err := checkTheta(name, "rope_theta", *h.RopeTheta); err != nil {
			return 0, nil, err
		}
		thetas = append(thetas, given{"rope_theta", *h.RopeTheta})
	}
	if params != nil && params.theta != nil {
		thetas = append(thetas, given{"rope_parameters.rope_theta", *params.theta})
	}
	if scaling != nil && scaling.theta != nil {
		thetas = append(thetas, given{"rope_scaling.rope_theta", *scaling.theta})
	}
	theta := DefaultRopeTheta
	for i, t := range thetas {
		if i == 0 {
			theta = t.v
		} else if t.v != theta {
			return 0, nil, fmt.Errorf("%s: fields %s (%g) and %s (%g) disagree", name, thetas[0].field, theta, t.field, t.v)
		}
	}

	switch {
	case scaling == nil && params == nil:
		return theta, nil, nil
	case params == nil:
		return theta, scaling.scaling, nil
	case scaling == nil:
		return theta, params.scaling, nil
	}
	a, b := scaling.scaling, params.scaling
	if (a == nil) != (b == nil) || (a != nil && *a != *b) {
		return 0, nil, fmt.Errorf("%s: fields rope_scaling (%s) and rope_parameters (%s) disagree", name, a.describe(), b.describe())
	}
	return theta, b, nil
}

// describe names a scaling for messages: "rope_type default",
// "rope_type linear, factor 4", "rope_type llama3, factor 32, …".
func (r *RopeScaling) describe() string {
	switch {
	case r == nil:
		return "rope_type default"
	case r.Type == "linear":
		return fmt.Sprintf("rope_type linear, factor %g", r.Factor)
	}
	return fmt.Sprintf("rope_type %s, factor %g, low_freq_factor %g, high_freq_factor %g, original_max_position_embeddings %d",
		r.Type, r.Factor, r.LowFreqFactor, r.HighFreqFactor, r.OriginalMaxPositionEmbeddings)
}
