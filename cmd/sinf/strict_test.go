package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"
	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert/eval"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/internal/sharedtest"
)

// runStderr runs the sinf command line in-process and returns its stdout
// and stderr.
func runStderr(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var o, e bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &o, &e
	err := app.Run(append([]string{"sinf"}, args...))
	return o.String(), e.String(), err
}

// withExtraTensor copies stories260k into a temp folder with one more
// tensor, name, that a llama model does not have.
func withExtraTensor(t *testing.T, name string) string {
	t.Helper()
	src := sharedtest.Path(t, "models", "stories260k")
	ck, err := hf.Open(src)
	require.NoError(t, err)
	defer ck.Close()
	dir := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	views := map[string]safetensors.TensorView{}
	for _, n := range ck.Names() {
		tt, err := ck.Tensor(n)
		require.NoError(t, err)
		require.Equal(t, "F32", tt.DType.String())
		shape := []uint64{}
		for _, d := range tt.Shape {
			shape = append(shape, uint64(d))
		}
		v, err := safetensors.NewTensorView(safetensors.F32, shape, append([]byte(nil), tt.Data...))
		require.NoError(t, err)
		views[n] = v
	}
	v, err := safetensors.NewTensorView(safetensors.F32, []uint64{8}, make([]byte, 32))
	require.NoError(t, err)
	views[name] = v
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	require.NoError(t, safetensors.SerializeToWriter(views, nil, f))
	require.NoError(t, f.Close())
	return dir
}

// TestStrictFlag (issue 23 item 5): sinf run and sinf convert skip a tensor
// the architecture does not have, with a warning naming it, and refuse it
// with --strict.
func TestStrictFlag(t *testing.T) {
	const extra = "model.layers.0.self_attn.q_norm.weight"
	dir := withExtraTensor(t, extra)
	warning := "warning: " + dir + ": tensor " + extra + " is not part of a llama model (HF LlamaForCausalLM): skipped, as HF skips unexpected weights with a warning; is config.json's model_type right? (--strict refuses them)\n"
	refusal := dir + ": tensor " + extra + " is not part of a llama model (HF LlamaForCausalLM), and --strict refuses tensors the model does not read: is config.json's model_type right?"

	out, stderr, err := runStderr(t, "run", "--model", dir, "--prompt", "Once upon a time", "--max-tokens", "2", "--json")
	require.NoError(t, err)
	require.Contains(t, out, `"ids"`)
	require.Contains(t, stderr, warning)
	_, _, err = runStderr(t, "run", "--model", dir, "--prompt", "Once upon a time", "--max-tokens", "2", "--strict")
	require.EqualError(t, err, refusal)

	sinf := filepath.Join(t.TempDir(), "m.sinf")
	_, stderr, err = runStderr(t, "convert", "--model", dir, "--random", "--first-layer", "0", "--last-layer", "5", "--out", sinf, "--quiet")
	require.NoError(t, err)
	require.Contains(t, stderr, warning)
	strictOut := filepath.Join(t.TempDir(), "s.sinf")
	_, _, err = runStderr(t, "convert", "--model", dir, "--random", "--first-layer", "0", "--last-layer", "5", "--out", strictOut, "--quiet", "--strict")
	require.EqualError(t, err, refusal)
	require.NoFileExists(t, strictOut)
}

// TestTokenizeWarnsMergeless (issue 23 item 5): sinf tokenize warns about
// a BPE vocabulary with tokens of several characters and no merges (and
// encodes character by character, as HF does).
func TestTokenizeWarnsMergeless(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"),
		[]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": []}}`), 0o644))
	out, stderr, err := runStderr(t, "tokenize", "--model", dir, "--text", "ab")
	require.NoError(t, err)
	require.Equal(t, "[0,1]\n", out)
	require.Equal(t, "warning: tokenizer "+dir+`: tokenizer.json: model.merges is empty, but model.vocab has 1 token of more than one character (such as "ab"), which only merges build: text is encoded character by character (as HF does), so the file is probably broken (were its merges lost?)`+"\n", stderr)
}

// TestStudyStrict: sinf study prints the folder's warnings once, as run and
// convert do, and --strict refuses the tensor before any file is converted
// or run evaluated.
func TestStudyStrict(t *testing.T) {
	const extra = "model.layers.0.self_attn.q_norm.weight"
	dir := withExtraTensor(t, extra)
	data := sharedtest.Path(t, "data")
	warning := "warning: " + dir + ": tensor " + extra + " is not part of a llama model (HF LlamaForCausalLM): skipped, as HF skips unexpected weights with a warning; is config.json's model_type right? (--strict refuses them)\n"
	refusal := dir + ": tensor " + extra + " is not part of a llama model (HF LlamaForCausalLM), and --strict refuses tensors the model does not read: is config.json's model_type right?"
	work := t.TempDir()
	sc := filepath.Join(work, "ts.scores")
	_, _, err := runStderr(t, "profile", "--quiet", "--model", dir, "--data-dir", data, "--dataset", "tinystories", "--limit", "2", "--max-new-tokens", "1", "--out", sc)
	require.NoError(t, err)
	args := []string{"study", "--in-process", "--model", dir, "--task-scores", sc, "--model-scores", sc, "--tasks", "tinystories",
		"--limit", "1", "--data-dir", data, "--first-layer", "0", "--last-layer", "5", "--no-sweeps", "--context", "64"}

	out := filepath.Join(work, "strict")
	_, _, err = runStderr(t, append(args, "--strict", "--out", out)...)
	require.EqualError(t, err, refusal)
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	for _, e := range entries {
		require.NotEqual(t, ".sinf", filepath.Ext(e.Name()), "study converted %s", e.Name())
		require.NotEqual(t, "results.json", e.Name(), "study evaluated")
	}

	_, stderr, err := runStderr(t, append(args, "--out", filepath.Join(work, "lenient"))...)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(stderr, warning), stderr)
}

// TestStudySubprocessStrict: the evaluations a study runs as `sinf eval`
// subprocesses get --strict when the study has it.
func TestStudySubprocessStrict(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "fake-sinf")
	argsFile := filepath.Join(dir, "args")
	require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\necho \"$@\" > "+argsFile+"\necho '{\"task\":\"tinystories\",\"kind\":\"perplexity\",\"n\":1,\"metrics\":{\"perplexity\":2}}'\n"), 0o755))
	for _, strict := range []bool{false, true} {
		m, err := subprocessRunner(exe)("model-dir", "tinystories", eval.Options{Strict: strict})
		require.NoError(t, err)
		require.Equal(t, 2.0, m.Result.Metrics["perplexity"])
		b, err := os.ReadFile(argsFile)
		require.NoError(t, err)
		require.Equal(t, strict, strings.Contains(" "+strings.TrimSpace(string(b))+" ", " --strict "), string(b))
	}
}
