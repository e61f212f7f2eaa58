package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/convert/eval"
)

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "score a .sinf file or an HF folder on a built-in task (EM/F1, accuracy, BLEU, ROUGE, perplexity), or its perplexity over a text file of your own",
		UsageText: "sinf eval --model FILE.sinf|DIR --task NAME|--file TEXT [--mode selectinfer|dense|coreinfer|gatefirst|oracle] [--phi F] [--alpha A]\n" +
			"   [--limit N] [--split profile|eval|all] [--offset N] [--mass] [--data-dir DIR] [--threads N] [--context N] [--max-new-tokens N] [--window W] [--stride S] [--json]",
		Flags: append(append(runcmd.SparsityFlags(), splitFlags(dataset.SplitEval)...), []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "a .sinf file or an HF checkpoint folder"},
			strictFlag(),
			&cli.StringFlag{Name: "task", Usage: "built-in task: " + strings.Join(dataset.Names(), ", ")},
			&cli.StringFlag{Name: "file", Usage: "instead of --task: the perplexity over this UTF-8 text file (all of it encoded at once, then --window/--stride windows, as llama-perplexity -f)"},
			&cli.IntFlag{Name: "limit", Usage: "evaluate the first N examples (perplexity: N windows; 0: all)"},
			dataDirFlag(),
			&cli.IntFlag{Name: "threads", Usage: runcmd.ThreadsUsage},
			&cli.IntFlag{Name: "context", Usage: "KV cache positions (0: the model's max_position_embeddings, at most 4096)"},
			&cli.IntFlag{Name: "max-new-tokens", Usage: "tokens generated at most (0: 32 for QA, 128 for translation and summarization)"},
			&cli.IntFlag{Name: "window", Usage: "perplexity window in tokens, BOS included (0: min(context, 256))"},
			&cli.IntFlag{Name: "stride", Usage: "perplexity stride in text tokens (0: the window less the BOS, no overlap)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object: task, n, metrics, mode, seconds, peak_rss_bytes, ..."},
			&cli.BoolFlag{Name: "mass", Usage: "report the share of the activation mass Σ|a| over decoded tokens that the computed neurons hold, per sliced layer, against the best and random neurons of the same count (computes every loaded neuron: slower)"},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress bar"},
		}...),
		Action: func(c *cli.Context) error {
			if err := checkInts(c, intFlag{"limit", 0, "0: all"}, intFlag{"context", 0, runcmd.ContextZero},
				intFlag{"max-new-tokens", 0, "0: the task's default"}, intFlag{"window", 0, "0: min(context, 256)"},
				intFlag{"stride", 0, "0: the window less the BOS"}); err != nil {
				return err
			}
			if err := runcmd.CheckThreads(c); err != nil {
				return err
			}
			task, file, dir := c.String("task"), c.String("file"), dataDir(c)
			var text []byte
			switch {
			case (task == "") == (file == ""):
				return fmt.Errorf("give one of --task (a built-in task) and --file (a text file's perplexity)")
			case file != "":
				for _, f := range []string{"split", "offset", "max-new-tokens"} {
					if c.IsSet(f) {
						return fmt.Errorf("--%s: not with --file (one text, scored by perplexity)", f)
					}
				}
				var err error
				if text, err = os.ReadFile(file); err != nil {
					return fmt.Errorf("--file: %w", err)
				}
				task = file
			default:
				if err := checkTaskData(task, dir); err != nil {
					return err
				}
			}
			l, err := openModel(c.String("model"), false, c.Bool("strict"), c.App.ErrWriter)
			if err != nil {
				return err
			}
			defer l.Close()
			if err := runcmd.CheckContext(c, l.Model); err != nil {
				return err
			}
			sp, err := runcmd.Sparsity(c, l.Model)
			if err != nil {
				return err
			}
			var sel dataset.Selection
			if file == "" {
				if sel, err = selection(c, task, dataset.SplitEval); err != nil {
					return err
				}
			}
			opt := eval.Options{DataDir: dir, Limit: c.Int("limit"), Split: sel.Split, Offset: sel.Offset, Sparsity: sp,
				MaxNewTokens: c.Int("max-new-tokens"), Threads: c.Int("threads"), Context: c.Int("context"),
				Window: c.Int("window"), Stride: c.Int("stride"), Mass: c.Bool("mass")}
			var bar *progressbar.ProgressBar
			if showProgress(c) {
				opt.Progress = func(done, total int) {
					if bar == nil {
						bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(c.App.ErrWriter),
							progressbar.OptionSetDescription(fmt.Sprintf("eval %s [%s]", task, sp.Mode)),
							progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
					}
					bar.Set(done)
				}
			}
			var res *eval.Result
			if file != "" {
				res, err = eval.EvaluateText(l.Model, l.Tok, file, string(text), opt)
			} else {
				res, err = eval.Evaluate(l.Model, l.Tok, task, opt)
			}
			if bar != nil {
				bar.Finish()
			}
			if err != nil {
				return err
			}
			rep := eval.NewReport(res, sp, l.Path, l.FileBytes)
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(rep)
			}
			keys := make([]string, 0, len(res.Metrics))
			for k := range res.Metrics {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(c.App.Writer, "%s\t%.4f\n", k, res.Metrics[k])
			}
			if m := rep.Mass; m != nil {
				writeMass(c.App.Writer, m)
			}
			unit := "examples"
			if res.Kind == dataset.KindPerplexity {
				unit = "windows"
			}
			fmt.Fprintf(c.App.ErrWriter, "[%s] %s: %d %s, %.1f s, peak RSS %s\n", sp.Mode, task, res.N, unit, res.Seconds, human(res.PeakRSS))
			return nil
		},
	}
}

// writeMass prints the mass report as a table: per sliced layer and in
// total, the neurons loaded and computed per token, and the shares of the
// loaded neurons' Σ|a| that the computed, the best and random neurons hold.
func writeMass(w io.Writer, m *eval.MassReport) {
	fmt.Fprintf(w, "\nactivation mass over %d decoded tokens (share of the loaded neurons' Σ|a|)\n", m.Tokens)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layer\tloaded\tcomputed\tmass\tbest\trandom\t")
	row := func(name string, s eval.MassShare) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.4f\t%.4f\t%.4f\t\n", name, s.Loaded, s.Computed, s.Mass, s.Best, s.Random)
	}
	for _, s := range m.Layers {
		row(strconv.Itoa(s.Layer), s)
	}
	row("all", m.Total)
	tw.Flush()
}

// checkTaskData checks that task is a built-in task (a prompt file has no
// references or metric to score) and that its data files are under dir.
func checkTaskData(task, dir string) error {
	if _, err := dataset.Lookup(task); err != nil {
		if strings.HasSuffix(task, ".jsonl") || strings.ContainsRune(task, '/') || strings.ContainsRune(task, os.PathSeparator) {
			return fmt.Errorf("--task %s: eval scores a built-in task against its references (%s); a prompt file is for sinf profile --dataset",
				task, strings.Join(dataset.Names(), ", "))
		}
		return fmt.Errorf("--task %q: unknown task (built-in: %s)", task, strings.Join(dataset.Names(), ", "))
	}
	if err := dataset.CheckFiles(task, dir); err != nil {
		return dataHint(err, dir)
	}
	return nil
}
