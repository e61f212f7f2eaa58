package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/convert/eval"
)

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "score a .sinf file or an HF folder on a built-in task (EM/F1, accuracy, BLEU, ROUGE, perplexity)",
		UsageText: "sinf eval --model FILE.sinf|DIR --task NAME [--mode selectinfer|dense|coreinfer] [--phi F] [--alpha A]\n" +
			"   [--limit N] [--data-dir DIR] [--threads N] [--context N] [--max-new-tokens N] [--window W] [--stride S] [--json]",
		Flags: append(runcmd.SparsityFlags(), []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "a .sinf file or an HF checkpoint folder"},
			&cli.StringFlag{Name: "task", Required: true, Usage: "built-in task: " + strings.Join(dataset.Names(), ", ")},
			&cli.IntFlag{Name: "limit", Usage: "evaluate the first N examples (perplexity: N windows; 0: all)"},
			&cli.StringFlag{Name: "data-dir", Value: defaultDataDir(), Usage: "folder of the built-in datasets' files ($SINF_DATA)"},
			&cli.IntFlag{Name: "threads", Usage: runcmd.ThreadsUsage},
			&cli.IntFlag{Name: "context", Usage: "KV cache positions (0: the model's max_position_embeddings, at most 4096)"},
			&cli.IntFlag{Name: "max-new-tokens", Usage: "tokens generated at most (0: 32 for QA, 128 for translation and summarization)"},
			&cli.IntFlag{Name: "window", Usage: "perplexity window in tokens, BOS included (0: min(context, 256))"},
			&cli.IntFlag{Name: "stride", Usage: "perplexity stride in text tokens (0: the window less the BOS, no overlap)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object: task, n, metrics, mode, seconds, peak_rss_bytes, ..."},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress bar"},
		}...),
		Action: func(c *cli.Context) error {
			if err := runcmd.CheckThreads(c); err != nil {
				return err
			}
			task := c.String("task")
			if _, err := dataset.Lookup(task); err != nil {
				return err
			}
			paths, _ := dataset.Files(task, c.String("data-dir"))
			for _, p := range paths {
				if _, err := os.Stat(p); err != nil {
					return dataHint(fmt.Errorf("dataset %s: data file: %w", task, err))
				}
			}
			l, err := openModel(c.String("model"), false)
			if err != nil {
				return err
			}
			defer l.Close()
			sp, err := runcmd.Sparsity(c, l.Model)
			if err != nil {
				return err
			}
			opt := eval.Options{DataDir: c.String("data-dir"), Limit: c.Int("limit"), Sparsity: sp,
				MaxNewTokens: c.Int("max-new-tokens"), Threads: c.Int("threads"), Context: c.Int("context"),
				Window: c.Int("window"), Stride: c.Int("stride")}
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
			res, err := eval.Evaluate(l.Model, l.Tok, task, opt)
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
			fmt.Fprintf(c.App.ErrWriter, "[%s] %s: %d examples, %.1f s, peak RSS %s\n", sp.Mode, task, res.N, res.Seconds, human(res.PeakRSS))
			return nil
		},
	}
}
