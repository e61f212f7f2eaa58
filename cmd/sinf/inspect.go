package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/chat"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// inspectContext is the context inspect's expected memory assumes, at most
// (convert --memory-budget's default --context).
const inspectContext = 2048

// Anatomy is what sinf inspect reports about a .sinf file.
type Anatomy struct {
	Path           string              `json:"path"`
	FileBytes      int64               `json:"file_bytes"`
	ModelType      string              `json:"model_type"`
	Layers         int                 `json:"layers"`
	Hidden         int                 `json:"hidden_size"`
	Intermediate   int                 `json:"intermediate_size"`
	Vocab          int                 `json:"vocab_size"`
	DType          string              `json:"dtype"`
	ParamsStored   int64               `json:"params_stored"`
	ParamsOriginal int64               `json:"params_original"`
	Selection      *format.Selection   `json:"selection,omitempty"`
	BytesByKind    map[string]int64    `json:"bytes_by_kind"`
	TensorsByDType map[string]int      `json:"tensors_by_dtype"` // a K-quant mix has several (--tensors lists each)
	Provenance     format.Provenance   `json:"provenance"`
	KVBytesPer1K   int64               `json:"kv_cache_bytes_per_1k_tokens"`
	ExpectedMemory runtime.Memory      `json:"expected_memory"`
	Tensors        []format.TensorInfo `json:"-"`
}

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "print the anatomy of a .sinf file",
		UsageText: "sinf inspect [--json] FILE.sinf",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object"}, &cli.BoolFlag{Name: "tensors", Usage: "list every tensor"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("give one .sinf file")
			}
			if err := runcmd.NotFolder(c.Args().First()); err != nil {
				return err
			}
			f, err := format.Open(c.Args().First())
			if err != nil {
				return err
			}
			defer f.Close()
			a, err := anatomy(f)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(a)
			}
			printAnatomy(c.App.Writer, a, c.Bool("tensors"))
			return nil
		},
	}
}

func anatomy(f *format.File) (*Anatomy, error) {
	meta := f.Metadata()
	cfg, err := runtime.ParseConfig(f.Path()+": metadata field config", meta.Config)
	if err != nil {
		return nil, err
	}
	a := &Anatomy{Path: f.Path(), FileBytes: f.Size(), ModelType: cfg.ModelType, Layers: cfg.Layers,
		Hidden: cfg.Hidden, Intermediate: cfg.Intermediate, Vocab: cfg.Vocab, DType: meta.DType.String(),
		Selection: meta.Selection, BytesByKind: map[string]int64{}, TensorsByDType: map[string]int{}, Provenance: meta.Provenance, Tensors: f.Tensors()}
	for _, t := range a.Tensors {
		n := int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		kind := tensorKind(t.Name)
		a.BytesByKind[kind] += int64(t.Length)
		a.TensorsByDType[t.DType.String()]++
		if kind != "index" {
			a.ParamsStored += n
		}
	}
	// Original parameters: stored, plus the neurons dropped from sliced layers.
	a.ParamsOriginal = a.ParamsStored
	if meta.Selection != nil {
		for _, l := range meta.Selection.Layers {
			a.ParamsOriginal += int64(cfg.Intermediate-l.Kept) * 3 * int64(cfg.Hidden)
		}
	}
	a.KVBytesPer1K = runtime.KVCacheBytes(cfg, 1024)
	// The peak of a run that fills min(max_position_embeddings, 2048)
	// positions with one prompt (the worst case), on this machine's
	// default threads: the memory model of convert --memory-budget.
	ctx := min(cfg.MaxPositions, inspectContext)
	a.ExpectedMemory = runtime.EstimateMemory(cfg, f.Size(), int64(len(meta.Tokenizer)), ctx, ctx, kernels.DefaultThreads())
	return a, nil
}

// tensorKind groups tensor names for the byte accounting.
func tensorKind(name string) string {
	switch {
	case strings.HasSuffix(name, "neuron_index"):
		return "index"
	case strings.Contains(name, ".mlp."):
		return "ffn"
	case strings.Contains(name, "self_attn"):
		return "attention"
	case strings.Contains(name, "embed") || strings.HasPrefix(name, "lm_head"):
		return "embedding"
	}
	return "norm"
}

func printAnatomy(out io.Writer, a *Anatomy, tensors bool) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "file\t%s (%s)\n", a.Path, human(a.FileBytes))
	fmt.Fprintf(w, "architecture\t%s: %d layers, hidden %d, intermediate (N) %d, vocab %d, weights %s\n", a.ModelType, a.Layers, a.Hidden, a.Intermediate, a.Vocab, a.DType)
	fmt.Fprintf(w, "parameters\t%d stored of %d original (%.1f%%)\n", a.ParamsStored, a.ParamsOriginal, 100*float64(a.ParamsStored)/float64(a.ParamsOriginal))
	if s := a.Selection; s != nil {
		fmt.Fprintf(w, "selection\tgamma %.3g, delta %.3g, layers [%d, %d), random %v\n", s.Gamma, s.Delta, s.FirstLayer, s.LastLayer, s.Random)
		if r := s.Reconstruction; r != nil {
			what := map[[2]bool]string{{true, false}: "output bias (the dropped neurons' mean output)", {false, true}: "refitted down_proj rows",
				{true, true}: "refitted down_proj rows and output bias", {false, false}: "none"}[[2]bool{r.Bias, r.Refit}]
			gen := ""
			if r.Generated > 0 {
				gen = fmt.Sprintf(", each prompt continued by %d tokens the model sampled", r.Generated)
			}
			fmt.Fprintf(w, "reconstruction\t%s, calibrated on %d tokens of %v (profile split%s)\n", what, r.Tokens, r.Tasks, gen)
		}
		if s.Predictor == "up_sketch" {
			fmt.Fprintf(w, "predictor\tup_proj sketches (SK2, 2 bits + an F16 scale per 32 weights): gatefirst ranks rows by |silu(gate)·(sketch·x)|·‖down‖\n")
		}
		for k, l := range s.Layers {
			ridge := ""
			if r := s.Reconstruction; r != nil && k < len(r.Ridge) {
				ridge = fmt.Sprintf(", ridge c %g", r.Ridge[k])
			}
			fmt.Fprintf(w, "  layer %d\tkept %d (%.1f%% of N), base %d (%.1f%%)%s\n", l.Layer, l.Kept, 100*float64(l.Kept)/float64(a.Intermediate), l.Base, 100*float64(l.Base)/float64(a.Intermediate), ridge)
		}
	}
	kinds := make([]string, 0, len(a.BytesByKind))
	for k := range a.BytesByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "bytes: %s\t%s\n", k, human(a.BytesByKind[k]))
	}
	dts := make([]string, 0, len(a.TensorsByDType))
	for d, n := range a.TensorsByDType {
		dts = append(dts, fmt.Sprintf("%s %d", d, n))
	}
	sort.Strings(dts)
	fmt.Fprintf(w, "tensors by dtype\t%s\n", strings.Join(dts, ", "))
	p := a.Provenance
	fmt.Fprintf(w, "source\t%s %s\n", p.Source, p.SourceDigest)
	for _, s := range []*format.ScoresRef{p.TaskScores, p.ModelScores} {
		if s != nil {
			fmt.Fprintf(w, "scores\t%s task %q tasks %v, %d input + %d generated tokens\n", s.Path, s.Task, s.Tasks, s.InputTokens, s.GeneratedTokens)
		}
	}
	fmt.Fprintf(w, "tool\t%s, created %s\n", p.ToolVersion, p.Created)
	m := a.ExpectedMemory
	fmt.Fprintf(w, "expected peak RSS\t%s (sinf-run, %d positions filled by one prompt, %s): mapped file %s + heap %s (KV cache %s, buffers %s, tokenizer %s) + process %s\n",
		human(m.Total()), m.Context, runcmd.Plural(m.Threads, "thread"), human(m.File), human(m.Heap), human(m.KV), human(m.Buffers), human(m.TokenizerLive), human(m.Process))
	if tensors {
		for _, t := range a.Tensors {
			fmt.Fprintf(w, "  %s\t%v %v\toffset %d\t%d bytes\tcrc32c %08x\n", t.Name, t.DType, t.Shape, t.Offset, t.Length, t.CRC32C)
		}
	}
	w.Flush()
}

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name: "verify",
		Usage: "check every tensor checksum of a .sinf file, then load it as sinf-run does (config against the tensors, tokenizer, " +
			"generation config, chat template); exit non-zero naming the first bad tensor or field",
		UsageText: "sinf verify FILE.sinf",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("give one .sinf file")
			}
			path := c.Args().First()
			if err := runcmd.NotFolder(path); err != nil {
				return err
			}
			f, err := format.Open(path)
			if err != nil {
				return err
			}
			n := len(f.Tensors())
			err = f.Verify()
			f.Close()
			if err != nil {
				return err
			}
			// What sinf-run checks when it opens the file: the model bound
			// to its tensors, the tokenizer, generation_config.
			l, err := runcmd.OpenSinf(path, false)
			if err != nil {
				return err
			}
			defer l.Close()
			if _, err := chat.FromTokenizerConfig(path+": metadata field tokenizer_config", l.Meta.TokenizerConfig); err != nil && !errors.Is(err, chat.ErrNoTemplate) {
				return fmt.Errorf("%w (completions would run; chat requests would be refused)", err)
			}
			fmt.Fprintf(c.App.Writer, "%s: %d tensors, all checksums match; the model, tokenizer and generation config load\n", f.Path(), n)
			return nil
		},
	}
}
