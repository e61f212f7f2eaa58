package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/dataset"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/internal/sinftest"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// run runs the sinf command line in-process and returns its stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var o, e bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &o, &e
	err := app.Run(append([]string{"sinf"}, args...))
	return o.String(), err
}

// TestPipeline runs profile → merge → convert → inspect → verify → run on
// tinystories-656k through the command line, as a user would.
func TestPipeline(t *testing.T) {
	model := sharedtest.Path(t, "models", "tinystories-656k")
	data := sharedtest.Path(t, "data")
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	_, err := run(t, "profile", "--quiet", "--model", model, "--data-dir", data, "--dataset", "tinystories", "--limit", "6", "--max-new-tokens", "4", "--out", p("ts.scores"))
	require.NoError(t, err)
	_, err = run(t, "profile", "--quiet", "--model", model, "--data-dir", data, "--dataset", "xsum", "--limit", "2", "--max-new-tokens", "4", "--out", p("xsum.scores"))
	require.NoError(t, err)
	_, err = run(t, "merge", "--out", p("task.scores"), p("ts.scores"))
	require.NoError(t, err)
	out, err := run(t, "merge", "--print-top", "3", "--out", p("model.scores"), p("ts.scores"), p("xsum.scores"))
	require.NoError(t, err)
	require.Contains(t, out, "layer 1:")
	out, err = run(t, "overlap", "--plot", p("overlap.svg"), p("ts.scores"), p("xsum.scores"))
	require.NoError(t, err)
	require.Contains(t, out, "tinystories")
	require.Contains(t, out, "xsum")
	svg, err := os.ReadFile(p("overlap.svg"))
	require.NoError(t, err)
	require.Contains(t, string(svg), "<svg")
	_, err = run(t, "convert", "--quiet", "--model", model, "--task-scores", p("task.scores"), "--model-scores", p("model.scores"),
		"--first-layer", "0", "--last-layer", "2", "--data-dir", data, "--reconstruct-limit", "8", "--out", p("ts.sinf"))
	require.NoError(t, err)
	out, err = run(t, "inspect", p("ts.sinf"))
	require.NoError(t, err)
	require.Contains(t, out, "kept 269 (70.1% of N), base 115")
	require.Contains(t, out, "reconstruction     refitted down_proj rows and output bias, calibrated on") // the default, both
	require.Contains(t, out, "of [tinystories] (profile split, each prompt continued by 64 tokens the model sampled)")
	out, err = run(t, "verify", p("ts.sinf"))
	require.NoError(t, err)
	require.Contains(t, out, "all checksums match; the model, tokenizer and generation config load")
	// verify loads the file as sinf-run does: whole checksums do not pass a
	// config that disagrees with the tensors, nor a template that does not
	// compile (files rewritten with the checksums of their new bytes)
	for name, edit := range map[string]func(m *format.Metadata){
		"layers.sinf": func(m *format.Metadata) {
			var cfg map[string]any
			require.NoError(t, json.Unmarshal(m.Config, &cfg))
			cfg["num_hidden_layers"] = 3
			m.Config, _ = json.Marshal(cfg)
		},
		"template.sinf": func(m *format.Metadata) {
			m.TokenizerConfig = json.RawMessage(`{"chat_template":"{% for %}"}`)
		},
	} {
		sinftest.RewriteMetadata(t, p("ts.sinf"), p(name), edit)
		_, err = run(t, "verify", p(name))
		want := map[string]string{"layers.sinf": "model.layers.2", "template.sinf": "chat_template: jinja parse"}[name]
		require.ErrorContains(t, err, want, name)
	}
	out, err = run(t, "run", "--model", p("ts.sinf"), "--prompt", "Once upon a time", "--max-tokens", "4", "--json")
	require.NoError(t, err)
	require.Contains(t, out, `"mode":"gatefirst"`)
	require.Contains(t, out, `"computed_neurons":[96,96]`) // gatefirst's default phi on a γ=0.7 file: 0.25
	out, err = run(t, "run", "--model", p("ts.sinf"), "--prompt", "Once upon a time", "--max-tokens", "4", "--json", "--mode", "selectinfer")
	require.NoError(t, err)
	require.Contains(t, out, `"computed_neurons":[154,154]`)
	// --predictor sketch: the file says so, and gatefirst's default phi pays for the sketch's
	// bytes: (3·0.4 − γ·(1 + 10/(32·4)))/2 with γ = 269/384 on this F32 file, 85 rows.
	_, err = run(t, "convert", "--quiet", "--model", model, "--task-scores", p("task.scores"), "--model-scores", p("model.scores"),
		"--first-layer", "0", "--last-layer", "2", "--reconstruct", "none", "--predictor", "sketch", "--out", p("sk.sinf"))
	require.NoError(t, err)
	out, err = run(t, "inspect", p("sk.sinf"))
	require.NoError(t, err)
	require.Contains(t, out, "predictor          up_proj sketches (SK2")
	require.Contains(t, out, "SK2 2")
	out, err = run(t, "run", "--model", p("sk.sinf"), "--prompt", "Once upon a time", "--max-tokens", "4", "--json")
	require.NoError(t, err)
	require.Contains(t, out, `"computed_neurons":[85,85]`)
	_, err = run(t, "convert", "--quiet", "--model", model, "--task-scores", p("task.scores"), "--model-scores", p("model.scores"),
		"--predictor", "lowrank", "--out", p("bad.sinf"))
	require.ErrorContains(t, err, `--predictor: unknown predictor "lowrank" (want sketch or none)`)
	require.NoFileExists(t, p("bad.sinf"))
	out, err = run(t, "tokenize", "--model", model, "--text", "Once upon a time", "--bos")
	require.NoError(t, err)
	require.Equal(t, "[1,80,147,201,282,57]\n", out)
}

// TestProfileMergeBadInput: bad input is a clear error and writes nothing.
func TestProfileMergeBadInput(t *testing.T) {
	model := sharedtest.Path(t, "models", "tinystories-656k")
	other := sharedtest.Path(t, "models", "stories260k")
	data := sharedtest.Path(t, "data")
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	empty := p("empty.jsonl")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	notScores := p("not.scores")
	require.NoError(t, os.WriteFile(notScores, []byte("hello"), 0o644))
	_, err := run(t, "profile", "--quiet", "--model", model, "--data-dir", data, "--dataset", "tinystories", "--limit", "2", "--max-new-tokens", "1", "--out", p("a.scores"))
	require.NoError(t, err)
	_, err = run(t, "profile", "--quiet", "--model", other, "--data-dir", data, "--dataset", "tinystories", "--limit", "2", "--max-new-tokens", "1", "--out", p("b.scores"))
	require.NoError(t, err)
	base := []string{"profile", "--quiet", "--model", model, "--data-dir", data, "--limit", "2", "--out", p("x.scores")}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(base, "--dataset", "nosuch"), "squad_v2"},
		{append(base, "--dataset", empty), "empty.jsonl"},
		{append(base, "--dataset", "tinystories", "--shard", "0/0"), "shard"},
		{append(base, "--dataset", "tinystories", "--shard", "2/2"), "shard"},
		{append(base, "--dataset", "tinystories", "--batch", "0"), "--batch"},
		{[]string{"profile", "--quiet", "--model", model, "--data-dir", data, "--dataset", "tinystories", "--out", p("a.scores"), "--limit", "-1"}, "--limit"},
		{[]string{"convert", "--model", model, "--random", "--first-layer", "0", "--last-layer", "2", "--gamma", "0.001", "--delta", "0", "--out", p("x.sinf")}, "raise gamma"},
		{[]string{"convert", "--model", model, "--task-scores", p("a.scores"), "--model-scores", p("a.scores"), "--first-layer", "0", "--last-layer", "2", "--out", p("a.scores")}, "is an input"},
		{[]string{"merge", "--out", p("x.scores"), notScores}, "not.scores"},
		{[]string{"merge", "--out", p("x.scores"), p("a.scores"), p("b.scores")}, "b.scores"},
		{[]string{"convert", "--model", model, "--task-scores", p("b.scores"), "--model-scores", p("b.scores"), "--first-layer", "0", "--last-layer", "2", "--out", p("x.sinf")}, "b.scores"},
		{[]string{"convert", "--model", model, "--random", "--out", p("x.sinf")}, "explicitly"},
		{[]string{"convert", "--model", model, "--random", "--first-layer", "0", "--last-layer", "2", "--memory-budget", "1KiB", "--out", p("x.sinf")}, "too small"},
	} {
		_, err := run(t, c.args...)
		require.Error(t, err, "%v", c.args)
		require.True(t, strings.Contains(err.Error(), c.want), "%v: error %q does not name %q", c.args, err, c.want)
	}
	for _, f := range []string{"x.scores", "x.sinf"} {
		_, err := os.Stat(p(f))
		require.True(t, os.IsNotExist(err), "%s was written", f)
	}
}

// TestNoProgressBarOffTerminal checks that a command without --quiet draws no
// progress bar when stderr is a file (a log), not a terminal.
func TestNoProgressBarOffTerminal(t *testing.T) {
	model := sharedtest.Path(t, "models", "tinystories-656k")
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "stderr.log"))
	require.NoError(t, err)
	defer logf.Close()
	var o bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &o, logf
	require.NoError(t, app.Run([]string{"sinf", "convert", "--model", model, "--random", "--first-layer", "0", "--last-layer", "2", "--out", filepath.Join(dir, "x.sinf")}))
	log, err := os.ReadFile(logf.Name())
	require.NoError(t, err)
	require.Contains(t, string(log)+o.String(), "wrote ") // the report still comes
	require.NotContains(t, string(log), "converting")
}

// TestBenchJSON: the bench report's roofline is the median read pass, and its
// figures agree with each other (bytes per token is the sum of its parts).
func TestBenchJSON(t *testing.T) {
	out, err := run(t, "bench", "--model", filepath.Join("..", "..", "testdata", "models", "tinystories-656k"),
		"--prompt-tokens", "4", "--gen-tokens", "4", "--repeat", "1", "--warmup", "0", "--bandwidth-mib", "1", "--json")
	require.NoError(t, err)
	var r benchReport
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.BandwidthRuns, bandwidthPasses)
	sorted := slices.Sorted(slices.Values(r.BandwidthRuns))
	require.Equal(t, sorted[bandwidthPasses/2], r.BandwidthBytesPerS)
	require.Equal(t, sorted[bandwidthPasses-1], r.BandwidthBest)
	require.Equal(t, r.AttentionBytes+r.FFNBytes+r.LMHeadBytes, r.BytesPerToken)
	require.Positive(t, r.DecodeTokensPerS)
	require.InEpsilon(t, r.DecodeTokensPerS*float64(r.BytesPerToken)/r.BandwidthBytesPerS, r.RooflineFraction, 1e-12)

	// A Q4_0 file: the report names its dtypes and counts its blocks'
	// bytes: 2 layers × 3 matrices × 384 neurons × 128 weights × 18/32 bytes
	// of FFN, and the Q8_0 head's 2048 × 128 × 34/32.
	q4 := filepath.Join(t.TempDir(), "q4.sinf")
	_, err = run(t, "convert", "--model", filepath.Join("..", "..", "testdata", "models", "tinystories-656k"), "--random", "--gamma", "1",
		"--first-layer", "0", "--last-layer", "2", "--dtype", "q4_0", "--quiet", "--out", q4)
	require.NoError(t, err)
	out, err = run(t, "bench", "--model", q4, "--mode", "dense", "--prompt-tokens", "4", "--gen-tokens", "4", "--repeat", "1",
		"--warmup", "0", "--bandwidth-mib", "0", "--json")
	require.NoError(t, err)
	var rq benchReport
	require.NoError(t, json.Unmarshal([]byte(out), &rq))
	require.Equal(t, []string{"Q4_0", "Q8_0"}, []string{rq.DType, rq.LMHeadDType})
	require.Equal(t, int64(2*3*384*128*18/32), rq.FFNBytes)
	require.Equal(t, int64(2048*128*34/32), rq.LMHeadBytes)
	require.Equal(t, "f32", rq.KVCache)
	// --kv-cache f16: reported, and the memory model's cache is half the
	// float32 one's: 2 layers × keys and values × 9 positions × 4 kv
	// heads × 16 head_dim × 2 bytes.
	out, err = run(t, "bench", "--model", q4, "--mode", "dense", "--prompt-tokens", "4", "--gen-tokens", "4", "--repeat", "1",
		"--warmup", "0", "--bandwidth-mib", "0", "--json", "--kv-cache", "f16")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &rq))
	require.Equal(t, "f16", rq.KVCache)
	require.Equal(t, int64(2*2*9*4*16*2), rq.MemoryModel.KV)

	// A buffer too large to allocate is refused before the model is read.
	_, err = run(t, "bench", "--model", "no-such-model", "--bandwidth-mib", "65537")
	require.EqualError(t, err, "--bandwidth-mib 65537: want 0 (skip) to 65536")
}

// TestNegativeThreads: every command with --threads refuses a negative count
// before it reads anything.
func TestNegativeThreads(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--model", "x"},
		{"eval", "--model", "x", "--task", "squad_v2"},
		{"study", "--model", "x", "--tasks", "squad_v2", "--task-scores", "a", "--model-scores", "b", "--out", t.TempDir()},
		{"run", "--model", "x", "--prompt", "hi"},
	} {
		_, err := run(t, append(args, "--threads", "-3")...)
		require.ErrorContains(t, err, "--threads -3: want ≥ 0", "sinf %s", args[0])
	}
}

// TestThreadsLimits: a count far above the CPUs is refused before anything
// is read; one above the physical cores runs, with a warning on stderr; and
// bench --busy runs its busy loops and says so.
func TestThreadsLimits(t *testing.T) {
	most := kernels.MaxThreads()
	_, err := run(t, "eval", "--model", "x", "--task", "squad_v2", "--threads", strconv.Itoa(most+1))
	require.EqualError(t, err, fmt.Sprintf("--threads %d: at most %d (4 per CPU this process may use; it has %d physical cores, the default)",
		most+1, most, kernels.DefaultThreads()))

	n := kernels.DefaultThreads() + 1
	var o, e bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &o, &e
	require.NoError(t, app.Run([]string{"sinf", "bench", "--model", filepath.Join("..", "..", "testdata", "models", "tinystories-656k"),
		"--threads", strconv.Itoa(n), "--busy", "1", "--prompt-tokens", "4", "--gen-tokens", "4", "--repeat", "1", "--warmup", "0",
		"--bandwidth-mib", "0", "--json"}))
	require.Equal(t, fmt.Sprintf("warning: --threads %d is more than the %d physical cores this process may use: the extra threads share cores and will not run faster\n",
		n, n-1), e.String())
	var r benchReport
	require.NoError(t, json.Unmarshal(o.Bytes(), &r))
	require.Equal(t, n, r.Threads)
	require.Equal(t, 1, r.Busy)
	require.Equal(t, kernels.ISA(), r.ISA)
	require.Equal(t, kernels.Features(), r.CPUFeatures, "the features of the kernel set it ran")
	require.Greater(t, r.ActiveThreads, 0.99)
	require.LessOrEqual(t, r.ActiveThreads, float64(n))

	_, err = run(t, "bench", "--model", "x", "--busy", "-1")
	require.EqualError(t, err, fmt.Sprintf("--busy -1: want 0 to %d busy loops", most))
}

// TestMissingDataHint: a built-in task whose data is not in the folder names
// the file and the folder (absolute) and says how to point at the data;
// eval refuses a prompt file, which has no references to score; the help's
// --data-dir default is the rule, whatever the current folder.
func TestMissingDataHint(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "models", "tinystories-656k")
	data := filepath.Join("..", "..", "testdata", "data")
	abs, err := filepath.Abs(data)
	require.NoError(t, err)
	hint := " (data folder " + abs + ": give --data-dir, or set $SINF_DATA to, a folder with the full data, such as the shared data beside a checkout; " +
		"the repository's testdata/data holds only tinystories, wikitext2 and xsum)"
	_, err = run(t, "profile", "--quiet", "--model", model, "--dataset", "squad_v2", "--data-dir", data, "--out", filepath.Join(t.TempDir(), "x.scores"))
	require.EqualError(t, err, "dataset squad_v2: data file: stat "+filepath.Join(data, "squad_v2", "dev-sample.json")+": no such file or directory"+hint)
	_, err = run(t, "eval", "--model", model, "--task", "piqa", "--data-dir", data)
	require.EqualError(t, err, "dataset piqa: data file: stat "+filepath.Join(data, "piqa", "valid.jsonl")+": no such file or directory"+hint)
	t.Setenv("SINF_DATA", data)
	_, err = run(t, "eval", "--model", model, "--task", "piqa")
	require.EqualError(t, err, "dataset piqa: data file: stat "+filepath.Join(data, "piqa", "valid.jsonl")+": no such file or directory"+hint)

	names := strings.Join(dataset.Names(), ", ")
	_, err = run(t, "eval", "--model", model, "--task", "my.jsonl")
	require.EqualError(t, err, "--task my.jsonl: eval scores a built-in task against its references ("+names+"); a prompt file is for sinf profile --dataset")
	_, err = run(t, "eval", "--model", model, "--task", "nosuch")
	require.EqualError(t, err, `--task "nosuch": unknown task (built-in: `+names+")")

	for _, cmd := range []string{"eval", "profile", "study"} {
		out, err := run(t, cmd, "--help")
		require.NoError(t, err)
		require.Contains(t, out, "folder of the built-in datasets' files (default: $SINF_DATA, else ../shared/data or testdata/data, the first that exists under the current folder)", cmd)
	}
}

// TestUsageErrors: an unknown flag, a bad value or a missing required flag is
// one error naming the flag, with nothing on stdout (a --json pipe stays
// clean); --version prints the version the files record.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--bogus", "--json"}, "unknown flag --bogus (sinf run --help lists the flags)"},
		{[]string{"run", "--model", "m", "--max-tokens", "x"}, `invalid value "x" for flag --max-tokens: not a number (sinf run --help lists the flags)`},
		{[]string{"run", "--prompt", "hi", "--json"}, "--model is required (sinf run --help lists the flags)"},
		{[]string{"convert", "--random"}, "--model and --out are required (sinf convert --help lists the flags)"},
		{[]string{"--bogus"}, "unknown flag --bogus (sinf --help lists the flags)"},
		{[]string{"eval", "--model"}, "flag needs a value: --model (sinf eval --help lists the flags)"},
	} {
		out, err := run(t, c.args...)
		require.EqualError(t, err, c.want, "%v", c.args)
		require.Empty(t, out, "%v", c.args)
	}
	out, err := run(t, "--version")
	require.NoError(t, err)
	require.Equal(t, "sinf 0.1.0 (.sinf format version 1)\n", out)
	require.Equal(t, "sinf 0.1.0", format.ToolVersion)
}

// TestFlagValidation: every command refuses a flag out of range, or one that
// other flags would make it ignore, with the same form of message and before
// it reads the model.
func TestFlagValidation(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "models", "tinystories-656k")
	out := filepath.Join(t.TempDir(), "x.sinf")
	cfgFile := filepath.Join(model, "config.json") // a file that exists, where only existence is checked first
	conv := []string{"convert", "--model", model, "--first-layer", "0", "--last-layer", "2", "--out", out}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--model", "x", "--task", "tinystories", "--limit", "-1"}, "--limit -1: want ≥ 0 (0: all)"},
		{[]string{"eval", "--model", "x", "--task", "wikitext2", "--stride", "-1"}, "--stride -1: want ≥ 0 (0: the window less the BOS)"},
		{[]string{"eval", "--model", "x", "--task", "wikitext2", "--window", "-2"}, "--window -2: want ≥ 0 (0: min(context, 256))"},
		{[]string{"eval", "--model", "x", "--task", "tinystories", "--context", "-1"}, "--context -1: want ≥ 0 (0: the model's max_position_embeddings, at most 4096)"},
		{[]string{"profile", "--model", "x", "--dataset", "tinystories", "--out", out, "--chunk-size", "-1"}, "--chunk-size -1: want ≥ 0 (0: no chunk files)"},
		{[]string{"profile", "--model", "x", "--dataset", "tinystories", "--out", out, "--limit", "-1"}, "--limit -1: want ≥ 0 (0: all)"},
		{[]string{"merge", "--print-top", "-1", "a.scores"}, "--print-top -1: want ≥ 0 (0: print nothing)"},
		{[]string{"study", "--model", "x", "--task-scores", "a", "--model-scores", "b", "--out", out, "--limit", "-1"}, "--limit -1: want ≥ 0 (0: all)"},
		{[]string{"run", "--model", model, "--prompt", "Once", "--context", "513"}, "--context 513: above the model's max_position_embeddings 512"},
		{[]string{"eval", "--model", model, "--task", "tinystories", "--data-dir", "../../testdata/data", "--context", "513"}, "--context 513: above the model's max_position_embeddings 512"},
		{[]string{"study", "--model", model, "--task-scores", cfgFile, "--model-scores", cfgFile, "--out", out, "--data-dir", "../../testdata/data", "--context", "513"},
			"--context 513: above the model's max_position_embeddings 512"},
		{[]string{"run", "--model", model, "--prompt", "Once", "--verify"}, "--verify checks the checksums of a .sinf file; " + model + " is an HF checkpoint folder, which stores none"},
		{append(conv, "--seed", "3", "--task-scores", "a", "--model-scores", "b"), "--seed seeds --random's choice (the scores choose the neurons otherwise): add --random or drop --seed"},
		{append(conv, "--random", "--task-scores", "a"), "--random keeps random neurons and reads no scores: give --random or --task-scores/--model-scores, not both"},
		{append(conv, "--random", "--weight-aware"), "--weight-aware weighs the scores and --random reads none: drop one"},
		{append(conv, "--random", "--gamma", "0.5", "--memory-budget", "1MiB"), "--memory-budget chooses gamma: give --gamma or --memory-budget, not both"},
		{append(conv, "--random", "--context", "512"), "--context is the context --memory-budget sizes the KV cache for: add --memory-budget or drop --context"},
		{append(conv, "--random", "--kv-cache", "f16"), "--kv-cache is the KV cache type --memory-budget assumes: add --memory-budget or drop --kv-cache"},
		{append(conv, "--random", "--memory-budget", "1GiB", "--kv-cache", "q8"), `--kv-cache "q8": want f32 or f16`},
		{append(conv, "--random", "--memory-budget", "1MiB", "--context", "0"), "--context 0: want ≥ 1, the KV cache positions the budget holds"},
	} {
		_, err := run(t, c.args...)
		require.EqualError(t, err, c.want, "%v", c.args)
	}
	_, err := os.Stat(out)
	require.True(t, os.IsNotExist(err), "%s was written", out)
}

// TestWrongKindOfInput: a .sinf file where a score file or an HF folder is
// expected, and an HF folder where a .sinf file is expected, are named as
// such, with the command to use; a budget too small is given in binary units.
func TestWrongKindOfInput(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "models", "tinystories-656k")
	dir := t.TempDir()
	file := filepath.Join(dir, "x.sinf")
	_, err := run(t, "convert", "--quiet", "--model", model, "--random", "--first-layer", "0", "--last-layer", "2", "--out", file)
	require.NoError(t, err)
	notScores := file + ": not a score file: it is a .sinf model file (score files come from sinf profile and sinf merge)"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"merge", "--out", filepath.Join(dir, "m.scores"), file}, notScores},
		{[]string{"overlap", file, file}, notScores},
		{[]string{"convert", "--model", model, "--task-scores", file, "--model-scores", file, "--first-layer", "0", "--last-layer", "2", "--out", filepath.Join(dir, "y.sinf")}, notScores},
		{[]string{"convert", "--model", file, "--random", "--out", filepath.Join(dir, "y.sinf")},
			"--model " + file + " is a .sinf file: sinf convert reads the HF checkpoint folder (config.json, *.safetensors, tokenizer.json) it was made from; sinf run, eval and bench take .sinf files"},
		{[]string{"profile", "--model", file, "--dataset", "tinystories", "--out", filepath.Join(dir, "p.scores")},
			"--model " + file + " is a .sinf file: sinf profile reads the HF checkpoint folder (config.json, *.safetensors, tokenizer.json) it was made from; sinf run, eval and bench take .sinf files"},
		{[]string{"profile", "--model", filepath.Join(model, "config.json"), "--dataset", "tinystories", "--out", filepath.Join(dir, "p.scores")},
			"--model " + filepath.Join(model, "config.json") + " is a file: sinf profile reads an HF checkpoint folder (config.json, *.safetensors, tokenizer.json)"},
		{[]string{"inspect", model}, model + " is an HF checkpoint folder: this takes a .sinf file; make one with sinf convert, or run the folder with sinf run"},
		{[]string{"verify", model}, model + " is an HF checkpoint folder: this takes a .sinf file; make one with sinf convert, or run the folder with sinf run"},
	} {
		_, err := run(t, c.args...)
		require.EqualError(t, err, c.want, "%v", c.args)
	}
	_, err = run(t, "convert", "--model", model, "--random", "--first-layer", "0", "--last-layer", "2", "--memory-budget", "1KiB", "--out", filepath.Join(dir, "y.sinf"))
	require.Error(t, err)
	require.Regexp(t, `^memory budget 1\.0 KiB is too small: even gamma 0\.30 needs [\d.]+ MiB \(file [\d.]+ MiB \+ KV cache [\d.]+ KiB \+ runtime [\d.]+ MiB\); lower --context or --delta$`, err.Error())
}

// TestInputsCheckedFirst: score files swapped between --task-scores and
// --model-scores, a study's scores of another model and profile's --out
// folder are refused before any work (no file converted, no evaluation run,
// no prompt profiled).
func TestInputsCheckedFirst(t *testing.T) {
	model := sharedtest.Path(t, "models", "tinystories-656k")
	other := sharedtest.Path(t, "models", "stories260k")
	data := sharedtest.Path(t, "data")
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	for _, c := range [][]string{
		{"--model", model, "--dataset", "tinystories", "--out", p("ts.scores")},
		{"--model", model, "--dataset", "xsum", "--out", p("xsum.scores")},
		{"--model", other, "--dataset", "tinystories", "--out", p("other.scores")},
	} {
		_, err := run(t, append([]string{"profile", "--quiet", "--data-dir", data, "--limit", "2", "--max-new-tokens", "1"}, c...)...)
		require.NoError(t, err)
	}
	_, err := run(t, "merge", "--out", p("model.scores"), p("ts.scores"), p("xsum.scores"))
	require.NoError(t, err)

	_, err = run(t, "convert", "--model", model, "--task-scores", p("model.scores"), "--model-scores", p("ts.scores"),
		"--first-layer", "0", "--last-layer", "2", "--out", p("x.sinf"))
	require.EqualError(t, err, p("model.scores")+": task scores merged across 2 tasks (tinystories, xsum): the task ranking is one task's profiles "+
		"(sinf merge of that task's files); the model scores "+p("ts.scores")+" hold one: were --task-scores and --model-scores swapped?")

	studyOut := p("study")
	_, err = run(t, "study", "--in-process", "--model", model, "--task-scores", p("other.scores"), "--model-scores", p("model.scores"),
		"--tasks", "tinystories", "--limit", "1", "--data-dir", data, "--first-layer", "0", "--last-layer", "2", "--no-sweeps", "--out", studyOut)
	require.Error(t, err)
	require.Regexp(t, "^"+regexp.QuoteMeta(p("other.scores"))+`: scores of model [0-9a-f]{64}, but \S+tinystories-656k is model [0-9a-f]{64}$`, err.Error())
	entries, err := os.ReadDir(studyOut)
	require.NoError(t, err)
	for _, e := range entries {
		require.NotEqual(t, ".sinf", filepath.Ext(e.Name()), "study converted %s", e.Name())
		require.NotEqual(t, "results.json", e.Name(), "study evaluated before checking its scores")
	}

	_, err = run(t, "profile", "--quiet", "--model", model, "--data-dir", data, "--dataset", "tinystories", "--out", dir)
	require.EqualError(t, err, "--out "+dir+" is a folder; give a file name")
	_, err = run(t, "profile", "--quiet", "--model", model, "--data-dir", data, "--dataset", "tinystories", "--out", p("no/such/x.scores"))
	require.EqualError(t, err, "--out "+p("no/such/x.scores")+": cannot create a file in "+p("no/such")+": no such file or directory")
}

// TestOneWriterPerPath: a convert to a path another writer holds fails
// naming the lock (two converts to one path no longer both print "wrote");
// once the holder is gone without cleaning up, as after SIGKILL, the next
// convert removes the temporary file it left.
func TestOneWriterPerPath(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "models", "tinystories-656k")
	dir := t.TempDir()
	out := filepath.Join(dir, "x.sinf")
	tmp, release, err := format.CreateTemp(out)
	require.NoError(t, err)
	tmp.Close()
	args := []string{"convert", "--quiet", "--model", model, "--random", "--first-layer", "0", "--last-layer", "2", "--out", out}
	_, err = run(t, args...)
	require.EqualError(t, err, "sinf create "+out+": another process is writing this file (it holds "+filepath.Join(dir, ".x.sinf.lock")+
		"): wait for it to finish, or write to another path")
	release() // the holder dies: its lock goes, its temporary file stays
	_, err = os.Stat(tmp.Name())
	require.NoError(t, err)
	_, err = run(t, args...)
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "x.sinf", entries[0].Name())
}

// TestEvalFile: sinf eval --file scores a text file of the user's own. Its
// perplexity over a file holding one TinyStories paragraph equals the
// built-in task's over that paragraph (--offset to it, one window that fits
// in it): the same tokens, through the file path instead of the dataset's.
// Bad input is refused naming the flag or the file.
func TestEvalFile(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "models", "tinystories-656k")
	data := filepath.Join("..", "..", "testdata", "data")
	_, ex, err := dataset.LoadSelection("tinystories", data, dataset.Selection{Split: dataset.SplitAll})
	require.NoError(t, err)
	k := 0
	for i, e := range ex {
		if len(e.Text) > len(ex[k].Text) {
			k = i
		}
	}
	file := filepath.Join(t.TempDir(), "story.txt")
	require.NoError(t, os.WriteFile(file, []byte(ex[k].Text), 0o644))
	perplexity := func(args ...string) float64 {
		out, err := run(t, append([]string{"eval", "--quiet", "--json", "--model", model, "--window", "48", "--limit", "1"}, args...)...)
		require.NoError(t, err)
		var rep struct {
			Metrics map[string]float64 `json:"metrics"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		return rep.Metrics["perplexity"]
	}
	got := perplexity("--file", file)
	want := perplexity("--task", "tinystories", "--data-dir", data, "--split", "all", "--offset", strconv.Itoa(k))
	require.Equal(t, want, got)
	require.Greater(t, got, 1.0)
	require.Less(t, got, 2048.0) // below the vocabulary: better than uniform

	_, err = run(t, "eval", "--model", model)
	require.EqualError(t, err, "give one of --task (a built-in task) and --file (a text file's perplexity)")
	_, err = run(t, "eval", "--model", model, "--task", "tinystories", "--file", file)
	require.EqualError(t, err, "give one of --task (a built-in task) and --file (a text file's perplexity)")
	_, err = run(t, "eval", "--model", model, "--file", file, "--offset", "2")
	require.EqualError(t, err, "--offset: not with --file (one text, scored by perplexity)")
	missing := filepath.Join(t.TempDir(), "nosuch.txt")
	_, err = run(t, "eval", "--model", model, "--file", missing)
	require.EqualError(t, err, "--file: open "+missing+": no such file or directory")
	bad := filepath.Join(t.TempDir(), "bad.txt")
	require.NoError(t, os.WriteFile(bad, []byte("Once \xff upon"), 0o644))
	_, err = run(t, "eval", "--quiet", "--model", model, "--file", bad)
	require.EqualError(t, err, bad+": not UTF-8 text")
	short := filepath.Join(t.TempDir(), "short.txt")
	require.NoError(t, os.WriteFile(short, []byte("Once upon a time"), 0o644))
	_, err = run(t, "eval", "--quiet", "--model", model, "--file", short, "--window", "48")
	require.ErrorContains(t, err, "task "+short+": the text is ")
}

// TestFallbackNotes: convert's fallbacks print one line per reason, with the
// count and the first tensor when several share it.
func TestFallbackNotes(t *testing.T) {
	require.Equal(t, []string{
		"2 matrices (a [4 64], …): rows of 64 are not whole Q4_K blocks of 256, stored Q5_0 (as llama-quantize does; sinf inspect --tensors lists them)",
		"c [1 64]: rows of 64 are not whole Q6_K blocks of 256, stored Q8_0 (as llama-quantize does)",
	}, fallbackNotes([]convert.Fallback{
		{Tensor: "a", Shape: []int{4, 64}, Reason: "rows of 64 are not whole Q4_K blocks of 256, stored Q5_0"},
		{Tensor: "c", Shape: []int{1, 64}, Reason: "rows of 64 are not whole Q6_K blocks of 256, stored Q8_0"},
		{Tensor: "b", Shape: []int{4, 64}, Reason: "rows of 64 are not whole Q4_K blocks of 256, stored Q5_0"},
	}))
	require.Empty(t, fallbackNotes(nil))
}
