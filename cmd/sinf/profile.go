package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/profile"
	"github.com/selectinfer/sinf/convert/scores"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// dataDirFlag is --data-dir of profile, eval and study. Its default is
// resolved when the command runs (dataDir), so the help shows the rule, not
// the folder the help happened to be printed in.
func dataDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "data-dir", Usage: "folder of the built-in datasets' files",
		DefaultText: "$SINF_DATA, else ../shared/data or testdata/data, the first that exists under the current folder"}
}

// dataDir returns --data-dir, else $SINF_DATA, else the first of
// ../shared/data (the full data, beside a checkout) and testdata/data (the
// samples shipped in the repository) that exists under the current folder,
// else testdata/data.
func dataDir(c *cli.Context) string {
	if d := c.String("data-dir"); d != "" {
		return d
	}
	if d := os.Getenv("SINF_DATA"); d != "" {
		return d
	}
	for _, d := range []string{"../shared/data", "testdata/data"} {
		if _, err := os.Stat(d); err == nil {
			return d
		}
	}
	return "testdata/data"
}

func profileCommand() *cli.Command {
	return &cli.Command{
		Name:  "profile",
		Usage: "score every FFN neuron on a dataset's prompts: s_n = Σ_t |a_n(t)| over input and generated tokens",
		UsageText: "sinf profile --model DIR --dataset NAME|FILE.jsonl [--task NAME] [--limit N] [--max-new-tokens N]\n" +
			"   [--split profile|eval|all] [--offset N] [--shard I/N] [--batch B] [--data-dir DIR] --out FILE",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "HF checkpoint folder"},
			strictFlag(),
			&cli.StringFlag{Name: "dataset", Required: true, Usage: "a built-in dataset (" + strings.Join(dataset.Names(), ", ") + ") or a JSONL file with a \"prompt\" field"},
			&cli.StringFlag{Name: "task", Usage: "task label recorded in the score file (default: the dataset name)"},
			&cli.IntFlag{Name: "limit", Usage: "profile at most N prompts (0: all)"},
			&cli.IntFlag{Name: "max-new-tokens", Value: 16, Usage: "greedy tokens generated and scored after each prompt"},
			&cli.StringFlag{Name: "shard", Usage: "I/N: profile every N-th prompt starting at I (for job arrays)"},
			&cli.IntFlag{Name: "batch", Value: 1, Usage: "prompts profiled at once"},
			&cli.IntFlag{Name: "threads", Usage: "kernel threads per prompt in flight (0: the physical cores this process may use / --batch)"},
			dataDirFlag(),
			&cli.StringFlag{Name: "out", Required: true, Usage: "score file to write (safetensors)"},
			&cli.IntFlag{Name: "chunk-size", Usage: "also write one score file per K consecutive prompts (OUT.chunkNNN) for the within-task analysis"},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress bar"},
		}, splitFlags(dataset.SplitProfile)...),
		Action: func(c *cli.Context) error {
			if err := checkInts(c, intFlag{"limit", 0, "0: all"}, intFlag{"batch", 1, ""}, intFlag{"max-new-tokens", 0, ""},
				intFlag{"chunk-size", 0, "0: no chunk files"}); err != nil {
				return err
			}
			if err := runcmd.CheckThreads(c); err != nil {
				return err
			}
			if err := checkHFDir("profile", c.String("model")); err != nil {
				return err
			}
			if fo, err := os.Stat(c.String("out")); err == nil {
				entries, _ := os.ReadDir(c.String("model"))
				for _, e := range entries {
					if fi, err := os.Stat(filepath.Join(c.String("model"), e.Name())); err == nil && os.SameFile(fo, fi) {
						return fmt.Errorf("--out %s is a file of the model folder: choose another path", c.String("out"))
					}
				}
			}
			shard, si, sn := c.String("shard"), 0, 1
			if shard != "" {
				var err error
				if si, sn, err = dataset.ParseShard(shard); err != nil {
					return fmt.Errorf("--shard: %w", err)
				}
			}
			if err := checkOutFile(c.String("out")); err != nil {
				return err
			}
			ck, m, err := hf.LoadWith(c.String("model"), hf.Options{Strict: c.Bool("strict")})
			if err != nil {
				return err
			}
			defer ck.Close()
			for _, w := range ck.Warnings {
				fmt.Fprintf(c.App.ErrWriter, "warning: %s: %s\n", c.String("model"), w)
			}
			tok, err := tokenizer.Load(c.String("model"))
			if err != nil {
				return err
			}
			for _, w := range tok.Warnings() {
				fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", w)
			}
			sel, err := selection(c, c.String("dataset"), dataset.SplitProfile)
			if err != nil {
				return err
			}
			task, examples, err := dataset.LoadSelection(c.String("dataset"), dataDir(c), sel)
			if err != nil {
				return dataHint(err, dataDir(c))
			}
			if examples, err = dataset.Shard(examples, si, sn); err != nil {
				return fmt.Errorf("--shard: %w", err)
			}
			if len(examples) == 0 {
				return fmt.Errorf("dataset %s: shard %s has no prompts", c.String("dataset"), shard)
			}
			prompts := make([][]int, len(examples))
			for i, ex := range examples {
				var err error
				if prompts[i], err = tok.EncodeChecked(ex.Prompt, tok.AddsBOS()); err != nil {
					return fmt.Errorf("dataset %s: prompt %q (%d): %w", c.String("dataset"), ex.ID, i, err)
				}
				if len(prompts[i]) == 0 {
					return fmt.Errorf("dataset %s: prompt %q (%d) encodes to no tokens", c.String("dataset"), ex.ID, i)
				}
			}
			threads := c.Int("threads")
			batch := max(c.Int("batch"), 1)
			opt := profile.Options{MaxNewTokens: c.Int("max-new-tokens"), Workers: batch, Threads: threads, BOS: tok.BOS()}
			var bar *progressbar.ProgressBar
			start := time.Now()
			if showProgress(c) {
				bar = progressbar.NewOptions(len(prompts), progressbar.OptionSetWriter(c.App.ErrWriter),
					progressbar.OptionSetDescription("profiling "+task.Name), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
				opt.Progress = func(p int, tokens int64) {
					bar.Describe(fmt.Sprintf("profiling %s (%.0f tokens/s)", task.Name, float64(tokens)/time.Since(start).Seconds()))
					bar.Set(p)
				}
			}
			label := c.String("task")
			if label == "" {
				label = task.Name
			}
			digest := scores.ModelDigest(ck.ConfigJSON, convert.FFNShapes(ck))
			file := func(r *profile.Result, dataset string) *scores.File {
				return &scores.File{ModelDigest: digest, Task: label, Dataset: dataset, Shard: shard, ToolVersion: convert.ToolVersion,
					Prompts: r.Prompts, InputTokens: r.InputTokens, GeneratedTokens: r.GeneratedTokens, Scores: r.Sums}
			}
			if k := c.Int("chunk-size"); k > 0 {
				opt.ChunkSize = k
				opt.OnChunk = func(i int, r *profile.Result) error {
					// A chunk is its own dataset, so chunk files merge as separate inputs.
					return scores.Write(fmt.Sprintf("%s.chunk%03d", c.String("out"), i), file(r, fmt.Sprintf("%s#chunk%03d", task.Name, i)))
				}
			}
			res, err := profile.Run(m, prompts, opt)
			if err != nil {
				return err
			}
			if err := scores.Write(c.String("out"), file(res, task.Name)); err != nil {
				return err
			}
			secs := time.Since(start).Seconds()
			msg := fmt.Sprintf("wrote %s: task %s, %d prompts, %d input + %d generated tokens, %.0f tokens/s",
				c.String("out"), label, res.Prompts, res.InputTokens, res.GeneratedTokens, float64(res.InputTokens+res.GeneratedTokens)/secs)
			if res.Truncated > 0 {
				msg += fmt.Sprintf("; %d prompts cut from the left to fit the context (%d tokens removed)", res.Truncated, res.CutTokens)
			}
			fmt.Fprintln(c.App.ErrWriter, msg)
			return nil
		},
	}
}

func mergeCommand() *cli.Command {
	return &cli.Command{
		Name:      "merge",
		Usage:     "merge score files: each input normalised by its tokens, then summed (task- or model-level)",
		UsageText: "sinf merge --out FILE IN... [--print-top K]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "merged score file"},
			&cli.IntFlag{Name: "print-top", Usage: "print the top K neurons of each layer"},
		},
		Action: func(c *cli.Context) error {
			if err := checkInts(c, intFlag{"print-top", 0, "0: print nothing"}); err != nil {
				return err
			}
			ins := c.Args().Slice()
			if len(ins) == 0 {
				return errors.New("give score files to merge")
			}
			files, err := readScores(ins)
			if err != nil {
				return err
			}
			merged, err := scores.Merge(files, ins)
			if err != nil {
				return err
			}
			if out := c.String("out"); out != "" {
				if err := scores.Write(out, merged); err != nil {
					return err
				}
				fmt.Fprintf(c.App.ErrWriter, "wrote %s: %s, tasks %v, %d input + %d generated tokens\n", out, runcmd.Plural(len(ins), "file"), merged.Tasks(), merged.InputTokens, merged.GeneratedTokens)
			} else if c.Int("print-top") == 0 {
				return errors.New("give --out FILE or --print-top K")
			}
			if k := c.Int("print-top"); k > 0 {
				for l := range merged.Scores {
					r := merged.Ranking(l)
					k := min(k, len(r))
					fmt.Fprintf(c.App.Writer, "layer %d:", l)
					for _, n := range r[:k] {
						fmt.Fprintf(c.App.Writer, " %d", n)
					}
					fmt.Fprintln(c.App.Writer)
				}
			}
			return nil
		},
	}
}

func overlapCommand() *cli.Command {
	return &cli.Command{
		Name:      "overlap",
		Usage:     "overlap of the top neurons between score files (paper §2, Figs 2-4)",
		UsageText: "sinf overlap [--top 0.4] [--plot FILE.svg] [--label NAME]... FILE...",
		Flags: []cli.Flag{
			&cli.Float64Flag{Name: "top", Value: 0.4, Usage: "fraction of each layer's neurons compared"},
			&cli.StringFlag{Name: "plot", Usage: "write a picture (.svg or .png)"},
			&cli.StringSliceFlag{Name: "label", Usage: "label per file (default: the file's task)"},
		},
		Action: func(c *cli.Context) error {
			ins := c.Args().Slice()
			if len(ins) < 2 {
				return errors.New("give at least two score files")
			}
			labels := c.StringSlice("label")
			if len(labels) != 0 && len(labels) != len(ins) {
				return fmt.Errorf("%d labels for %d files", len(labels), len(ins))
			}
			files, err := readScores(ins)
			if err != nil {
				return err
			}
			for i, p := range ins {
				if len(labels) < len(ins) {
					l := files[i].Task
					if l == "" {
						l = filepath.Base(p)
					}
					labels = append(labels, l)
				}
			}
			if !c.IsSet("label") {
				seen := map[string]bool{}
				for _, l := range labels {
					if seen[l] { // tasks repeat (chunks, shards): label by file name
						for i, p := range ins {
							labels[i] = filepath.Base(p)
						}
						break
					}
					seen[l] = true
				}
			}
			rep, err := scores.BuildReport(labels, files, c.Float64("top"))
			if err != nil {
				return err
			}
			if err := rep.WriteTable(c.App.Writer); err != nil {
				return err
			}
			if p := c.String("plot"); p != "" {
				if err := rep.WritePlot(p); err != nil {
					return err
				}
				fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", p)
			}
			return nil
		},
	}
}

// readScores reads score files in order; the error names the failing file.
func readScores(paths []string) ([]*scores.File, error) {
	files := make([]*scores.File, len(paths))
	for i, p := range paths {
		var err error
		if files[i], err = scores.Read(p); err != nil {
			return nil, err
		}
	}
	return files, nil
}
