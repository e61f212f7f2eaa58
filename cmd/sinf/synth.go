package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/synth"
	"github.com/selectinfer/sinf/format"
)

func synthCommand() *cli.Command {
	return &cli.Command{
		Name:  "synth",
		Usage: "write an HF checkpoint folder with a real model's shapes and RANDOM weights (for speed and memory tests)",
		UsageText: "sinf synth --shape " + strings.Join(synth.Names(), "|") + " --tokenizer DIR\n" +
			"   [--dtype f32|f16|bf16] [--seed S] [--vocab N] [--max-shard-size 2GB] [--force] --out DIR",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "shape", Required: true, Usage: "the real model whose config and shapes to use: " + strings.Join(synth.Names(), ", ")},
			&cli.StringFlag{Name: "tokenizer", Required: true, Usage: "folder with tokenizer.json (and tokenizer_config.json) to copy, e.g. ../shared/tokenizers/llama3"},
			&cli.StringFlag{Name: "dtype", Value: "bf16", Usage: "weight dtype: f32, f16 or bf16"},
			&cli.Uint64Flag{Name: "seed", Usage: "random seed (the same seed gives the same bytes)"},
			&cli.IntFlag{Name: "vocab", Usage: "vocab_size (0: the larger of the real model's and the tokenizer's; give the real one, e.g. 49152 for SmolLM2 with a Llama-3 tokenizer, for exact shapes: for speed only, since such a file refuses the tokenizer's ids above it, Llama-3's chat end 128009 among them, and cannot chat)"},
			&cli.StringFlag{Name: "max-shard-size", Value: "2GB", Usage: "shard the weights into files of at most this size"},
			&cli.BoolFlag{Name: "force", Usage: "write into a non-empty folder, replacing its weight files"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "output folder"},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress bar"},
		},
		Action: func(c *cli.Context) error {
			shape, err := synth.Lookup(c.String("shape"))
			if err != nil {
				return err
			}
			dt, err := format.ParseDType(c.String("dtype"))
			if err != nil || (dt != format.F32 && dt != format.F16 && dt != format.BF16) {
				return fmt.Errorf("--dtype %q: want f32, f16 or bf16", c.String("dtype"))
			}
			shard, err := convert.ParseBytes(c.String("max-shard-size"))
			if err != nil {
				return fmt.Errorf("--max-shard-size: %w", err)
			}
			if c.Int("vocab") < 0 {
				return fmt.Errorf("--vocab %d must not be negative", c.Int("vocab"))
			}
			opt := synth.Options{Shape: shape, TokenizerDir: c.String("tokenizer"), DType: dt, Seed: c.Uint64("seed"),
				Vocab: c.Int("vocab"), MaxShardBytes: shard, Force: c.Bool("force"),
				Command: "sinf " + strings.Join(os.Args[1:], " ")}
			if showProgress(c) {
				opt.Progress = c.App.ErrWriter
			}
			rep, err := synth.Write(c.String("out"), opt)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "wrote %s: %s, %d parameters in %s (%s), vocab %d — %s\n",
				rep.Dir, shape.Model, rep.Params, runcmd.Plural(len(rep.Files), "file"), human(rep.Bytes), rep.Vocab, rep.Note)
			if rep.Vocab != shape.Vocab {
				fmt.Fprintf(c.App.ErrWriter, "note: vocab_size %d differs from the real model's %d (the tokenizer defines %d ids); --vocab %d gives the exact real shape\n",
					rep.Vocab, shape.Vocab, rep.TokenizerVocab, shape.Vocab)
			}
			return nil
		},
	}
}
