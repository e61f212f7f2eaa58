package main

import (
	"errors"
	"fmt"
	"github.com/selectinfer/sinf/runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/recon"
	"github.com/selectinfer/sinf/convert/scores"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

func convertCommand() *cli.Command {
	d := convert.DefaultOptions()
	return &cli.Command{
		Name:  "convert",
		Usage: "write a slim .sinf file keeping gamma·N FFN neurons per layer in range (base first)",
		UsageText: "sinf convert --model DIR --task-scores FILE --model-scores FILE [--gamma 0.7] [--delta 0.3]\n" +
			"   [--first-layer 5] [--last-layer -2] [--dtype f32|f16|bf16|q8_0|q4_0|q4_k_m|q5_k_m|q4_k|q5_k|q6_k [--head-dtype D] [--embed-dtype D] [--interleave]]\n" +
			"   [--random [--seed S]] [--reconstruct none|bias|refit|both [--reconstruct-data tinystories] [--reconstruct-limit N]]\n" +
			"   [--predictor none|sketch] [--memory-budget 6.5GiB [--context 2048] [--kv-cache f16]] --out FILE.sinf",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "HF checkpoint folder"},
			strictFlag(),
			&cli.StringFlag{Name: "task-scores", Usage: "task-level score file (sinf merge of one task's profiles)"},
			&cli.StringFlag{Name: "model-scores", Usage: "model-level score file (sinf merge across tasks)"},
			&cli.Float64Flag{Name: "gamma", Value: d.Gamma, Usage: "gamma: fraction of each layer's N neurons stored"},
			&cli.Float64Flag{Name: "delta", Value: d.Delta, Usage: "delta: fraction of N stored first as base (static) neurons"},
			&cli.IntFlag{Name: "first-layer", Value: d.FirstLayer, Usage: "first sliced layer (negative: from the end)"},
			&cli.IntFlag{Name: "last-layer", Value: d.LastLayer, Usage: "end of the sliced range, exclusive (≤ 0: from the end)"},
			&cli.StringFlag{Name: "dtype", Usage: "stored weight dtype: f32, f16, bf16, or GGML's block quantizations q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k, " +
				"or llama-quantize's mixes q4_k_m and q5_k_m (default: the checkpoint's); with a block dtype norms stay f32 and, as llama-quantize does, " +
				"the output projection of a q4_0 file is stored higher (q6_k, or q8_0 where its rows are not whole 256-blocks, as llama-quantize does); q4_k_m/q5_k_m follow llama-quantize's Q4_K_M/Q5_K_M rules " +
				"(output projection, v_proj and down_proj of some layers Q6_K) and its fallbacks for rows that are not whole 256-blocks (spec §5.3)"},
			&cli.StringFlag{Name: "head-dtype", Usage: "dtype of lm_head (or of the tied embedding), overriding the --dtype default"},
			&cli.StringFlag{Name: "embed-dtype", Usage: "dtype of an untied model.embed_tokens, overriding the --dtype default"},
			&cli.BoolFlag{Name: "interleave", Usage: "with --dtype q8_0 or q4_0: store the matrices a decode step reads whole (attention, the head, tied or not, unless it is q6_k, the FFN of unsliced layers, the sliced layers' gate_proj, which gatefirst reads whole) with rows interleaved by 16 (Q8_0X16/Q4_0X16, spec §5.4), for the CPU kernels that take a row per register lane (x86-64 AVX2/AVX-VNNI/AVX512-VNNI, arm64 dotprod; an arm64 CPU without dotprod runs portable code, slower than row-major; the CUDA backend refuses them)"},
			&cli.BoolFlag{Name: "random", Usage: "keep a random gamma·N per layer (random-loading baseline; no scores)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed for --random"},
			&cli.BoolFlag{Name: "weight-aware", Usage: "rank neurons by score × ‖down_proj column‖ (their contribution to the output) instead of the score alone"},
			&cli.StringFlag{Name: "reconstruct", DefaultText: "both (none with --random)", Usage: "make the kept neurons stand in for the dropped ones, from a calibration pass over --reconstruct-data: " +
				"bias (the dropped neurons' mean output as an FFN output bias), refit (ridge least-squares refit of the kept down_proj columns), both (the refit with an intercept), none"},
			&cli.StringFlag{Name: "reconstruct-data", Value: "tinystories", Usage: "comma-separated built-in datasets whose profile split calibrates --reconstruct"},
			&cli.IntFlag{Name: "reconstruct-generate", Value: convert.DefaultReconstructGenerate, Usage: "tokens the unsliced model samples after each calibration prompt (temperature 1, fixed seed), calibrated on too: the model's own text (0: the prompts only)"},
			&cli.IntFlag{Name: "reconstruct-limit", Usage: "calibration prompts per dataset (0: the whole profile split)"},
			&cli.StringFlag{Name: "predictor", Value: "none", Usage: "sketch: also store a 2-bit sketch of each sliced layer's up_proj rows (SK2, 10 bytes per 32 weights), " +
				"by which gatefirst ranks the rows per token as |silu(gate)·(sketch·x)|·‖down_proj column‖ instead of the prompt's estimate; none: no sketch"},
			dataDirFlag(),
			&cli.StringFlag{Name: "memory-budget", Usage: "choose the largest gamma whose file + KV cache + runtime fit, e.g. 6.5GiB"},
			&cli.IntFlag{Name: "context", Value: 2048, Usage: "context length assumed by --memory-budget"},
			&cli.StringFlag{Name: "kv-cache", Value: "f32", Usage: "KV cache type assumed by --memory-budget: f32, or f16 (sinf-run --kv-cache f16: half the cache)"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "output .sinf file"},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress bar"},
		},
		Action: func(c *cli.Context) error {
			if err := checkConvertFlags(c); err != nil {
				return err
			}
			if err := checkHFDir("convert", c.String("model")); err != nil {
				return err
			}
			ck, err := hf.Open(c.String("model"))
			if err != nil {
				return err
			}
			defer ck.Close()
			ck.Strict = c.Bool("strict")
			opt := convert.Options{
				Gamma: c.Float64("gamma"), Delta: c.Float64("delta"),
				FirstLayer: c.Int("first-layer"), LastLayer: c.Int("last-layer"),
				ExplicitRange: c.IsSet("first-layer") || c.IsSet("last-layer"),
				Interleave:    c.Bool("interleave"),
				Random:        c.Bool("random"), Seed: c.Uint64("seed"), WeightAware: c.Bool("weight-aware"),
			}
			if showProgress(c) {
				opt.Progress = c.App.ErrWriter
			}
			for _, f := range []struct {
				name string
				dst  *format.DType
			}{{"head-dtype", &opt.HeadDType}, {"embed-dtype", &opt.EmbedDType}} {
				if s := c.String(f.name); s != "" {
					if *f.dst, err = format.ParseDType(s); err != nil || !f.dst.Weight() || f.dst.Interleaved() {
						return fmt.Errorf("--%s %q: want f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_k, q5_k or q6_k", f.name, s)
					}
				}
			}
			if s := c.String("dtype"); s != "" {
				if opt.DType, opt.Mix, err = convert.ParseRecipe(s); err != nil {
					return fmt.Errorf("--dtype: %w", err)
				}
			}
			if (opt.HeadDType != 0 || opt.EmbedDType != 0) && !opt.DType.Quantized() {
				return errors.New("--head-dtype and --embed-dtype go with a block --dtype (q8_0, q4_0, q4_k_m, ...)")
			}
			if !opt.Random {
				if c.String("task-scores") == "" || c.String("model-scores") == "" {
					return errors.New("--task-scores and --model-scores are required (or --random)")
				}
				opt.TaskScoresPath, opt.ModelScoresPath = c.String("task-scores"), c.String("model-scores")
				if opt.TaskScores, err = scores.Read(opt.TaskScoresPath); err != nil {
					return err
				}
				if opt.ModelScores, err = scores.Read(opt.ModelScoresPath); err != nil {
					return err
				}
			}
			switch p := c.String("predictor"); p {
			case "sketch":
				opt.Sketch = true
			case "none":
			default:
				return fmt.Errorf("--predictor: unknown predictor %q (want sketch or none)", p)
			}
			method := c.String("reconstruct")
			if method == "" {
				method = DefaultReconstruct.String()
				if opt.Random {
					method = "none"
				}
			}
			if opt.Reconstruct.Method, err = recon.ParseMethod(method); err != nil {
				return fmt.Errorf("--reconstruct: %w", err)
			}
			for _, t := range strings.Split(c.String("reconstruct-data"), ",") {
				if t = strings.TrimSpace(t); t != "" {
					opt.Reconstruct.Tasks = append(opt.Reconstruct.Tasks, t)
				}
			}
			opt.Reconstruct.Generate = c.Int("reconstruct-generate")
			opt.Reconstruct.Load = func() ([][]int, error) {
				tok, err := tokenizer.Load(c.String("model"))
				if err != nil {
					return nil, err
				}
				p, err := recon.Prompts(opt.Reconstruct.Tasks, dataDir(c), c.Int("reconstruct-limit"), tok)
				return p, dataHint(err, dataDir(c))
			}
			if b := c.String("memory-budget"); b != "" {
				budget, err := convert.ParseBytes(b)
				if err != nil {
					return fmt.Errorf("--memory-budget: %w", err)
				}
				if opt.KVCache, err = runcmd.KVCache(c); err != nil {
					return err
				}
				plan, err := convert.ChooseGamma(ck, opt, budget, c.Int("context"))
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.ErrWriter, "memory budget %s: gamma %.2f (file %s + KV cache %s + runtime %s = %s)\n",
					b, plan.Gamma, human(plan.FileBytes), human(plan.KVBytes), human(plan.RuntimeBytes), human(plan.Total()))
				opt.Gamma = plan.Gamma
			}
			rep, err := convert.Convert(ck, c.String("out"), opt)
			if err != nil {
				return err
			}
			for _, n := range fallbackNotes(rep.Fallbacks) {
				fmt.Fprintf(c.App.ErrWriter, "note: %s\n", n)
			}
			for _, f := range rep.Ignored {
				fmt.Fprintf(c.App.ErrWriter, "note: not stored: %s\n", f)
			}
			for _, f := range rep.Warnings {
				fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", f)
			}
			for l := rep.First; l < rep.Last; l++ {
				if f := rep.Fits[l]; f != nil {
					fmt.Fprintf(c.App.ErrWriter, "layer %d: %s reconstruction, held-out error of the dropped neurons' output %.3f of plain slicing (bias alone %.3f), ridge c %g\n",
						l, opt.Reconstruct.Method, f.HeldOutBest(), f.BiasOnly, f.C)
				}
			}
			fmt.Fprintf(c.App.ErrWriter, "wrote %s: %s (source weights %s, %.1f%%), layers [%d, %d) sliced, %d of %d parameters stored\n",
				rep.Path, human(rep.Bytes), human(rep.SourceBytes), 100*float64(rep.Bytes)/float64(rep.SourceBytes),
				rep.First, rep.Last, rep.StoredParams, rep.OriginalParams)
			return nil
		},
	}
}

// DefaultReconstruct is convert's reconstruction of a file chosen by scores
// (--reconstruct; --random files default to none, the baselines): chosen
// by measurement on the three shared models (README, Fidelity).
const DefaultReconstruct = recon.Both

// human formats a byte count (runcmd.Human).
func human(n int64) string { return runtime.HumanBytes(n) }

// checkConvertFlags refuses flags that the other flags would make convert
// ignore, before anything is read.
func checkConvertFlags(c *cli.Context) error {
	scored := c.IsSet("task-scores") || c.IsSet("model-scores")
	switch {
	case c.Bool("random") && scored:
		return errors.New("--random keeps random neurons and reads no scores: give --random or --task-scores/--model-scores, not both")
	case c.Bool("weight-aware") && c.Bool("random"):
		return errors.New("--weight-aware weighs the scores and --random reads none: drop one")
	case c.IsSet("seed") && !c.Bool("random"):
		return errors.New("--seed seeds --random's choice (the scores choose the neurons otherwise): add --random or drop --seed")
	case (c.IsSet("reconstruct-data") || c.IsSet("reconstruct-limit") || c.IsSet("reconstruct-generate")) && (c.String("reconstruct") == "none" || c.Bool("random") && !c.IsSet("reconstruct")):
		return errors.New("--reconstruct-data, --reconstruct-limit and --reconstruct-generate calibrate --reconstruct: add --reconstruct bias|refit|both or drop them")
	case c.Int("reconstruct-generate") < 0 || c.Int("reconstruct-generate") > maxReconstructGenerate:
		return fmt.Errorf("--reconstruct-generate %d: want 0 to %d tokens per calibration prompt", c.Int("reconstruct-generate"), maxReconstructGenerate)
	case c.IsSet("memory-budget") && c.IsSet("gamma"):
		return errors.New("--memory-budget chooses gamma: give --gamma or --memory-budget, not both")
	case c.IsSet("context") && !c.IsSet("memory-budget"):
		return errors.New("--context is the context --memory-budget sizes the KV cache for: add --memory-budget or drop --context")
	case c.IsSet("kv-cache") && !c.IsSet("memory-budget"):
		return errors.New("--kv-cache is the KV cache type --memory-budget assumes: add --memory-budget or drop --kv-cache")
	case c.Int("context") < 1:
		return fmt.Errorf("--context %d: want ≥ 1, the KV cache positions the budget holds", c.Int("context"))
	}
	return nil
}

// maxReconstructGenerate bounds --reconstruct-generate: each token is a
// decode step of the unsliced model per calibration prompt.
const maxReconstructGenerate = 4096

// fallbackNotes turns convert.Report.Fallbacks into one line per reason, in
// first-seen order: the tensor itself when it is alone, else the count and
// the first tensor, so that a model whose every matrix falls back (hidden 576
// in a K-quant recipe) prints a few lines, not one per tensor (sinf inspect
// --tensors lists each tensor's dtype).
func fallbackNotes(fallbacks []convert.Fallback) []string {
	var reasons []string
	byReason := map[string][]convert.Fallback{}
	for _, f := range fallbacks {
		if _, seen := byReason[f.Reason]; !seen {
			reasons = append(reasons, f.Reason)
		}
		byReason[f.Reason] = append(byReason[f.Reason], f)
	}
	notes := make([]string, len(reasons))
	for i, r := range reasons {
		fs := byReason[r]
		if len(fs) == 1 {
			notes[i] = fs[0].String() + " (as llama-quantize does)"
			continue
		}
		notes[i] = fmt.Sprintf("%d matrices (%s %v, …): %s (as llama-quantize does; sinf inspect --tensors lists them)", len(fs), fs[0].Tensor, fs[0].Shape, r)
	}
	return notes
}
