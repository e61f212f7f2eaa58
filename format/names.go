package format

import (
	"fmt"
	"strconv"
	"strings"
)

// Tensor names of the FFN of decoder layer i (spec/sinf.md §6). Every other
// tensor keeps its HuggingFace name.

// GateName returns "model.layers.i.mlp.gate_proj.weight": [N, hidden] in a
// whole layer, [kept, hidden] in a sliced one.
func GateName(i int) string { return fmt.Sprintf("model.layers.%d.mlp.gate_proj.weight", i) }

// UpName returns "model.layers.i.mlp.up_proj.weight": [N, hidden] in a whole
// layer, [kept, hidden] in a sliced one.
func UpName(i int) string { return fmt.Sprintf("model.layers.%d.mlp.up_proj.weight", i) }

// DownName returns "model.layers.i.mlp.down_proj.weight", HuggingFace's
// [hidden, N] down projection, present only in whole (unsliced) layers.
func DownName(i int) string { return fmt.Sprintf("model.layers.%d.mlp.down_proj.weight", i) }

// DownTName returns "model.layers.i.mlp.down_proj.weight_t", the transposed
// down projection [kept, hidden] of a sliced layer: row j is column
// neuron_index[j] of HuggingFace's down_proj.
func DownTName(i int) string { return fmt.Sprintf("model.layers.%d.mlp.down_proj.weight_t", i) }

// IndexName returns "model.layers.i.mlp.neuron_index", the I32 [kept] index
// map of a sliced layer: row j holds original neuron neuron_index[j].
func IndexName(i int) string { return fmt.Sprintf("model.layers.%d.mlp.neuron_index", i) }

// DownBiasName returns "model.layers.i.mlp.down_proj.bias", the F32 [hidden]
// output bias a reconstructed sliced layer adds to Σ_j a_j·down_t[j] (spec
// §6.2; the file then sets FlagFFNBias).
func DownBiasName(i int) string { return fmt.Sprintf("model.layers.%d.mlp.down_proj.bias", i) }

// SketchName returns "model.layers.i.mlp.up_proj.sketch", the SK2 [kept,
// hidden] 2-bit sketch of a sliced layer's up_proj rows that GateFirst's
// predictor reads (spec §6.2; optional).
func SketchName(i int) string { return fmt.Sprintf("model.layers.%d.mlp.up_proj.sketch", i) }

// downBiasLayer returns i when name is DownBiasName(i).
func downBiasLayer(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, ".mlp.down_proj.bias")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(num)
	if err != nil || i < 0 || strconv.Itoa(i) != num {
		return 0, false
	}
	return i, true
}
