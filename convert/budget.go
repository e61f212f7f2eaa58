package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// ParseBytes parses a size such as "6.5GiB", "800MB", "1G" or "1048576".
// Binary (KiB, MiB, GiB) and decimal (KB, MB, GB) units; K/M/G alone are binary.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
		{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional unit (GiB, MB, ...)", s)
	}
	return int64(v * mult), nil
}

// Plan is the memory estimate of a conversion at a given γ: the predicted
// file size and runtime.EstimateMemory's peak for running it.
type Plan struct {
	Gamma        float64
	FileBytes    int64 // the .sinf file, all of it mapped
	KVBytes      int64 // KV cache: 2 · layers · context · kv_heads · head_dim · 4 (F32) or 2 (F16)
	RuntimeBytes int64 // the rest of the peak: buffers, the tokenizer on the heap, the process
	Memory       runtime.Memory
}

// Total is the predicted peak memory (Memory.Total).
func (p Plan) Total() int64 { return p.FileBytes + p.KVBytes + p.RuntimeBytes }

// Estimate predicts the file size and peak memory of converting ck with opt
// at γ: non-FFN tensors whole, sliced layers kept·3·hidden·s bytes plus their
// index maps, others 3·hidden·N·s (paper Eq. 2); and the peak memory of
// running it (runtime.EstimateMemory) with a KV cache of context positions
// (opt.KVCache's type) filled by one prompt (the worst case) on this
// machine's default threads.
func Estimate(ck *hf.Checkpoint, opt Options, gamma float64, context int) (Plan, error) {
	cfg := ck.Config
	lo, hi, err := ResolveRange(opt.FirstLayer, opt.LastLayer, cfg.Layers, opt.ExplicitRange)
	if err != nil {
		return Plan{}, err
	}
	var nonFFN int64
	ffnLayer := make([]int64, cfg.Layers) // each whole FFN layer's stored bytes
	tied := tiedHead(ck)
	for _, n := range ck.Names() {
		if n == "lm_head.weight" && tied {
			continue // not stored (Convert stores only what the model reads)
		}
		t, _ := ck.Tensor(n)
		b := int64(len(t.Data))
		if opt.DType != 0 {
			b = storedBytes(t, opt, tied, cfg.Layers)
		}
		if l, part := ffnPart(n); part != "" {
			if l >= 0 && l < cfg.Layers {
				ffnLayer[l] += b
			}
			continue
		}
		nonFFN += b + 64
	}
	N := int64(cfg.Intermediate)
	// A sliced layer stores three rows of hidden weights per kept neuron:
	// gate_proj and up_proj in the FFN dtype, down_proj.weight_t in it or,
	// in a K-quant mix, its own (SlicedDTypes).
	ffnDType := opt.DType
	if ffnDType == 0 {
		if t, err := ck.Tensor("model.layers.0.mlp.gate_proj.weight"); err == nil {
			ffnDType = t.DType
		}
	}
	kept := int64(runtime.RoundCount(gamma, cfg.Intermediate))
	file := nonFFN + int64(cfg.Layers)*3*64 + metadataBytes(ck)
	for l := range cfg.Layers {
		if l < lo || l >= hi {
			file += ffnLayer[l]
			continue
		}
		gu, dt := ffnDType, ffnDType
		if ffnDType.KQuant() {
			gu, dt = SlicedDTypes(opt, l, cfg.Hidden, cfg.Layers)
		}
		rowGU, err1 := gu.RowBytes(cfg.Hidden)
		rowD, err2 := dt.RowBytes(cfg.Hidden)
		if err1 != nil || err2 != nil {
			rowGU, rowD = int(ffnLayer[l]/(3*N)), int(ffnLayer[l]/(3*N)) // the layer's own bytes per neuron
		}
		file += kept*int64(2*rowGU+rowD) + kept*4 + 64
	}
	ctx := min(context, cfg.MaxPositions)
	mem := runtime.EstimateMemory(cfg, file, embeddedBytes(ck, "tokenizer.json"), ctx, ctx, kernels.DefaultThreads()).WithKVCache(cfg, opt.KVCache)
	return Plan{Gamma: gamma, FileBytes: file, KVBytes: mem.KV, RuntimeBytes: mem.Total() - file - mem.KV, Memory: mem}, nil
}

// ChooseGamma returns the plan of the largest γ (in steps of 0.01, at least
// δ) whose predicted peak memory fits in budget bytes, or an error giving the
// smallest footprint possible.
func ChooseGamma(ck *hf.Checkpoint, opt Options, budget int64, context int) (Plan, error) {
	var smallest Plan
	for g := 100; g >= 1; g-- {
		gamma := float64(g) / 100
		if gamma < opt.Delta {
			break
		}
		p, err := Estimate(ck, opt, gamma, context)
		if err != nil {
			return Plan{}, err
		}
		if p.Total() <= budget {
			return p, nil
		}
		smallest = p
	}
	h := runtime.HumanBytes
	return Plan{}, fmt.Errorf("memory budget %s is too small: even gamma %.2f needs %s (file %s + KV cache %s + runtime %s); lower --context or --delta",
		h(budget), smallest.Gamma, h(smallest.Total()), h(smallest.FileBytes), h(smallest.KVBytes), h(smallest.RuntimeBytes))
}

// storedBytes is the size of tensor t once converted with opt (StoredDType).
func storedBytes(t format.Tensor, opt Options, tiedHead bool, layers int) int64 {
	dt, _ := StoredDType(t, opt.DType, opt, tiedHead, layers)
	if len(t.Shape) == 0 {
		return int64(dt.Size())
	}
	last := t.Shape[len(t.Shape)-1]
	rb, err := dt.RowBytes(last)
	if err != nil || last == 0 {
		return int64(len(t.Data))
	}
	return int64(t.Elems()/last) * int64(rb)
}

// metadataBytes estimates the metadata block: the embedded JSON files as the
// writer stores them (compacted) plus an allowance for the selection and the
// provenance.
func metadataBytes(ck *hf.Checkpoint) int64 {
	n := int64(1024 + 48*ck.Config.Layers)
	for _, f := range []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} {
		n += embeddedBytes(ck, f)
	}
	return n
}

// embeddedBytes is the size of the checkpoint's JSON file name as the
// writer embeds it (compacted); 0 when it is absent.
func embeddedBytes(ck *hf.Checkpoint, name string) int64 {
	b, err := os.ReadFile(filepath.Join(ck.Dir, name))
	if err != nil {
		return 0
	}
	var c bytes.Buffer
	if json.Compact(&c, b) == nil {
		return int64(c.Len())
	}
	return int64(len(b))
}
