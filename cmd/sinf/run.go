package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "generate text from a .sinf file or an HF checkpoint folder",
		UsageText: "sinf run --model FILE.sinf|DIR --prompt TEXT [options]",
		Flags:     append(runcmd.Flags(), strictFlag()),
		Action: func(c *cli.Context) error {
			return runcmd.Action(func(path string, verify bool) (*runcmd.Loaded, error) {
				return openModel(path, verify, c.Bool("strict"), c.App.ErrWriter)
			})(c)
		},
	}
}

// strictFlag is --strict, for the commands that read HF checkpoint folders.
func strictFlag() cli.Flag {
	return &cli.BoolFlag{Name: "strict", Usage: "HF checkpoint folder: refuse stored tensors the architecture does not have (without it they are skipped with a warning, as HF skips unexpected weights)"}
}

// openModel opens a .sinf file or an HF checkpoint folder (strict:
// hf.Options.Strict), writing the folder's notes and warnings to w.
func openModel(path string, verify, strict bool, w io.Writer) (*runcmd.Loaded, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return runcmd.OpenSinf(path, verify)
	}
	if verify {
		return nil, fmt.Errorf("--verify checks the checksums of a .sinf file; %s is an HF checkpoint folder, which stores none", path)
	}
	ck, m, tok, err := hf.LoadModel(path, hf.Options{Strict: strict})
	if err != nil {
		return nil, err
	}
	gen, err := runtime.ParseGenerationConfig(filepath.Join(path, "generation_config.json"), ck.GenerationConfig)
	if err != nil {
		ck.Close()
		return nil, err
	}
	for _, f := range ck.Ignored {
		fmt.Fprintf(w, "note: %s: %s\n", path, f)
	}
	for _, f := range ck.Warnings {
		fmt.Fprintf(w, "warning: %s: %s\n", path, f)
	}
	for _, f := range tok.Warnings() {
		fmt.Fprintf(w, "warning: %s\n", f)
	}
	size := ck.WeightBytes()
	return &runcmd.Loaded{Model: m, Tok: tok, Kind: "hf", Path: path, FileBytes: size, MappedBytes: size, Gen: gen, Close: ck.Close}, nil
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
				for _, w := range tok.Warnings() {
					fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", w)
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

// checkHFDir refuses, before it is opened, a --model path that is not an HF
// checkpoint folder: a .sinf file (which the command cannot take back apart)
// or another file; opening config.json under a file says only "not a
// directory".
func checkHFDir(command, path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.IsDir() {
		return err
	}
	if format.IsSinf(path) {
		return fmt.Errorf("--model %s is a .sinf file: sinf %s reads the HF checkpoint folder (config.json, *.safetensors, tokenizer.json) it was made from; sinf run, eval and bench take .sinf files", path, command)
	}
	return fmt.Errorf("--model %s is a file: sinf %s reads an HF checkpoint folder (config.json, *.safetensors, tokenizer.json)", path, command)
}
