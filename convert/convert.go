package convert

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/recon"
	"github.com/selectinfer/sinf/convert/scores"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// ToolVersion is recorded in the files sinf writes (format.ToolVersion).
const ToolVersion = format.ToolVersion

// Options configures Convert. Defaults are the paper's Table 1.
type Options struct {
	Gamma, Delta          float64      // fractions of N kept (γ) and kept as base (δ)
	FirstLayer, LastLayer int          // layer range flags (see ResolveRange)
	ExplicitRange         bool         // the range was given by the user
	DType                 format.DType // stored weight dtype (0: the checkpoint's); see StoredDType
	Mix                   bool         // with DType Q4_K or Q5_K: llama-quantize's Q4_K_M / Q5_K_M mix (kquant.go)
	HeadDType             format.DType // lm_head, or the tied embedding (0: StoredDType's default)
	EmbedDType            format.DType // an untied model.embed_tokens (0: StoredDType's default)
	Random                bool         // keep a random γ·N (no scores needed)
	Seed                  uint64       // for Random
	// WeightAware ranks neurons by s_n·‖W_down[:,n]‖₂ instead of s_n: the
	// neuron's contribution Σ_t |a_n(t)|·‖W_down[:,n]‖ to the layer's output,
	// of both the task and the model scores (a per-neuron constant, so
	// scaling the merged scores equals scoring that way while profiling).
	WeightAware     bool
	TaskScores      *scores.File
	ModelScores     *scores.File
	TaskScoresPath  string
	ModelScoresPath string
	// Reconstruct makes the kept neurons stand in for the dropped ones
	// (package recon): a calibration pass over its prompts once the kept
	// sets are known, then a bias and/or refitted kept columns per layer.
	Reconstruct Reconstruct
	// Sketch stores, for every sliced layer, the SK2 2-bit sketch of its
	// up_proj rows (spec §6.2 up_proj.sketch) that GateFirst's predictor
	// reads per token; hidden_size must be a multiple of 32.
	Sketch bool
	// Interleave stores the Q8_0/Q4_0 matrices a decode step reads whole
	// (attention projections, the head, tied or not, unless it is Q6_K (a
	// Q4_0 file's head whose rows are whole 256-blocks), the FFN of layers outside
	// the sliced range, and the sliced layers' gate_proj, which gatefirst
	// reads whole) with their rows interleaved by sixteen (Q8_0X16,
	// Q4_0X16; spec §5.4), the layout of the CPU's AVX512-VNNI kernels.
	Interleave bool
	// KVCache is the KV cache type the memory estimate assumes (Estimate,
	// ChooseGamma: sinf-run's --kv-cache): format.F32 (also 0) or F16.
	KVCache  format.DType
	Progress io.Writer // progress bar destination; nil: none
}

// Reconstruct configures Options.Reconstruct.
type Reconstruct struct {
	Method  recon.Method // None: plain slices
	Prompts [][]int      // calibration prompts, token ids (the profile split of Tasks)
	// Load, when Prompts is nil, reads them once the inputs are checked
	// (so that a bad score file or output path is reported first).
	Load    func() ([][]int, error)
	Tasks   []string // the datasets Prompts came from, recorded in the file
	Threads int      // kernel threads of the calibration pass (≤ 0: the default)
	// Generate is how many tokens the unsliced model samples after each
	// prompt (temperature 1, seed ReconstructSeed, no stop token; within the model's
	// context), calibrated on with the prompts: the model's own text, which
	// the prompts alone under-represent (DefaultReconstructGenerate).
	Generate int
}

// DefaultReconstructGenerate is the default Reconstruct.Generate. Measured
// on the shared models, every layer sliced at γ 0.7 with both, calibrated on
// the whole TinyStories profile split (sinf eval --mode dense: eval half,
// 300 windows, TinyStories perplexity): 0 → 64 tokens moved
// tinystories-656k 59.90 → 58.19, stories260k 13.43 → 13.28 and
// babyllama-936k 3.533 → 3.521; 128 tokens gave 58.39 on the first, and
// temperature 0.7 58.57, continuing only the first 100 or 400 prompts
// 59.41 or 58.99. Calibrating on other datasets' profile splits instead
// helped less (tinystories with wikitext2 and xsum: 58.99; with five more:
// 59.64).
const DefaultReconstructGenerate = 64

// ReconstructSeed seeds the sampler of Reconstruct.Generate, so that a conversion
// is reproducible.
const ReconstructSeed = 1

// continuations returns each prompt followed by the tokens the model of s
// samples after it, and how many: gen, or fewer where the context is shorter
// (the prompt cut to leave them room).
func continuations(s *runtime.Session, prompts [][]int, gen int) ([][]int, int, error) {
	gen = min(gen, s.Context()-1)
	if gen <= 0 {
		return prompts, 0, nil
	}
	smp := runtime.NewSampler(1, 0, 1, ReconstructSeed)
	out := make([][]int, len(prompts))
	for i, p := range prompts {
		p = p[:min(len(p), s.Context()-gen)]
		if len(p) == 0 {
			continue
		}
		s.Reset()
		res, err := s.Generate(p, runtime.GenerateOptions{MaxTokens: gen, Sampler: smp})
		if err != nil {
			return nil, 0, fmt.Errorf("calibration prompt %d: %w", i, err)
		}
		out[i] = append(slices.Clip(p), res.IDs...)
	}
	return out, gen, nil
}

// DefaultOptions returns the paper's defaults: γ 0.7, δ 0.3, layers 5 … −2.
func DefaultOptions() Options {
	return Options{Gamma: 0.7, Delta: 0.3, FirstLayer: 5, LastLayer: -2}
}

// Fallback is a tensor stored in another dtype than the recipe asks for:
// its name and shape as stored, and why ("rows of 576 are not whole Q4_K
// blocks of 256, stored Q5_0").
type Fallback struct {
	Tensor string
	Shape  []int
	Reason string
}

// String is "NAME [SHAPE]: REASON".
func (f Fallback) String() string { return fmt.Sprintf("%s %v: %s", f.Tensor, f.Shape, f.Reason) }

// Report describes a finished conversion.
type Report struct {
	Path           string
	Bytes          int64 // file size
	SourceBytes    int64 // bytes of the source's weight tensors
	Layers         []format.LayerSelection
	First, Last    int // resolved range [First, Last)
	StoredParams   int64
	OriginalParams int64
	// Fallbacks lists the tensors stored in another dtype than asked for,
	// with the reason (rows that are not whole blocks of a block dtype).
	Fallbacks []Fallback
	// Ignored lists the source tensors not stored, with the reason
	// (hf.Checkpoint.Validate): a tied model's lm_head, a RoPE buffer.
	Ignored []string
	// Warnings are sentences for the user, each naming its file: a
	// tokenizer that is probably broken (tokenizer.Warnings), and what was
	// skipped (hf.Checkpoint.Warnings: tensors the architecture does not
	// have, after the folder's name).
	Warnings []string
	// Fits holds each sliced layer's reconstruction (Options.Reconstruct;
	// nil without one).
	Fits map[int]*recon.Fit
}

// Convert writes ck as a .sinf file at out, slicing the FFN layers of the
// range. It streams tensor by tensor (one output tensor in memory at a time)
// and writes through a temporary file renamed on success, so a failed
// conversion leaves no partial file and any old file intact.
//
// A weight file of ck truncated or replaced while it is read (a memory
// fault on its mapping) is an error naming the folder, not a crash.
func Convert(ck *hf.Checkpoint, out string, opt Options) (_ *Report, err error) {
	defer hf.CatchFault(ck.Dir, &err)()
	cfg := ck.Config
	N, H := cfg.Intermediate, cfg.Hidden
	if !(opt.Gamma > 0 && opt.Gamma <= 1) {
		return nil, fmt.Errorf("gamma %g outside (0, 1]", opt.Gamma)
	}
	if !(opt.Delta >= 0 && opt.Delta <= opt.Gamma) {
		return nil, fmt.Errorf("delta %g outside [0, gamma %g]", opt.Delta, opt.Gamma)
	}
	if runtime.RoundCount(opt.Gamma, N) < 1 {
		return nil, fmt.Errorf("gamma %g keeps round(gamma·N) = 0 of N=%d neurons: raise gamma", opt.Gamma, N)
	}
	lo, hi, err := ResolveRange(opt.FirstLayer, opt.LastLayer, cfg.Layers, opt.ExplicitRange)
	if err != nil {
		return nil, err
	}
	if err := checkOut(out, ck, opt.TaskScoresPath, opt.ModelScoresPath); err != nil {
		return nil, err
	}
	// The whole model the runtime will load, checked before anything is
	// written; only the tensors it reads are stored (ck.Ignored says why the
	// others are left out).
	used, err := ck.Validate()
	if err != nil {
		return nil, err
	}
	dtype := opt.DType
	if opt.EmbedDType != 0 && (tiedHead(ck) || !ck.Has("model.embed_tokens.weight")) {
		return nil, fmt.Errorf("%s: --embed-dtype: the embedding is tied to the output projection (%s), so it is stored as the head: use --head-dtype", ck.Dir, ck.Config.TieNote())
	}
	if opt.Sketch && H%format.BlockElems != 0 {
		return nil, fmt.Errorf("%s: --predictor sketch: hidden_size %d is not a multiple of %d, so no up_proj row fits SK2 blocks", ck.Dir, H, format.BlockElems)
	}
	if _, ok := format.InterleavedOf(dtype); opt.Interleave && !ok {
		return nil, fmt.Errorf("--interleave: the interleaved layouts (spec §5.4) are Q8_0's and Q4_0's; convert with --dtype q8_0 or q4_0, not %v", dtype)
	}
	if dtype.Quantized() && H%format.BlockElems != 0 {
		return nil, fmt.Errorf("%s: hidden_size %d is not a multiple of %d, so no FFN row fits %v blocks: use --dtype f16", ck.Dir, H, format.BlockElems, dtype)
	}
	meta := format.Metadata{
		Config:           ck.ConfigJSON,
		GenerationConfig: ck.GenerationConfig,
		Selection: &format.Selection{Gamma: opt.Gamma, Delta: opt.Delta, FirstLayer: lo, LastLayer: hi,
			Random: opt.Random, Seed: int64(opt.Seed), WeightAware: opt.WeightAware && !opt.Random},
		Provenance: format.Provenance{Source: ck.Dir, SourceDigest: "sha256:" + ck.Digest(),
			ToolVersion: ToolVersion, Created: time.Now().UTC().Format(time.RFC3339)},
	}
	if meta.Tokenizer, err = format.ReadRegularFile(filepath.Join(ck.Dir, "tokenizer.json")); err != nil {
		return nil, fmt.Errorf("%s: the tokenizer is embedded in the .sinf file: %w", ck.Dir, err)
	}
	if tc, err := format.ReadRegularFile(filepath.Join(ck.Dir, "tokenizer_config.json")); err == nil {
		meta.TokenizerConfig = tc
	}
	// The runtime builds the tokenizer from these bytes: refuse now what it
	// would refuse (an unsupported component, a regex that backtracks
	// catastrophically) rather than write a file that does not run.
	tok, err := tokenizer.New(ck.Dir, meta.Tokenizer, meta.TokenizerConfig)
	if err != nil {
		return nil, err
	}

	// Kept neurons per layer in range.
	kept := map[int][]int32{}
	rep := &Report{}
	if !opt.Random {
		if opt.TaskScores == nil || opt.ModelScores == nil {
			return nil, errors.New("task and model score files are needed (or --random)")
		}
		if err := CheckScores(ck, opt.TaskScores, opt.ModelScores, opt.TaskScoresPath, opt.ModelScoresPath); err != nil {
			return nil, err
		}
		meta.Provenance.TaskScores = scoresRef(opt.TaskScores, opt.TaskScoresPath)
		meta.Provenance.ModelScores = scoresRef(opt.ModelScores, opt.ModelScoresPath)
	}
	for l := lo; l < hi; l++ {
		var k []int32
		var base int
		if opt.Random {
			k, base = SelectRandom(N, opt.Gamma, opt.Delta, opt.Seed, l)
		} else if k, base, err = selectLayer(ck, opt, l, N); err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		kept[l] = k
		meta.Selection.Layers = append(meta.Selection.Layers, format.LayerSelection{Layer: l, Kept: len(k), Base: base})
	}
	var fits map[int]*recon.Fit
	if r := &opt.Reconstruct; r.Method != recon.None && r.Prompts == nil && r.Load != nil {
		if r.Prompts, err = r.Load(); err != nil {
			return nil, err
		}
	}
	if opt.Reconstruct.Method != recon.None {
		if fits, meta.Selection.Reconstruction, err = Calibrate(ck, kept, lo, hi, opt.Reconstruct); err != nil {
			return nil, err
		}
		rep.Fits = fits
	}
	if opt.Sketch && hi > lo {
		meta.Selection.Predictor = "up_sketch"
	}

	var names []string
	for _, n := range orderedNames(ck.Names()) {
		if used[n] {
			names = append(names, n)
		}
	}
	first, _ := ck.Tensor(names[0]) // Validate found the embedding at least
	if dtype == 0 {
		dtype = first.DType
		for _, n := range names {
			if t, _ := ck.Tensor(n); strings.HasSuffix(n, "mlp.gate_proj.weight") {
				dtype = t.DType
				break
			}
		}
	}
	meta.DType = dtype
	if dtype.KQuant() {
		// The sliced layers' gate_proj and up_proj dtype: the target, or its
		// fallback when hidden is not whole super-blocks.
		meta.DType, _ = SlicedDTypes(opt, 0, H, cfg.Layers)
	}
	for _, n := range ck.Names() {
		t, _ := ck.Tensor(n)
		meta.Provenance.SourceBytes += int64(len(t.Data))
	}

	w, err := format.Create(out, meta, 0)
	if err != nil {
		return nil, err
	}
	defer w.Abort() // no-op after a successful Close
	var bar *progressbar.ProgressBar
	if opt.Progress != nil {
		bar = progressbar.NewOptions(len(names), progressbar.OptionSetWriter(opt.Progress),
			progressbar.OptionSetDescription("converting"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
	}
	rep.Path, rep.First, rep.Last, rep.Layers, rep.Ignored = out, lo, hi, meta.Selection.Layers, ck.Ignored
	rep.Warnings = tok.Warnings()
	for _, w := range ck.Warnings {
		rep.Warnings = append(rep.Warnings, ck.Dir+": "+w)
	}
	for _, name := range names {
		t, err := ck.Tensor(name)
		if err != nil {
			return nil, err
		}
		rep.SourceBytes += int64(len(t.Data))
		rep.OriginalParams += int64(t.Elems())
		layer, part := ffnPart(name)
		k, sliced := kept[layer]
		switch {
		case sliced && part != "":
			sdt := dtype
			if x, ok := format.InterleavedOf(dtype); ok && opt.Interleave && part == "gate" {
				sdt = x // read whole by gatefirst (spec §5.4)
			}
			if dtype.KQuant() {
				var why string
				if sdt, why = slicedDType(opt, layer, part, H, cfg.Layers); why != "" {
					rep.Fallbacks = append(rep.Fallbacks, Fallback{Tensor: slicedName(layer, part), Shape: []int{len(k), H}, Reason: why})
				}
			}
			if err := writeSliced(w, t, part, k, N, H, sdt, fits[layer], &rep.StoredParams); err != nil {
				return nil, err
			}
			if part == "up" && opt.Sketch {
				if err := writeSketch(w, t, layer, k, H); err != nil {
					return nil, err
				}
			}
		default:
			rep.StoredParams += int64(t.Elems())
			dt, why := StoredDType(t, dtype, opt, tiedHead(ck), cfg.Layers)
			if why != "" {
				rep.Fallbacks = append(rep.Fallbacks, Fallback{Tensor: t.Name, Shape: t.Shape, Reason: why})
			}
			if err := writeCast(w, t, dt); err != nil {
				return nil, err
			}
		}
		ck.Release(name) // drop the source pages from resident memory
		if bar != nil {
			bar.Add(1)
		}
	}
	for l := lo; l < hi; l++ {
		idx := make([]byte, 4*len(kept[l]))
		for j, n := range kept[l] {
			binary.LittleEndian.PutUint32(idx[4*j:], uint32(n))
		}
		if err := w.AddTensor(format.IndexName(l), format.I32, []int{len(kept[l])}, idx); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}

	fi, err := os.Stat(out)
	if err != nil {
		return nil, err
	}
	rep.Bytes = fi.Size()
	return rep, nil
}

// checkOut refuses an output path that is one of the conversion's inputs:
// a score file, or a file of the source checkpoint.
func checkOut(out string, ck *hf.Checkpoint, inputs ...string) error {
	fo, err := os.Stat(out)
	if err != nil {
		return nil // a new file
	}
	if fo.IsDir() {
		return fmt.Errorf("--out %s is a folder; give a file name", out)
	}
	if entries, err := os.ReadDir(ck.Dir); err == nil {
		for _, e := range entries {
			inputs = append(inputs, filepath.Join(ck.Dir, e.Name()))
		}
	}
	for _, in := range inputs {
		if fi, err := os.Stat(in); err == nil && in != "" && os.SameFile(fo, fi) {
			return fmt.Errorf("--out %s is an input of this conversion (%s): choose another path", out, in)
		}
	}
	return nil
}

// CheckScores checks that the task and model score files fit ck and their
// roles, so that commands can check them before any work: each was profiled
// on this model (scores.ModelDigest: config and FFN shapes) with a score per
// layer, and the task file holds one task (the task ranking of paper §3.2; a
// file merged across tasks there means the two were swapped). Errors name
// the file.
func CheckScores(ck *hf.Checkpoint, task, model *scores.File, taskPath, modelPath string) error {
	digest := scores.ModelDigest(ck.ConfigJSON, ffnShapes(ck))
	for _, s := range []struct {
		f    *scores.File
		path string
	}{{task, taskPath}, {model, modelPath}} {
		if s.f.ModelDigest != digest {
			return fmt.Errorf("%s: scores of model %s, but %s is model %s", s.path, s.f.ModelDigest, ck.Dir, digest)
		}
		if len(s.f.Scores) != ck.Config.Layers {
			return fmt.Errorf("%s: %d layers of scores for a model of %d", s.path, len(s.f.Scores), ck.Config.Layers)
		}
	}
	if ts := task.Tasks(); len(ts) > 1 {
		swapped := ""
		if len(model.Tasks()) == 1 {
			swapped = "; the model scores " + modelPath + " hold one: were --task-scores and --model-scores swapped?"
		}
		return fmt.Errorf("%s: task scores merged across %d tasks (%s): the task ranking is one task's profiles (sinf merge of that task's files)%s",
			taskPath, len(ts), strings.Join(ts, ", "), swapped)
	}
	return nil
}

func scoresRef(f *scores.File, path string) *format.ScoresRef {
	d, _ := format.DigestFiles(path)
	return &format.ScoresRef{Path: path, Digest: d, Task: f.Task, Tasks: f.Tasks(),
		InputTokens: f.InputTokens, GeneratedTokens: f.GeneratedTokens}
}

// ffnShapes lists the FFN tensors' shapes, the model identity of score files.
func ffnShapes(ck *hf.Checkpoint) map[string][]int {
	out := map[string][]int{}
	for _, n := range ck.Names() {
		if _, part := ffnPart(n); part != "" {
			t, _ := ck.Tensor(n)
			out[n] = t.Shape
		}
	}
	return out
}

// FFNShapes is ffnShapes for callers outside the package (the profiler).
func FFNShapes(ck *hf.Checkpoint) map[string][]int { return ffnShapes(ck) }

// ffnPart parses "model.layers.N.mlp.{gate,up,down}_proj.weight".
func ffnPart(name string) (layer int, part string) {
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return -1, ""
	}
	num, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return -1, ""
	}
	l, err := strconv.Atoi(num)
	if err != nil {
		return -1, ""
	}
	switch rest {
	case "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight":
		return l, rest[4 : len(rest)-len("_proj.weight")]
	}
	return l, ""
}

// orderedNames sorts tensor names into the order a forward pass reads them:
// the embeddings first; then layer by layer, each layer's tensors in
// execution order (input_layernorm, q, k, v, o, post_attention_layernorm,
// gate, up, down; any others after them by name); then the final norm and
// the head. Decode then streams the file front to back, so the prefetchers
// run on from one matrix into the next.
func orderedNames(names []string) []string {
	out := append([]string(nil), names...)
	type key struct {
		layer, rank int
		name        string
	}
	keyOf := func(n string) key {
		if rest, ok := strings.CutPrefix(n, "model.layers."); ok {
			num, tail, _ := strings.Cut(rest, ".")
			if l, err := strconv.Atoi(num); err == nil {
				r := len(layerOrder)
				for i, p := range layerOrder {
					if strings.HasPrefix(tail, p) {
						r = i
						break
					}
				}
				return key{l, r, tail}
			}
		}
		switch {
		case strings.Contains(n, "embed"):
			return key{-1, 0, n}
		case strings.HasPrefix(n, "model.norm."):
			return key{math.MaxInt, 0, n}
		case strings.HasPrefix(n, "lm_head."):
			return key{math.MaxInt, 1, n}
		}
		return key{math.MaxInt, 2, n}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := keyOf(out[i]), keyOf(out[j])
		if a.layer != b.layer {
			return a.layer < b.layer
		}
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.name < b.name
	})
	return out
}

// layerOrder lists a layer's tensor name prefixes in the order the forward
// pass reads them (HF Llama / Qwen2 names; a prefix covers weight and bias).
var layerOrder = []string{
	"input_layernorm.", "self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.", "self_attn.o_proj.",
	"post_attention_layernorm.", "mlp.gate_proj.", "mlp.up_proj.", "mlp.down_proj.",
}

// tiedHead reports whether ck's model.embed_tokens.weight is also its output
// projection: a tied model that stores it (any lm_head.weight beside it is
// ignored, as HF ties them; spec §6.1).
func tiedHead(ck *hf.Checkpoint) bool {
	return ck.Config.TieEmbeddings && ck.Has("model.embed_tokens.weight")
}

// StoredDType returns the dtype a whole (not sliced) tensor t is stored in
// when the target dtype is target, in a model of layers layers, and why,
// when that is not what was asked for. Non-float tensors keep their dtype.
// With an element target (F32, F16, BF16) every float tensor takes it. With
// a K-quant target (Q4_K, Q5_K, Q6_K; opt.Mix for the _M mixes) the dtype is
// llama-quantize's for that recipe (kquant.go, spec §5.3), its fallbacks for
// rows that are not whole super-blocks included. With Q5_0 or Q5_1 every
// matrix takes it. With a block target (Q8_0, Q4_0) the
// default is what llama.cpp's llama-quantize gives for the same type
// (llama_tensor_get_type, without an importance matrix): 1-D tensors (norms,
// biases) stay F32; every matrix takes the target, except that the output
// projection (lm_head, or the embedding of a tied model, tiedHead) of a
// Q4_0 file is Q6_K, or Q8_0 where its rows are not whole 256-weight
// super-blocks, as llama-quantize writes it (outputDType). opt.HeadDType and
// opt.EmbedDType (an untied embedding) override that. A matrix whose rows
// are not whole blocks falls back to F16, as llama-quantize does, and why
// says so.
func StoredDType(t format.Tensor, target format.DType, opt Options, tiedHead bool, layers int) (dt format.DType, why string) {
	dt = outDType(t, target)
	if !target.Quantized() || dt != target {
		return dt, ""
	}
	if len(t.Shape) < 2 {
		return format.F32, ""
	}
	head := t.Name == "lm_head.weight" || tiedHead && t.Name == "model.embed_tokens.weight"
	if target.KQuant() {
		dt = kquantDType(t.Name, t.Shape, target, opt.Mix, head, layers)
		switch {
		case head && opt.HeadDType != 0:
			dt = opt.HeadDType
		case !head && t.Name == "model.embed_tokens.weight" && opt.EmbedDType != 0:
			dt = opt.EmbedDType
		}
		if dt.KQuant() {
			return kFallback(t.Shape[len(t.Shape)-1], dt)
		}
	}
	switch {
	case head && opt.HeadDType != 0:
		dt = opt.HeadDType
	case head && target == format.Q4_0:
		dt = outputDType(t.Shape[len(t.Shape)-1])
	case !head && t.Name == "model.embed_tokens.weight" && opt.EmbedDType != 0:
		dt = opt.EmbedDType
	}
	if cols := t.Shape[len(t.Shape)-1]; !rowFits(dt, cols) {
		return format.F16, blocksReason(cols, dt, format.F16)
	}
	// A matrix a step reads whole, interleaved when asked (spec §5.4): not
	// an untied embedding, of which a step reads single rows; a head tied to
	// it is read whole, and its lookups decode one row from its group.
	if x, ok := format.InterleavedOf(dt); ok && opt.Interleave && len(t.Shape) == 2 && (head || t.Name != "model.embed_tokens.weight") {
		dt = x
	}
	return dt, ""
}

// outDType is the stored dtype: float tensors take the target dtype.
func outDType(t format.Tensor, target format.DType) format.DType {
	switch t.DType {
	case format.F32, format.F16, format.BF16:
		return target
	}
	return t.DType
}

// chunkElems is how many elements writeCast converts at a time.
const chunkElems = 1 << 18

// writeCast streams t into w re-encoded as dtype, chunkElems elements at a
// time, so converting a tensor costs no more than a chunk of memory.
func writeCast(w *format.Writer, t format.Tensor, dtype format.DType) error {
	if dtype.Interleaved() {
		return writeInterleaved(w, t, dtype)
	}
	out, err := w.BeginTensor(t.Name, dtype, t.Shape)
	if err != nil {
		return err
	}
	if t.DType == dtype {
		if _, err := out.Write(t.Data); err != nil {
			return err
		}
		return w.EndTensor()
	}
	es := t.DType.Size()
	chunkBytes, err := dtype.RowBytes(chunkElems) // chunkElems is whole blocks, and so is every row
	if err != nil {
		return fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	buf := make([]byte, chunkBytes)
	for lo := 0; lo < len(t.Data); lo += chunkElems * es {
		part := format.Tensor{Name: t.Name, DType: t.DType, Data: t.Data[lo:min(lo+chunkElems*es, len(t.Data))]}
		part.Shape = []int{len(part.Data) / es}
		f, err := part.ToF32()
		if err != nil {
			return err
		}
		var enc []byte
		if dtype.Quantized() {
			if enc, err = format.Quantize(buf[:0], f, dtype); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
		} else if enc, err = encode(buf[:0], f, dtype); err != nil {
			var oe overflowError
			if errors.As(err, &oe) {
				return fmt.Errorf("tensor %s %v: element %d is %g, outside the %v range (±%g), so it would be stored as ±Inf: convert with --dtype bf16 or f32", t.Name, t.Shape, lo/es+oe.i, oe.v, dtype, maxF16)
			}
			return err
		}
		if _, err := out.Write(enc); err != nil {
			return err
		}
	}
	return w.EndTensor()
}

// maxF16 is the largest finite F16 value.
const maxF16 = 65504.0

// overflowError is encode's error for a finite value that F16 cannot hold.
type overflowError struct {
	i int     // element index in the chunk
	v float32 // the value
}

func (e overflowError) Error() string { return fmt.Sprintf("element %d: %g overflows F16", e.i, e.v) }

// encode appends float32 values to dst, little-endian in dtype (round to
// nearest even for F16 and BF16). A finite value that rounds to ±Inf in F16
// (|v| ≥ 65520) is an overflowError: the file would hold an Inf that no
// checksum flags.
func encode(dst []byte, f []float32, dtype format.DType) ([]byte, error) {
	for i, v := range f {
		switch dtype {
		case format.F32:
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		case format.F16:
			h := format.F32ToF16(v)
			if h&0x7fff == 0x7c00 && !math.IsInf(float64(v), 0) {
				return dst, overflowError{i, v}
			}
			dst = binary.LittleEndian.AppendUint16(dst, h)
		case format.BF16:
			dst = binary.LittleEndian.AppendUint16(dst, format.F32ToBF16(v))
		}
	}
	return dst, nil
}

// writeSliced stores the kept neurons of one FFN tensor: gate/up rows in kept
// order as [kept, hidden]; down_proj [hidden, N] transposed to [kept, hidden]
// (row j = column kept[j]) under the name down_proj.weight_t.
//
// With a fit (Options.Reconstruct), row j of down_proj.weight_t is column
// kept[j] plus column j of fit.Delta, rounded once to float32 and stored in
// dtype, and the layer's output bias follows it as down_proj.bias (F32).
func writeSliced(w *format.Writer, t format.Tensor, part string, kept []int32, N, H int, dtype format.DType, fit *recon.Fit, params *int64) error {
	es := t.DType.Size()
	var want [2]int
	if part == "down" {
		want = [2]int{H, N}
	} else {
		want = [2]int{N, H}
	}
	if err := t.CheckShape(want[0], want[1]); err != nil {
		return err
	}
	src := make([]byte, len(kept)*H*es)
	if part == "down" {
		for j, n := range kept {
			for h := 0; h < H; h++ {
				copy(src[(j*H+h)*es:(j*H+h+1)*es], t.Data[(h*N+int(n))*es:])
			}
		}
	} else {
		for j, n := range kept {
			copy(src[j*H*es:(j+1)*H*es], t.Data[int(n)*H*es:])
		}
	}
	name := t.Name
	if part == "down" {
		name = strings.TrimSuffix(name, ".weight") + ".weight_t"
	}
	*params += int64(len(kept) * H)
	sliced := format.Tensor{Name: name, DType: t.DType, Shape: []int{len(kept), H}, Data: src}
	if part != "down" || fit == nil {
		return writeCast(w, sliced, dtype)
	}
	if fit.Delta != nil {
		col, err := sliced.ToF32() // [kept, hidden]: row j is column kept[j]
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		K := len(kept)
		for j := 0; j < K; j++ {
			for h := 0; h < H; h++ {
				col[j*H+h] = float32(float64(col[j*H+h]) + fit.Delta[h*K+j])
			}
		}
		sliced = format.Tensor{Name: name, DType: format.F32, Shape: []int{K, H}, Data: f32Bytes(col)}
	}
	if err := writeCast(w, sliced, dtype); err != nil {
		return err
	}
	if fit.Bias == nil {
		return nil
	}
	b := make([]float32, H)
	for h, v := range fit.Bias {
		b[h] = float32(v)
	}
	layer, _ := ffnPart(t.Name)
	return w.AddTensor(format.DownBiasName(layer), format.F32, []int{H}, f32Bytes(b))
}

// writeSketch stores model.layers.{layer}.mlp.up_proj.sketch: the kept rows
// of up_proj t ([N, hidden], in kept order) quantized from float32 to SK2
// (format.Quantize, spec §5.2), [kept, hidden].
func writeSketch(w *format.Writer, t format.Tensor, layer int, kept []int32, H int) error {
	up, err := t.ToF32()
	if err != nil {
		return err
	}
	var data []byte
	for _, n := range kept {
		if data, err = format.Quantize(data, up[int(n)*H:(int(n)+1)*H], format.SK2); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	return w.AddTensor(format.SketchName(layer), format.SK2, []int{len(kept), H}, data)
}

// f32Bytes encodes float32 values little-endian.
func f32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// Calibrate runs the reconstruction's calibration passes and solves each
// sliced layer (recon.Layer.Solve), layer by layer: layer l's statistics
// are taken over r.Prompts on the model whose layers [lo, l) are already
// sliced and reconstructed (in float32, as stored in an F32 file) and whose
// other layers are whole, so each layer is fitted to the inputs it will get
// (the sequential calibration of GPTQ and SparseGPT). The kept sets are
// kept. It returns the fits and the selection's reconstruction record.
// Memory: one layer's statistics at a time (recon.Layer.Bytes) besides the
// model; time: hi − lo prefill passes over the prompts.
func Calibrate(ck *hf.Checkpoint, kept map[int][]int32, lo, hi int, r Reconstruct) (map[int]*recon.Fit, *format.Reconstruction, error) {
	cfg := ck.Config
	N, H := cfg.Intermediate, cfg.Hidden
	m, err := runtime.Load(cfg, ck, runtime.LoadOptions{})
	if err != nil {
		return nil, nil, err
	}
	pool := kernels.NewPool(r.Threads)
	defer pool.Close()
	s := m.NewSession(pool, 0)
	prompts, gen, err := continuations(s, r.Prompts, r.Generate)
	if err != nil {
		return nil, nil, err
	}
	rec := &format.Reconstruction{Bias: r.Method.HasBias(), Refit: r.Method.HasRefit(), Tasks: r.Tasks, Generated: gen}
	fits := map[int]*recon.Fit{}
	for l := lo; l < hi; l++ {
		f32 := func(name string) ([]float32, error) {
			t, err := ck.Tensor(name)
			if err != nil {
				return nil, err
			}
			v, err := t.ToF32()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return v, nil
		}
		down, err := f32(format.DownName(l))
		if err != nil {
			return nil, nil, err
		}
		layer, err := recon.NewLayer(kept[l], down, H, N)
		if err != nil {
			return nil, nil, fmt.Errorf("layer %d: %w", l, err)
		}
		cal := &recon.Calibrator{Layers: map[int]*recon.Layer{l: layer}}
		if err := cal.Run(s, prompts); err != nil {
			return nil, nil, err
		}
		rec.Tokens = cal.Tokens
		fit, err := layer.Solve(r.Method)
		if err != nil {
			return nil, nil, fmt.Errorf("layer %d: %w", l, err)
		}
		fits[l] = fit
		if rec.Refit {
			rec.Ridge = append(rec.Ridge, fit.C)
		}
		// Layer l as the file will hold it, for the passes of the layers
		// after it.
		gate, err := f32(format.GateName(l))
		if err != nil {
			return nil, nil, err
		}
		up, err := f32(format.UpName(l))
		if err != nil {
			return nil, nil, err
		}
		if m.Layers[l].MLP, err = reconstructedMLP(gate, up, down, kept[l], fit, H, N); err != nil {
			return nil, nil, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	return fits, rec, nil
}

// reconstructedMLP builds the sliced layer a file stores (float32): the
// kept rows of gate and up [N, H], the kept columns of down [H, N] plus
// fit.Delta, and fit.Bias.
func reconstructedMLP(gate, up, down []float32, kept []int32, fit *recon.Fit, H, N int) (runtime.MLP, error) {
	K := len(kept)
	g, u, d := make([]float32, K*H), make([]float32, K*H), make([]float32, K*H)
	for j, n := range kept {
		copy(g[j*H:(j+1)*H], gate[int(n)*H:])
		copy(u[j*H:(j+1)*H], up[int(n)*H:])
		for h := 0; h < H; h++ {
			v := float64(down[h*N+int(n)])
			if fit.Delta != nil {
				v += fit.Delta[h*K+j]
			}
			d[j*H+h] = float32(v)
		}
	}
	f := runtime.MLP{Index: kept, Sliced: true}
	var err error
	for _, w := range []struct {
		dst *kernels.Mat
		v   []float32
	}{{&f.Gate, g}, {&f.Up, u}, {&f.DownT, d}} {
		if *w.dst, err = kernels.NewMat(format.Tensor{Name: "reconstructed", DType: format.F32, Shape: []int{K, H}, Data: f32Bytes(w.v)}); err != nil {
			return f, err
		}
	}
	if fit.Bias != nil {
		f.DownBias = make([]float32, H)
		for h, v := range fit.Bias {
			f.DownBias[h] = float32(v)
		}
	}
	return f, nil
}

// selectLayer is Select over layer l's task and model rankings, by the
// scores or (Options.WeightAware) the scores times each neuron's
// ‖W_down[:,n]‖₂.
func selectLayer(ck *hf.Checkpoint, opt Options, l, N int) ([]int32, int, error) {
	task, model := opt.TaskScores.Ranking(l), opt.ModelScores.Ranking(l)
	if opt.WeightAware {
		name := fmt.Sprintf("model.layers.%d.mlp.down_proj.weight", l)
		t, err := ck.Tensor(name)
		if err != nil {
			return nil, 0, err
		}
		w, err := t.ToF32()
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		norm := make([]float64, N) // down_proj is [hidden, N]: neuron n is column n
		for r := 0; r < len(w)/N; r++ {
			for n, v := range w[r*N : (r+1)*N] {
				norm[n] += float64(v) * float64(v)
			}
		}
		scaled := func(f *scores.File) []int32 {
			sc := make([]float64, N)
			for n, v := range f.Scores[l] {
				sc[n] = v * math.Sqrt(norm[n])
			}
			return scores.Rank(sc)
		}
		task, model = scaled(opt.TaskScores), scaled(opt.ModelScores)
	}
	return Select(task, model, N, opt.Gamma, opt.Delta)
}

// writeInterleaved streams the float matrix t into w as the interleaved
// dtype x (spec §5.4), sixteen rows at a time: each group quantized to the
// base dtype, then interleaved; the last rows (fewer than sixteen) stay
// plain rows.
func writeInterleaved(w *format.Writer, t format.Tensor, x format.DType) error {
	if len(t.Shape) != 2 || t.DType.Size() == 0 {
		return fmt.Errorf("tensor %s: %v %v is not a float matrix to store as %v", t.Name, t.DType, t.Shape, x)
	}
	out, err := w.BeginTensor(t.Name, x, t.Shape)
	if err != nil {
		return err
	}
	R, C, es := t.Shape[0], t.Shape[1], t.DType.Size()
	var q, il []byte
	for r0 := 0; r0 < R; r0 += format.InterleaveRows {
		n := min(format.InterleaveRows, R-r0)
		part := format.Tensor{Name: t.Name, DType: t.DType, Shape: []int{n * C}, Data: t.Data[r0*C*es : (r0+n)*C*es]}
		f, err := part.ToF32()
		if err != nil {
			return err
		}
		if q, err = format.Quantize(q[:0], f, x.Base()); err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		enc := q
		if n == format.InterleaveRows {
			il = append(il[:0], q...)
			if err := format.Interleave(il, q, x.Base(), n, C); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			enc = il
		}
		if _, err := out.Write(enc); err != nil {
			return err
		}
	}
	return w.EndTensor()
}
