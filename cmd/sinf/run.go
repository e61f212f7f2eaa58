package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "generate text from a .sinf file or an HF checkpoint folder",
		UsageText: "sinf run --model FILE.sinf|DIR --prompt TEXT [options]",
		Flags:     runcmd.Flags(),
		Action:    runcmd.Action(openModel),
	}
}

// openModel opens a .sinf file or an HF checkpoint folder.
func openModel(path string, verify bool) (*runcmd.Loaded, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return runcmd.OpenSinf(path, verify)
	}
	ck, m, tok, err := hf.LoadModel(path)
	if err != nil {
		return nil, err
	}
	for _, f := range ck.Ignored {
		fmt.Fprintf(os.Stderr, "note: %s: %s\n", path, f)
	}
	size := ck.WeightBytes()
	return &runcmd.Loaded{Model: m, Tok: tok, Kind: "hf", Path: path, FileBytes: size, MappedBytes: size, Close: ck.Close}, nil
}

func tokenizeCommand() *cli.Command {
	return &cli.Command{
		Name:      "tokenize",
		Usage:     "print the token ids of a text as a JSON array",
		UsageText: "sinf tokenize --model DIR|FILE.sinf --text TEXT [--bos]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "a folder with tokenizer.json (and tokenizer_config.json), or a .sinf file"},
			&cli.StringFlag{Name: "text", Required: true},
			&cli.BoolFlag{Name: "bos", Usage: "add the BOS token"},
		},
		Action: func(c *cli.Context) error {
			path := c.String("model")
			var tok *tokenizer.Tokenizer
			if fi, err := os.Stat(path); err != nil {
				return err
			} else if fi.IsDir() {
				if tok, err = tokenizer.Load(path); err != nil {
					return err
				}
			} else {
				l, err := runcmd.OpenSinf(path, false)
				if err != nil {
					return err
				}
				defer l.Close()
				tok = l.Tok
			}
			ids, err := tok.EncodeChecked(c.String("text"), c.Bool("bos"))
			if err != nil {
				return err
			}
			if ids == nil {
				ids = []int{}
			}
			b, _ := json.Marshal(ids)
			fmt.Fprintln(c.App.Writer, string(b))
			return nil
		},
	}
}
