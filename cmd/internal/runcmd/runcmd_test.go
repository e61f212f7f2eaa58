package runcmd_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/internal/sinftest"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// slimFile converts tinystories-656k at γ=0.7, δ=0.3 (random selection) over
// both layers.
func slimFile(t *testing.T) string {
	t.Helper()
	ck, err := hf.Open(sharedtest.Path(t, "models", "tinystories-656k"))
	require.NoError(t, err)
	defer ck.Close()
	out := filepath.Join(t.TempDir(), "ts.sinf")
	_, err = convert.Convert(ck, out, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true, Seed: 1, FirstLayer: 0, LastLayer: 2, ExplicitRange: true})
	require.NoError(t, err)
	return out
}

// run runs the sinf-run command line in-process.
func run(args ...string) (stdout, stderr string, err error) {
	return runStdin("", args...)
}

// runStdin runs it with stdin as its standard input.
func runStdin(stdin string, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	app := &cli.App{Name: "sinf-run", Flags: runcmd.Flags(), Action: runcmd.Action(runcmd.OpenSinf), Reader: strings.NewReader(stdin), Writer: &o, ErrWriter: &e}
	err = app.Run(append([]string{"sinf-run"}, args...))
	return o.String(), e.String(), err
}

// TestShortFlagsStdinInterrupt: -m -p -n -t are --model --prompt
// --max-tokens --threads; --prompt - reads the prompt from standard input;
// Ctrl-C stops the run at the next token and it still prints its report
// (finish_reason interrupted) and, without --json, its timings.
func TestShortFlagsStdinInterrupt(t *testing.T) {
	file := slimFile(t)
	long, _, err := run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "6", "--json", "--threads", "1")
	require.NoError(t, err)
	short, _, err := run("-m", file, "-p", "Once upon a time", "-n", "6", "--json", "-t", "1")
	require.NoError(t, err)
	var a, b runcmd.Report
	require.NoError(t, json.Unmarshal([]byte(long), &a))
	require.NoError(t, json.Unmarshal([]byte(short), &b))
	require.Equal(t, a.IDs, b.IDs)
	piped, _, err := runStdin("Once upon a time", "-m", file, "-p", "-", "-n", "6", "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(piped), &b))
	require.Equal(t, a.PromptIDs, b.PromptIDs)
	require.Equal(t, a.IDs, b.IDs)
	_, _, err = runStdin("", "-m", file, "-p", "-")
	require.ErrorContains(t, err, "standard input held nothing")

	// an interrupt that has arrived before the first token: one token, then the report
	defer runcmd.SetInterrupt(func(c chan<- os.Signal) { c <- os.Interrupt })()
	out, _, err := run("-m", file, "-p", "Once upon a time", "-n", "50", "--json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	require.Equal(t, "interrupted", b.FinishReason)
	require.Len(t, b.IDs, 1)
	_, stderr, err := run("-m", file, "-p", "Once upon a time", "-n", "50")
	require.NoError(t, err)
	require.Contains(t, stderr, "decode ")
	require.Contains(t, stderr, ", 1 tokens, peak RSS")
}

func TestJSONReport(t *testing.T) {
	file := slimFile(t)
	out, _, err := run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "8", "--json", "--threads", "2")
	require.NoError(t, err)
	var r runcmd.Report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, []int{1, 80, 147, 201, 282, 57}, r.PromptIDs)
	require.Len(t, r.IDs, 8)
	require.Equal(t, "gatefirst", r.Mode)              // the default for a file that drops neurons
	require.Equal(t, []int{269, 269}, r.LoadedNeurons) // round(0.7·384)
	require.InDelta(t, 0.2497, r.Phi, 1e-4)            // (3·0.4 − 269/384)/2 → round(φ·N) = 96
	require.Equal(t, []int{96, 96}, r.ComputedNeurons) // up and down rows per token
	fi, _ := os.Stat(file)
	require.Equal(t, fi.Size(), r.MappedBytes)
	require.Greater(t, r.PeakRSSBytes, int64(0))
	require.NotEmpty(t, r.Text)
	for _, key := range []string{"prompt_ids", "ids", "text", "prefill_tokens_per_s", "decode_tokens_per_s", "peak_rss_bytes", "loaded_neurons", "computed_neurons", "mapped_bytes"} {
		require.Contains(t, out, `"`+key+`"`)
	}
	require.Equal(t, "length", r.FinishReason)
	// A context of 8 positions holds the 6 prompt tokens and the first 2
	// generated ones; the third is sampled from the last position, never
	// fed. Generation stops there, and says so.
	out, stderr, err := run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "8", "--json", "--context", "8")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "context", r.FinishReason)
	require.Len(t, r.IDs, 3)
	require.Equal(t, "note: generation stopped at the end of the context (8 positions) after 3 tokens; raise --context for more\n", stderr)
	// --logprobs: one entry per generated id, with --top-logprobs most
	// likely (greedy: the chosen one first), log probabilities below 0.
	out, _, err = run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "4", "--json", "--logprobs", "--top-logprobs", "2")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Logprobs, len(r.IDs))
	for i, e := range r.Logprobs {
		require.Equal(t, r.IDs[i], e.ID)
		require.Len(t, e.Top, 2)
		require.Equal(t, e.ID, e.Top[0].ID)
		require.Equal(t, e.Logprob, e.Top[0].Logprob)
		require.Less(t, e.Logprob, 0.0)
		require.GreaterOrEqual(t, e.Top[0].Logprob, e.Top[1].Logprob)
	}
	// Dense mode computes every loaded neuron.
	out, _, err = run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "2", "--json", "--mode", "dense")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, []int{269, 269}, r.ComputedNeurons)
	// An F16 KV cache generates the float32 cache's greedy ids here
	// (runtime's TestKVCacheF16 bounds the logits).
	out, _, err = run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "8", "--json", "--threads", "2", "--kv-cache", "f16")
	require.NoError(t, err)
	var r16 runcmd.Report
	require.NoError(t, json.Unmarshal([]byte(out), &r16))
	out, _, err = run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "8", "--json", "--threads", "2")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, r.IDs, r16.IDs)
}

// TestBadInput: each bad run is a clear error, not a panic.
func TestBadInput(t *testing.T) {
	file := slimFile(t)
	long := strings.Repeat("Once upon a time there was a dog. ", 200)
	newer := filepath.Join(t.TempDir(), "newer.sinf")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	nb := append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(nb[4:], format.Version+1)
	require.NoError(t, os.WriteFile(newer, nb, 0o644))
	corrupt := filepath.Join(t.TempDir(), "corrupt.sinf")
	f, err := format.Open(file)
	require.NoError(t, err)
	info, ok := f.Info("model.layers.1.mlp.up_proj.weight")
	require.True(t, ok)
	f.Close()
	cb := append([]byte(nil), b...)
	cb[info.Offset+5] ^= 0xff
	require.NoError(t, os.WriteFile(corrupt, cb, 0o644))

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--phi", "0.8"}, "exceeds gamma"},
		{[]string{"--mode", "selectinfer", "--phi", "0.2"}, "delta exceeds phi"},
		{[]string{"--mode", "selectinfer", "--alpha", "0"}, "alpha"},
		{[]string{"--alpha", "1.5"}, "alpha"},
		{[]string{"--mode", "sparse"}, "unknown mode"},
		{[]string{"--max-tokens", "-1"}, "--max-tokens"},
		{[]string{"--top-p", "0"}, "--top-p"},
		{[]string{"--temperature", "-1"}, "--temperature"},
		{[]string{"--threads", "-3"}, "--threads"},
		{[]string{"--kv-cache", "q8_0"}, `--kv-cache "q8_0": want f32 or f16`},
		{[]string{"--kv-cache", "f16", "--device", "cuda"}, "--kv-cache f16: the CPU's; --device cuda keeps its own cache"},
		{[]string{"--min-p", "2"}, "--min-p 2: want a fraction in [0, 1]"},
		{[]string{"--repeat-last-n", "-5"}, "--repeat-last-n -5"},
		{[]string{"--frequency-penalty", "3"}, "--frequency-penalty 3"},
		{[]string{"--top-logprobs", "2"}, "--top-logprobs needs --logprobs"},
		{[]string{"--format", "json"}, `--format: this model's vocabulary has no token for "{}[]"`},
		{[]string{"--format", filepath.Join(t.TempDir(), "none.json")}, "--format: open"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--prompt", ""}, "empty prompt"},
		{[]string{"--prompt", long}, "context"},
		{[]string{"--model", newer}, "version"},
		{[]string{"--model", corrupt, "--verify"}, "model.layers.1.mlp.up_proj.weight"},
		{[]string{"--model", filepath.Join(t.TempDir(), "missing.sinf")}, "missing.sinf"},
		{[]string{"--model", sharedtest.Path(t, "models", "tinystories-656k")}, sharedtest.Path(t, "models", "tinystories-656k") +
			" is an HF checkpoint folder: this takes a .sinf file; make one with sinf convert, or run the folder with sinf run"},
		{[]string{"--model", t.TempDir()}, "is a folder: this takes a .sinf file"},
	} {
		args := append([]string{"--model", file, "--prompt", "Once upon a time", "--max-tokens", "2"}, c.args...)
		_, _, err := run(args...)
		require.Error(t, err, "%v", c.args)
		require.Contains(t, err.Error(), c.want, "%v", c.args)
	}
}

// TestFullFileRunsDense: a γ=1 file (every neuron kept, the dense baseline)
// runs dense unless --mode says otherwise, and says so; --mode selectinfer
// still runs sparse decode on it.
func TestFullFileRunsDense(t *testing.T) {
	ck, err := hf.Open(sharedtest.Path(t, "models", "tinystories-656k"))
	require.NoError(t, err)
	defer ck.Close()
	file := filepath.Join(t.TempDir(), "full.sinf")
	_, err = convert.Convert(ck, file, convert.Options{Gamma: 1, Delta: 0.3, Random: true, Seed: 1, FirstLayer: 0, LastLayer: 2, ExplicitRange: true})
	require.NoError(t, err)
	out, stderr, err := run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "2", "--json")
	require.NoError(t, err)
	var r runcmd.Report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "dense", r.Mode)
	require.Equal(t, []int{384, 384}, r.ComputedNeurons)
	require.Equal(t, "note: the file keeps every FFN neuron of its sliced layers (gamma 1), so it runs dense; give --mode selectinfer or coreinfer for sparse decode\n", stderr)

	out, stderr, err = run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "2", "--json", "--mode", "selectinfer")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "selectinfer", r.Mode)
	require.Equal(t, []int{154, 154}, r.ComputedNeurons)
	require.Empty(t, stderr)
}

// TestRunContext (issue 16 items 4, 9): the KV cache of a run is what it
// needs (prompt + --max-tokens), at most the model's maximum; a --context
// above the maximum, or a prompt that does not fit, is refused naming the
// limit (a sliding window names itself).
func TestRunContext(t *testing.T) {
	cfg := runtime.Config{MaxPositions: 512}
	for _, c := range []struct {
		flag, prompt, maxTokens, want int
		err                           string
	}{
		{0, 6, 128, 134, ""},
		{0, 6, 0, 7, ""},
		{0, 6, 10000, 512, ""},
		{300, 6, 10000, 300, ""},
		{513, 6, 8, 0, "--context 513: above the model's context (max_position_embeddings 512)"},
		{0, 512, 8, 0, "the prompt is 512 tokens and leaves no room in the model's context (max_position_embeddings 512): shorten it"},
	} {
		got, err := runcmd.RunContext(cfg, c.flag, c.prompt, c.maxTokens)
		if c.err != "" {
			require.EqualError(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
	cfg.SlidingWindow = 16
	_, err := runcmd.RunContext(cfg, 0, 20, 8)
	require.EqualError(t, err, "the prompt is 20 tokens and leaves no room in the model's context (sliding_window 16, from config.json's use_sliding_window: sinf computes full attention, which equals sliding-window attention only within the window): shorten it")
	got, err := runcmd.RunContext(cfg, 0, 10, 8)
	require.NoError(t, err)
	require.Equal(t, 16, got)
}

// TestRunRefusesHugeMaxPositions (issue 16 item 4): a config.json with
// max_position_embeddings 2147483647 is refused with the field named, not
// an out-of-memory crash.
func TestRunRefusesHugeMaxPositions(t *testing.T) {
	file := slimFile(t)
	out := filepath.Join(t.TempDir(), "huge.sinf")
	sinftest.RewriteMetadata(t, file, out, func(m *format.Metadata) {
		var cfg map[string]any
		require.NoError(t, json.Unmarshal(m.Config, &cfg))
		cfg["max_position_embeddings"] = 2147483647
		m.Config, _ = json.Marshal(cfg)
	})
	_, _, err := run("--model", out, "--prompt", "Once upon a time", "--max-tokens", "4", "--threads", "1")
	require.EqualError(t, err, out+": metadata field config: field max_position_embeddings 2147483647 is above this runtime's limit of 16777216")
}

// TestTruncatedWhileMapped (issue 16 item 3): a .sinf file truncated while
// a run has it mapped gives an error naming the file (the read of a page
// past the new end is a SIGBUS, which killed the process with a goroutine
// dump), on the calling goroutine and on the kernel workers alike; Verify
// says the same; with --no-mmap the file is in memory and the run does not
// notice.
func TestTruncatedWhileMapped(t *testing.T) {
	file := slimFile(t)
	want := func() []int {
		m, _, f, err := runtime.OpenFile(file, runtime.OpenOptions{})
		require.NoError(t, err)
		defer f.Close()
		p := kernels.NewPool(2)
		defer p.Close()
		res, err := m.NewSession(p, 64).Generate([]int{1, 80, 147}, runtime.GenerateOptions{MaxTokens: 4})
		require.NoError(t, err)
		return res.IDs
	}()
	fault := `^` + regexp.QuoteMeta(file) + `: file changed or was truncated while mapped \(a read of its weights at address 0x[0-9a-f]+ faulted\): copy it again \(a \.sinf file on a filesystem that cannot keep a mapping runs with --no-mmap, read into memory\)$`
	for _, threads := range []int{1, 2} {
		m, _, f, err := runtime.OpenFile(file, runtime.OpenOptions{})
		require.NoError(t, err)
		inMem, _, fm, err := runtime.OpenFile(file, runtime.OpenOptions{NoMmap: true})
		require.NoError(t, err)
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		require.NoError(t, os.Truncate(file, format.HeaderSize))
		p := kernels.NewPool(threads)
		_, err = m.NewSession(p, 64).Generate([]int{1, 80, 147}, runtime.GenerateOptions{MaxTokens: 4})
		require.Error(t, err)
		require.Regexp(t, fault, err.Error(), "threads %d", threads)
		err = f.Verify()
		require.Error(t, err)
		require.Regexp(t, `^`+regexp.QuoteMeta(file)+`: file changed or was truncated while mapped \(a read at address 0x[0-9a-f]+ faulted\)$`, err.Error())
		res, err := inMem.NewSession(p, 64).Generate([]int{1, 80, 147}, runtime.GenerateOptions{MaxTokens: 4})
		require.NoError(t, err)
		require.Equal(t, want, res.IDs)
		p.Close()
		f.Close()
		fm.Close()
		require.NoError(t, os.WriteFile(file, b, 0o644))
	}
	// --no-mmap through the command: MappedBytes 0, the same tokens.
	out, _, err := run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "4", "--json", "--no-mmap", "--threads", "1")
	require.NoError(t, err)
	var r runcmd.Report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Zero(t, r.MappedBytes)
	require.Len(t, r.IDs, 4)
}

// TestVerifyOnFirstOpen (issue 16 item 15): a .sinf file whose tensor data
// was damaged (after copying to the device) is refused on its first run
// without --verify, naming the tensor; a file that passed is remembered by
// identity and not checked again, until it is rewritten.
func TestVerifyOnFirstOpen(t *testing.T) {
	cache := runtime.VerifyCache{Path: filepath.Join(t.TempDir(), "verified")}
	t.Setenv("SINF_VERIFY_CACHE", cache.Path)
	file := slimFile(t)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	f, err := format.Open(file)
	require.NoError(t, err)
	info, _ := f.Info("model.layers.1.mlp.up_proj.weight")
	f.Close()
	corrupt := filepath.Join(t.TempDir(), "copied.sinf")
	cb := append([]byte(nil), b...)
	cb[info.Offset+5] ^= 0xff
	require.NoError(t, os.WriteFile(corrupt, cb, 0o644))

	_, _, err = run("--model", corrupt, "--prompt", "Once upon a time", "--max-tokens", "2", "--threads", "1")
	require.EqualError(t, err, fmt.Sprintf(`%s: tensor "model.layers.1.mlp.up_proj.weight" data at offset %d: checksum 0x%08x does not match stored 0x%08x: the data is corrupt`,
		corrupt, info.Offset, format.Checksum(cb[info.Offset:info.Offset+info.Length]), info.CRC32C))
	require.False(t, cache.Verified(corrupt, nil))

	require.False(t, cache.Verified(file, nil))
	_, _, err = run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "2", "--threads", "1")
	require.NoError(t, err)
	require.True(t, cache.Verified(file, nil), "a file that passed is remembered")
	lines, err := os.ReadFile(cache.Path)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(lines), "\n"))
	// The same run again adds nothing; a rewrite of the file (a new copy)
	// is a new identity, checked again.
	_, _, err = run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "2", "--threads", "1")
	require.NoError(t, err)
	lines2, _ := os.ReadFile(cache.Path)
	require.Equal(t, string(lines), string(lines2))
	// The identity is the open descriptor's: a file opened before its path
	// was replaced keeps its own pass, and the new file has none.
	opened, err := format.Open(file)
	require.NoError(t, err)
	defer opened.Close()
	require.NoError(t, os.Remove(file))
	require.NoError(t, os.WriteFile(file, cb, 0o644))
	require.False(t, cache.Verified(file, nil))
	require.True(t, cache.Verified(file, opened.Stat()))
	_, _, err = run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "2", "--threads", "1")
	require.ErrorContains(t, err, `tensor "model.layers.1.mlp.up_proj.weight" data`)
}
