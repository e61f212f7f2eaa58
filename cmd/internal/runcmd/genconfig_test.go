package runcmd_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/internal/sharedtest"
)

// fileWith converts tinystories-656k as slimFile does after edit changes the
// checkpoint's config.json or generation_config.json.
func fileWith(t *testing.T, edit func(ck *hf.Checkpoint)) string {
	t.Helper()
	ck, err := hf.Open(sharedtest.Path(t, "models", "tinystories-656k"))
	require.NoError(t, err)
	defer ck.Close()
	edit(ck)
	out := filepath.Join(t.TempDir(), "ts.sinf")
	_, err = convert.Convert(ck, out, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true, Seed: 1, FirstLayer: 0, LastLayer: 2, ExplicitRange: true})
	require.NoError(t, err)
	return out
}

func report(t *testing.T, args ...string) runcmd.Report {
	t.Helper()
	out, _, err := run(append(args, "--json", "--threads", "1")...)
	require.NoError(t, err)
	var r runcmd.Report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	return r
}

// TestGenerationConfigEOS (issue 16 item 6): generation_config.json's
// eos_token_id list stops generation, and config.json's EOS list counts even
// when tokenizer_config.json names an eos_token (the Llama-3.1 layout).
func TestGenerationConfigEOS(t *testing.T) {
	prompt := []string{"--prompt", "Once upon a time", "--max-tokens", "8"}
	base := report(t, append([]string{"--model", slimFile(t)}, prompt...)...)
	require.Len(t, base.IDs, 8)
	stop := base.IDs[3]
	require.NotContains(t, base.IDs[:3], stop)

	gen := fileWith(t, func(ck *hf.Checkpoint) {
		ck.GenerationConfig = fmt.Appendf(nil, `{"bos_token_id":1,"eos_token_id":[2,%d]}`, stop)
	})
	require.Equal(t, base.IDs[:4], report(t, append([]string{"--model", gen}, prompt...)...).IDs)

	cfg := fileWith(t, func(ck *hf.Checkpoint) {
		s := strings.Replace(string(ck.ConfigJSON), `"eos_token_id": 2`, fmt.Sprintf(`"eos_token_id": [2, %d]`, stop), 1)
		require.NotEqual(t, string(ck.ConfigJSON), s)
		ck.ConfigJSON, ck.GenerationConfig = []byte(s), nil
	})
	require.Equal(t, base.IDs[:4], report(t, append([]string{"--model", cfg}, prompt...)...).IDs)
}

// TestGenerationConfigSampling: generation_config.json's sampling defaults
// apply (do_sample, temperature, top_k, top_p), and each flag overrides its
// field.
func TestGenerationConfigSampling(t *testing.T) {
	file := slimFile(t)
	sampled := fileWith(t, func(ck *hf.Checkpoint) {
		ck.GenerationConfig = []byte(`{"eos_token_id":2,"do_sample":true,"temperature":1.5,"top_k":40}`)
	})
	args := []string{"--prompt", "Once upon a time", "--max-tokens", "12", "--seed", "3"}
	explicit := report(t, append([]string{"--model", file, "--temperature", "1.5", "--top-k", "40"}, args...)...)
	greedy := report(t, append([]string{"--model", file}, args...)...)
	require.NotEqual(t, greedy.IDs, explicit.IDs)
	require.Equal(t, explicit.IDs, report(t, append([]string{"--model", sampled}, args...)...).IDs)
	require.Equal(t, greedy.IDs, report(t, append([]string{"--model", sampled, "--temperature", "0"}, args...)...).IDs)
	other := report(t, append([]string{"--model", file, "--temperature", "1.5", "--top-k", "2"}, args...)...)
	require.Equal(t, other.IDs, report(t, append([]string{"--model", sampled, "--top-k", "2"}, args...)...).IDs)
}
