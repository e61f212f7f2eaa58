package runcmd_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/internal/sharedtest"
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
	var o, e bytes.Buffer
	app := &cli.App{Name: "sinf-run", Flags: runcmd.Flags(), Action: runcmd.Action(runcmd.OpenSinf), Writer: &o, ErrWriter: &e}
	err = app.Run(append([]string{"sinf-run"}, args...))
	return o.String(), e.String(), err
}

func TestJSONReport(t *testing.T) {
	file := slimFile(t)
	out, _, err := run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "8", "--json", "--threads", "2")
	require.NoError(t, err)
	var r runcmd.Report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, []int{1, 80, 147, 201, 282, 57}, r.PromptIDs)
	require.Len(t, r.IDs, 8)
	require.Equal(t, "selectinfer", r.Mode)
	require.Equal(t, []int{269, 269}, r.LoadedNeurons)   // round(0.7·384)
	require.Equal(t, []int{154, 154}, r.ComputedNeurons) // round(0.4·384)
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
	// Dense mode computes every loaded neuron.
	out, _, err = run("--model", file, "--prompt", "Once upon a time", "--max-tokens", "2", "--json", "--mode", "dense")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, []int{269, 269}, r.ComputedNeurons)
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
		{[]string{"--phi", "0.2"}, "delta exceeds phi"},
		{[]string{"--alpha", "0"}, "alpha"},
		{[]string{"--alpha", "1.5"}, "alpha"},
		{[]string{"--mode", "sparse"}, "unknown mode"},
		{[]string{"--max-tokens", "-1"}, "--max-tokens"},
		{[]string{"--top-p", "0"}, "--top-p"},
		{[]string{"--temperature", "-1"}, "--temperature"},
		{[]string{"--threads", "-3"}, "--threads"},
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
