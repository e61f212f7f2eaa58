package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/eval"
	"github.com/selectinfer/sinf/convert/recon"
	"github.com/selectinfer/sinf/convert/synth"
)

func studyCommand() *cli.Command {
	d := convert.DefaultOptions()
	return &cli.Command{
		Name:  "study",
		Usage: "the paper's grid: convert the files, evaluate every method × task and the φ/γ/δ/layer sweeps; results.json, table.md, figures",
		UsageText: "sinf study --model DIR --task-scores FILE --model-scores FILE [--tasks t1,t2] [--limit N]\n" +
			"   [--first-layer F --last-layer L] [--dtypes q8_0,q4_0] [--data-dir DIR] [--no-sweeps] [--mass] [--figures svg|png|pdf] [--strict] --out DIR",
		Description: "Rows: Dense (the HF folder), γ-Dense (slim file, dense), SelectInfer (slim, selectinfer φ), CoreInfer (γ=1 file,\n" +
			"coreinfer φ), CoreInfer + selective loading (slim, coreinfer), CoreInfer + random loading (random file, coreinfer),\n" +
			"GateFirst (slim, gatefirst at the φ that reads SelectInfer's bytes per token), Oracle (slim, the top φ·N by true |a| per token:\n" +
			"a bound that saves no bytes), γ-Dense with each reconstruction (sinf convert --reconstruct bias|refit|both), and GateFirst and\n" +
			"Oracle on the --reconstruct file.\n" +
			"Sweeps on the first task: φ 0.2…0.7, γ 0.5…1.0 (Fig. 10), δ 0.1…0.4 (Fig. 9), layer ranges (Fig. 8), and the\n" +
			"metric against bytes per decoded token of γ-Dense (over γ), SelectInfer, CoreInfer and GateFirst (over φ): curves.svg.\n" +
			"Evaluations read the eval half of each dataset (sinf eval --split eval); profile the score files on the profile half.\n" +
			"Each evaluation runs as a `sinf eval --json` subprocess, so its peak RSS is that process's own (VmHWM).\n" +
			"Interrupted studies resume: results.json is updated after every run and finished runs are skipped.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "HF checkpoint folder"},
			&cli.StringFlag{Name: "task-scores", Required: true, Usage: "task-level score file (for the slim files)"},
			&cli.StringFlag{Name: "model-scores", Required: true, Usage: "model-level score file"},
			&cli.StringFlag{Name: "tasks", Value: "tinystories", Usage: "comma-separated built-in tasks (the first one is swept)"},
			&cli.IntFlag{Name: "limit", Value: 8, Usage: "examples per run (perplexity: windows; 0: all)"},
			&cli.IntFlag{Name: "first-layer", Value: d.FirstLayer, Usage: "first sliced layer (default 5 … -2, or every layer when that is empty)"},
			&cli.IntFlag{Name: "last-layer", Value: d.LastLayer, Usage: "end of the sliced range, exclusive (≤ 0: from the end)"},
			&cli.Float64Flag{Name: "gamma", Value: d.Gamma, Usage: "gamma of the slim and random files"},
			&cli.Float64Flag{Name: "delta", Value: d.Delta, Usage: "delta of the slim files"},
			&cli.Float64Flag{Name: "phi", Value: 0.4, Usage: "phi of the sparse rows"},
			&cli.Float64Flag{Name: "alpha", Value: 0.2, Usage: "alpha of the sparse rows"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the random-loading and γ=1 files"},
			dataDirFlag(),
			&cli.IntFlag{Name: "threads", Usage: runcmd.ThreadsUsage + "; per run"},
			&cli.IntFlag{Name: "context", Usage: "KV cache positions per run (0: max_position_embeddings, at most 4096)"},
			&cli.BoolFlag{Name: "no-sweeps", Usage: "only the table rows"},
			&cli.BoolFlag{Name: "mass", Usage: "report the activation mass of every sparse run (sinf eval --mass: slower)"},
			&cli.StringFlag{Name: "figures", Value: "svg", Usage: "format of the figures: svg, png or pdf"},
			&cli.StringFlag{Name: "dtypes", Usage: "comma-separated stored dtypes (f32, f16, bf16, q8_0, q4_0) to add as a table: dense, γ-dense and SelectInfer files in each (the paper's Table 4: 70% dense against 4-bit)"},
			&cli.StringFlag{Name: "reconstruct", Value: "both", Usage: "reconstruction of the GateFirst/Oracle reconstructed rows and the reconstructed γ-Dense curve: bias, refit or both (the table has a γ-Dense row of each)"},
			&cli.StringFlag{Name: "reconstruct-data", Value: "tinystories", Usage: "comma-separated built-in datasets whose profile split calibrates the reconstruction"},
			&cli.IntFlag{Name: "reconstruct-limit", Value: 400, Usage: "calibration prompts per dataset (0: the whole profile split)"},
			&cli.IntFlag{Name: "reconstruct-generate", Value: convert.DefaultReconstructGenerate, Usage: "tokens the unsliced model samples after each calibration prompt, calibrated on too (0: the prompts only)"},
			&cli.BoolFlag{Name: "no-reconstruct", Usage: "leave out the reconstructed rows and curve"},
			&cli.BoolFlag{Name: "in-process", Usage: "run the evaluations in this process (peak RSS then includes the study's own)"},
			strictFlag(),
			&cli.StringFlag{Name: "out", Required: true, Usage: "output folder (created; reused to resume)"},
		},
		Action: func(c *cli.Context) error {
			var tasks []string
			for _, t := range strings.Split(c.String("tasks"), ",") {
				if t = strings.TrimSpace(t); t != "" {
					tasks = append(tasks, t)
				}
			}
			if len(tasks) == 0 {
				return errors.New("--tasks: give at least one task")
			}
			if err := checkInts(c, intFlag{"limit", 0, "0: all"}, intFlag{"context", 0, runcmd.ContextZero}); err != nil {
				return err
			}
			if err := runcmd.CheckThreads(c); err != nil {
				return err
			}
			if err := checkHFDir("study", c.String("model")); err != nil {
				return err
			}
			opt := eval.StudyOptions{
				Model: c.String("model"), TaskScores: c.String("task-scores"), ModelScores: c.String("model-scores"),
				Tasks: tasks, Limit: c.Int("limit"), DataDir: dataDir(c), Out: c.String("out"),
				FirstLayer: c.Int("first-layer"), LastLayer: c.Int("last-layer"),
				ExplicitRange: c.IsSet("first-layer") || c.IsSet("last-layer"),
				Gamma:         c.Float64("gamma"), Delta: c.Float64("delta"), Phi: c.Float64("phi"), Alpha: c.Float64("alpha"),
				Seed: c.Uint64("seed"), Threads: c.Int("threads"), Context: c.Int("context"),
				NoSweeps: c.Bool("no-sweeps"), Mass: c.Bool("mass"), Figures: c.String("figures"), Strict: c.Bool("strict"), Log: c.App.ErrWriter,
			}
			for _, d := range strings.Split(c.String("dtypes"), ",") {
				if d = strings.TrimSpace(d); d == "" {
					continue
				}
				dt, mix, err := convert.ParseRecipe(d)
				if err != nil {
					return fmt.Errorf("--dtypes: %w", err)
				}
				opt.DTypes = append(opt.DTypes, convert.Recipe{DType: dt, Mix: mix}) // Study drops repeats
			}
			var err error
			if opt.Reconstruct, err = recon.ParseMethod(c.String("reconstruct")); err != nil || opt.Reconstruct == recon.None {
				return fmt.Errorf("--reconstruct %q: want bias, refit or both (--no-reconstruct leaves the rows out)", c.String("reconstruct"))
			}
			for _, t := range strings.Split(c.String("reconstruct-data"), ",") {
				if t = strings.TrimSpace(t); t != "" {
					opt.ReconstructData = append(opt.ReconstructData, t)
				}
			}
			opt.ReconstructLimit = c.Int("reconstruct-limit")
			if opt.ReconstructLimit == 0 {
				opt.ReconstructLimit = -1 // StudyOptions: < 0 is all
			}
			opt.ReconstructGenerate = c.Int("reconstruct-generate")
			if g := opt.ReconstructGenerate; g < 0 || g > maxReconstructGenerate {
				return fmt.Errorf("--reconstruct-generate %d: want 0 to %d tokens per calibration prompt", g, maxReconstructGenerate)
			}
			if opt.ReconstructGenerate == 0 {
				opt.ReconstructGenerate = -1 // StudyOptions: < 0 is none
			}
			opt.NoReconstruct = c.Bool("no-reconstruct")
			if !c.Bool("in-process") {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("cannot find the sinf binary to run evaluations (use --in-process): %w", err)
				}
				opt.Runner = subprocessRunner(exe)
			}
			if _, err := eval.Study(opt); err != nil {
				return err
			}
			figures := " and the figures"
			if opt.NoSweeps {
				figures = ""
			}
			fmt.Fprintf(c.App.ErrWriter, "wrote %s/results.json and %s/table.md%s\n", opt.Out, opt.Out, figures)
			return nil
		},
	}
}

// subprocessRunner runs each evaluation as `exe eval ... --json --quiet`;
// the peak RSS is the child's own VmHWM.
func subprocessRunner(exe string) eval.Runner {
	return func(path, task string, opt eval.Options) (*eval.Measured, error) {
		f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
		sp := opt.Sparsity
		args := []string{"eval", "--model", path, "--task", task, "--mode", sp.Mode.String(),
			"--limit", strconv.Itoa(opt.Limit), "--data-dir", opt.DataDir,
			"--threads", strconv.Itoa(opt.Threads), "--context", strconv.Itoa(opt.Context),
			"--max-new-tokens", strconv.Itoa(opt.MaxNewTokens), "--window", strconv.Itoa(opt.Window),
			"--stride", strconv.Itoa(opt.Stride), "--json", "--quiet"}
		if sp.Phi > 0 {
			args = append(args, "--phi", f(sp.Phi))
		}
		if sp.Alpha > 0 {
			args = append(args, "--alpha", f(sp.Alpha))
		}
		if opt.Split != "" {
			args = append(args, "--split", string(opt.Split))
		}
		if opt.Offset > 0 {
			args = append(args, "--offset", strconv.Itoa(opt.Offset))
		}
		if opt.Mass {
			args = append(args, "--mass")
		}
		if opt.Strict {
			args = append(args, "--strict")
		}
		cmd := exec.Command(exe, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			msg := strings.TrimSpace(stderr.String())
			if msg == "" {
				msg = err.Error()
			}
			return nil, errors.New(strings.TrimPrefix(msg, "sinf: "))
		}
		var rep eval.Report
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			return nil, fmt.Errorf("sinf eval output: %w", err)
		}
		res := &eval.Result{Task: rep.Task, Kind: rep.Kind, N: rep.N, Metrics: rep.Metrics, Seconds: rep.Seconds, PeakRSS: rep.PeakRSSBytes,
			Tokens: rep.Tokens, Truncated: rep.Truncated, Context: rep.Context, KVBytes: rep.KVCacheBytes, Mass: rep.Mass,
			DecodeBytes: synth.DecodeBytes{Attention: rep.AttentionBytes, FFN: rep.FFNBytes, LMHead: rep.LMHeadBytes}}
		return &eval.Measured{Result: res, FileBytes: rep.FileBytes,
			MemorySource: "measured per run: VmHWM of its own `sinf eval` process (Go runtime, dataset, mapped weights touched, KV cache, buffers)"}, nil
	}
}
