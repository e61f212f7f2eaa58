package convert

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/selectinfer/sinf/format"
)

// K-quant recipes (spec/sinf.md §5.3): which tensors of a q4_k_m, q5_k_m,
// q4_k, q5_k or q6_k file get which dtype, after llama.cpp's llama-quantize
// (src/llama-quant.cpp: llama_tensor_get_type and tensor_type_fallback, for a
// dense llama or qwen2 model without an importance matrix).

// ParseRecipe parses a --dtype value: a weight dtype name of spec §5.1
// (f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k), or q4_k_m /
// q5_k_m, llama-quantize's Q4_K_M and Q5_K_M mixes (mix true, dtype the base
// type). It returns an error naming the value for anything else.
func ParseRecipe(s string) (dt format.DType, mix bool, err error) {
	name, mix := strings.CutSuffix(strings.ToLower(s), "_m")
	if mix && name != "q4_k" && name != "q5_k" {
		return 0, false, fmt.Errorf("unknown dtype %q: the _m mixes are q4_k_m and q5_k_m", s)
	}
	dt, err = format.ParseDType(name)
	if err == nil && dt.Interleaved() {
		return 0, false, fmt.Errorf("dtype %q is a layout: convert with --dtype %s --interleave", s, strings.ToLower(dt.Base().String()))
	}
	if err != nil || !dt.Weight() {
		return 0, false, fmt.Errorf("unknown dtype %q: want f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m or q5_k_m", s)
	}
	return dt, mix, nil
}

// RecipeName is the --dtype spelling of a recipe ("q4_k_m", "q8_0").
func RecipeName(dt format.DType, mix bool) string {
	s := strings.ToLower(dt.String())
	if mix {
		s += "_m"
	}
	return s
}

// moreBits is llama-quantize's use_more_bits: the layers whose attn_v and
// ffn_down a _M mix stores with more bits (the first and last eighth of
// the L layers, and every third one between).
func moreBits(i, L int) bool {
	return i < L/8 || i >= 7*L/8 || (i-L/8)%3 == 2
}

// kFallback is tensor_type_fallback: the dtype a row of cols elements takes
// when it is not whole blocks of dt (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0,
// and F16 when not even the fallback fits), and why (blocksReason; "" when
// dt fits).
func kFallback(cols int, dt format.DType) (format.DType, string) {
	if rowFits(dt, cols) {
		return dt, ""
	}
	to := format.F16
	switch dt {
	case format.Q4_K:
		to = format.Q5_0
	case format.Q5_K:
		to = format.Q5_1
	case format.Q6_K:
		to = format.Q8_0
	}
	if !rowFits(to, cols) {
		to = format.F16
	}
	return to, blocksReason(cols, dt, to)
}

// rowFits reports whether a row of cols elements is whole blocks of dt.
func rowFits(dt format.DType, cols int) bool {
	_, err := dt.RowBytes(cols)
	return err == nil
}

// blocksReason says why a matrix of rows of cols elements is stored as to
// rather than the block dtype dt.
func blocksReason(cols int, dt, to format.DType) string {
	e, _ := dt.Block()
	return fmt.Sprintf("rows of %d are not whole %v blocks of %d, stored %v", cols, dt, e, to)
}

// layerOf returns the layer index of "model.layers.{i}.…", or −1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return -1
	}
	num, _, _ := strings.Cut(rest, ".")
	l, err := strconv.Atoi(num)
	if err != nil {
		return -1
	}
	return l
}

// kquantDType is llama_tensor_get_type for matrix name of shape (rows
// along the last dimension) in a file of K-quant target dt: mix selects the
// _M rules, layers is num_hidden_layers and head says name is the output
// projection (lm_head, or a tied embedding). The result is before the
// overrides of Options and before kFallback.
func kquantDType(name string, shape []int, dt format.DType, mix, head bool, layers int) format.DType {
	cols := shape[len(shape)-1]
	switch {
	case head && (mix || dt == format.Q6_K):
		return outputDType(cols)
	case !mix:
		return dt
	}
	l := layerOf(name)
	v := strings.HasSuffix(name, ".self_attn.v_proj.weight")
	down := strings.HasSuffix(name, ".mlp.down_proj.weight") || strings.HasSuffix(name, ".mlp.down_proj.weight_t")
	if l >= 0 && (v || down) && moreBits(l, layers) {
		return format.Q6_K
	}
	return dt
}

// outputDType is llama-quantize's dtype for the output projection (lm_head,
// or a tied embedding) of rows of cols weights in a Q4_0 file and in every
// K recipe but the pure Q4_K and Q5_K (llama_tensor_get_type): Q6_K, or Q8_0
// when the rows are not whole super-blocks.
func outputDType(cols int) format.DType {
	if cols%format.SuperBlockElems != 0 {
		return format.Q8_0
	}
	return format.Q6_K
}

// Recipe is a --dtype choice: a stored weight dtype, and for Q4_K / Q5_K
// whether it is the _M mix.
type Recipe struct {
	DType format.DType
	Mix   bool
}

// String is the recipe's name as llama.cpp spells it ("Q4_K_M", "Q8_0").
func (r Recipe) String() string { return strings.ToUpper(RecipeName(r.DType, r.Mix)) }

// ID is the recipe's --dtype spelling ("q4_k_m").
func (r Recipe) ID() string { return RecipeName(r.DType, r.Mix) }

// FFNDType is the dtype of the sliced layers' gate_proj and up_proj (the
// metadata's dtype key) in a file of this recipe for a model of hidden
// size hidden: the recipe's dtype, or its fallback (kFallback).
func (r Recipe) FFNDType(hidden int) format.DType {
	if !r.DType.KQuant() {
		return r.DType
	}
	dt, _ := kFallback(hidden, r.DType)
	return dt
}

// slicedName is the name a sliced layer's part ("gate", "up" or "down") is
// stored under (spec §6.2: down_proj as down_proj.weight_t).
func slicedName(layer int, part string) string {
	switch part {
	case "gate":
		return format.GateName(layer)
	case "up":
		return format.UpName(layer)
	}
	return format.DownTName(layer)
}

// slicedDType returns the dtype of a sliced layer's part ("gate", "up" or
// "down") of rows of hidden elements for the recipe of opt, and why, when it
// fell back from what the recipe asks for ("" when it did not; kFallback).
func slicedDType(opt Options, layer int, part string, hidden, layers int) (format.DType, string) {
	if opt.DType == 0 || !opt.DType.KQuant() {
		return opt.DType, ""
	}
	name := slicedName(layer, part)
	return kFallback(hidden, kquantDType(name, []int{0, hidden}, opt.DType, opt.Mix, false, layers))
}

// SlicedDTypes returns the dtypes of a sliced layer's gate_proj/up_proj and
// down_proj.weight_t (rows of hidden) for the recipe of opt (slicedDType).
func SlicedDTypes(opt Options, layer, hidden, layers int) (gateUp, downT format.DType) {
	gateUp, _ = slicedDType(opt, layer, "gate", hidden, layers)
	downT, _ = slicedDType(opt, layer, "down", hidden, layers)
	return
}
