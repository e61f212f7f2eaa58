package format

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ValidateIndexMap checks a sliced layer's index map (spec §6.2): every entry
// is an original neuron index in [0, n) and no index appears twice (so
// len(idx) ≤ n). The error names the first bad position and value, and for a
// repeat both positions.
func ValidateIndexMap(idx []int32, n int) error {
	if n < 0 {
		return fmt.Errorf("index map: neuron count %d is negative", n)
	}
	if len(idx) > n {
		return fmt.Errorf("index map: %d entries for %d neurons: some repeat", len(idx), n)
	}
	for j, v := range idx {
		if v < 0 || int64(v) >= int64(n) {
			return fmt.Errorf("index map: entry %d is %d, outside [0, %d)", j, v, n)
		}
	}
	// Remember each neuron's first position: densely when n is comparable to
	// len(idx), else in a map, so a huge n (from an untrusted config) costs
	// no more memory than the map itself.
	var first func(v int32, j int) (prev int, dup bool)
	if n <= 4*len(idx)+1024 {
		seen := make([]int32, n) // position+1
		first = func(v int32, j int) (int, bool) {
			if p := seen[v]; p != 0 {
				return int(p - 1), true
			}
			seen[v] = int32(j + 1)
			return 0, false
		}
	} else {
		seen := make(map[int32]int, len(idx))
		first = func(v int32, j int) (int, bool) {
			if p, ok := seen[v]; ok {
				return p, true
			}
			seen[v] = j
			return 0, false
		}
	}
	for j, v := range idx {
		if p, dup := first(v, j); dup {
			return fmt.Errorf("index map: entries %d and %d both name neuron %d", p, j, v)
		}
	}
	return nil
}

// ValidateSelection checks the sliced layout of a model file against its
// metadata (spec §6): config.json's hidden_size, intermediate_size (N) and
// num_hidden_layers; for every layer in the selection, gate_proj, up_proj and
// down_proj.weight_t of shape [kept, hidden], gate_proj and up_proj of one
// weight dtype (metadata dtype when set) and down_proj.weight_t of that or,
// in a K-quant mix (spec §5.3), another weight dtype, no down_proj.weight, a
// valid I32 [kept] neuron_index (ValidateIndexMap), and an optional F32
// [hidden] down_proj.bias, which needs FlagFFNBias; outside the range, no
// sliced tensors. It reads the
// index maps (4·kept bytes per layer) but no weights. A file with no
// selection passes. Errors are *FormatError naming the tensor.
func (f *File) ValidateSelection() error {
	if f.data == nil {
		return fmt.Errorf("%s: %w", f.path, ErrClosed)
	}
	s := f.meta.Selection
	if s == nil {
		return nil
	}
	metaOff := int64(f.MetadataOffset)
	var cfg struct {
		Hidden int `json:"hidden_size"`
		N      int `json:"intermediate_size"`
		Layers int `json:"num_hidden_layers"`
	}
	if len(f.meta.Config) == 0 {
		return errorf(f.path, metaOff, "metadata config", "a file with a selection needs config")
	}
	if err := json.Unmarshal(f.meta.Config, &cfg); err != nil {
		return errorf(f.path, metaOff, "metadata config", "%v", err)
	}
	if cfg.Hidden <= 0 || cfg.N <= 0 || cfg.Layers <= 0 {
		return errorf(f.path, metaOff, "metadata config",
			"hidden_size %d, intermediate_size %d and num_hidden_layers %d must be positive", cfg.Hidden, cfg.N, cfg.Layers)
	}
	if s.LastLayer > cfg.Layers {
		return errorf(f.path, metaOff, "metadata selection",
			"layer range [%d, %d) exceeds num_hidden_layers %d", s.FirstLayer, s.LastLayer, cfg.Layers)
	}
	for _, l := range s.Layers {
		if l.Kept > cfg.N {
			return errorf(f.path, metaOff, "metadata selection",
				"layer %d keeps %d neurons of intermediate_size %d", l.Layer, l.Kept, cfg.N)
		}
		var dt DType
		for _, name := range []string{GateName(l.Layer), UpName(l.Layer), DownTName(l.Layer)} {
			t, err := f.need(name)
			if err != nil {
				return err
			}
			if len(t.Shape) != 2 || t.Shape[0] != l.Kept || t.Shape[1] != cfg.Hidden {
				return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q shape", name),
					"%v, want [%d %d] ([kept, hidden_size])", t.Shape, l.Kept, cfg.Hidden)
			}
			// down_proj.weight_t may differ in a K-quant mix (spec §5.3).
			mixed := name == DownTName(l.Layer)
			switch {
			case !t.DType.Weight():
				return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q dtype", name), "%v is not a weight dtype (F32, F16, BF16 or a block dtype)", t.DType)
			case t.DType.Interleaved() && name != GateName(l.Layer):
				return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q dtype", name), "%v: a sliced layer's up_proj and down_proj.weight_t are whole rows, not interleaved (spec §5.4)", t.DType)
			case mixed:
			case f.meta.DType != 0 && t.DType.Base() != f.meta.DType:
				return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q dtype", name), "%v, metadata dtype is %v", t.DType, f.meta.DType)
			case dt != 0 && t.DType != dt:
				return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q dtype", name), "%v, the layer's gate_proj is %v", t.DType, dt)
			}
			dt = t.DType.Base() // an interleaved gate_proj: up_proj has its base
		}
		if t, ok := f.Info(DownName(l.Layer)); ok {
			return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q", t.Name), "a sliced layer stores down_proj.weight_t, not down_proj.weight")
		}
		if t, ok := f.Info(DownBiasName(l.Layer)); ok {
			switch {
			case t.DType != F32 || len(t.Shape) != 1 || t.Shape[0] != cfg.Hidden:
				return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q", t.Name), "%v %v, want F32 [%d] ([hidden_size])", t.DType, t.Shape, cfg.Hidden)
			case f.Flags&FlagFFNBias == 0:
				return errorf(f.path, offFlags, "flags", "tensor %q is an FFN output bias, which a reader must add, but flag FFN bias (0x%08x) is not set", t.Name, FlagFFNBias)
			}
		}
		if t, ok := f.Info(SketchName(l.Layer)); ok && (t.DType != SK2 || len(t.Shape) != 2 || t.Shape[0] != l.Kept || t.Shape[1] != cfg.Hidden) {
			return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q", t.Name), "%v %v, want SK2 [%d %d] ([kept, hidden_size])", t.DType, t.Shape, l.Kept, cfg.Hidden)
		}
		t, err := f.need(IndexName(l.Layer))
		if err != nil {
			return err
		}
		if t.DType != I32 || len(t.Shape) != 1 || t.Shape[0] != l.Kept {
			return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q", t.Name), "%v %v, want I32 [%d] ([kept])", t.DType, t.Shape, l.Kept)
		}
		view, _ := f.Tensor(t.Name)
		idx, _ := view.I32s()
		if err := ValidateIndexMap(idx, cfg.N); err != nil {
			return errorf(f.path, t.Offset, fmt.Sprintf("tensor %q data", t.Name), "%v", err)
		}
	}
	// Outside the range no tensor is sliced. Walk the directory, not the
	// layers: num_hidden_layers is untrusted and may be huge.
	for _, t := range f.tensors {
		rest, ok := strings.CutPrefix(t.Name, "model.layers.")
		if !ok {
			continue
		}
		num, suffix, ok := strings.Cut(rest, ".")
		if !ok || (suffix != "mlp.down_proj.weight_t" && suffix != "mlp.neuron_index" && suffix != "mlp.up_proj.sketch") {
			continue
		}
		if i, err := strconv.Atoi(num); err != nil || i < s.FirstLayer || i >= s.LastLayer || strconv.Itoa(i) != num {
			return errorf(f.path, t.entryOff, fmt.Sprintf("tensor %q", t.Name),
				"layer %s is outside the selection [%d, %d) but has a sliced tensor", num, s.FirstLayer, s.LastLayer)
		}
	}
	return nil
}

// need returns the named tensor's entry or a *FormatError naming it.
func (f *File) need(name string) (*TensorInfo, error) {
	i, ok := f.byName[name]
	if !ok {
		return nil, errorf(f.path, int64(f.DirectoryOffset), fmt.Sprintf("tensor %q", name), "missing from the directory (%v)", ErrNotFound)
	}
	return &f.tensors[i], nil
}
