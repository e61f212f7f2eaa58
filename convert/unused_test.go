package convert_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/nlpodyssey/safetensors"
	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/internal/sharedtest"
)

var stDTypes = map[format.DType]safetensors.DType{format.F32: safetensors.F32, format.F16: safetensors.F16, format.BF16: safetensors.BF16}

// editedCopy copies a shared model folder into a temp folder, lets edit add
// or change tensors (name → dtype, shape, data), and returns the folder.
func editedCopy(t *testing.T, name string, edit func(tensors map[string]format.Tensor)) string {
	t.Helper()
	srcDir := sharedtest.Path(t, "models", name)
	src, err := hf.Open(srcDir)
	require.NoError(t, err)
	defer src.Close()
	dir := copyConfigFiles(t, srcDir)
	tensors := map[string]format.Tensor{}
	for _, n := range src.Names() {
		tt, err := src.Tensor(n)
		require.NoError(t, err)
		tt.Data = append([]byte(nil), tt.Data...)
		tensors[n] = tt
	}
	edit(tensors)
	views := map[string]safetensors.TensorView{}
	for n, tt := range tensors {
		shape := []uint64{}
		for _, d := range tt.Shape {
			shape = append(shape, uint64(d))
		}
		v, err := safetensors.NewTensorView(stDTypes[tt.DType], shape, tt.Data)
		require.NoError(t, err)
		views[n] = v
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	require.NoError(t, safetensors.SerializeToWriter(views, nil, f))
	require.NoError(t, f.Close())
	return dir
}

// TestTiedLMHeadIgnored (issue 16 item 7): a tied model that also stores a
// different lm_head.weight runs with the embedding as its head, as HF's
// tie_weights does (the logits equal the model without that lm_head
// exactly), says so, and the .sinf file stores the shared matrix once.
func TestTiedLMHeadIgnored(t *testing.T) {
	dir := editedCopy(t, "stories260k", func(ts map[string]format.Tensor) {
		h := ts["model.embed_tokens.weight"]
		h.Name, h.Data = "lm_head.weight", append([]byte(nil), h.Data...)
		for i := 0; i < len(h.Data); i += 4 {
			h.Data[i+3] ^= 0x40 // a different matrix
		}
		ts[h.Name] = h
	})
	ck, m, err := hf.Load(dir)
	require.NoError(t, err)
	defer ck.Close()
	require.Equal(t, []string{"lm_head.weight: ignored: it differs from model.embed_tokens.weight, but tie_word_embeddings is true (config.json), so the output projection is the embedding (as HF ties them)"}, ck.Ignored)
	_, ref := openHF(t, "stories260k")
	prompt := []int{1, 403, 407, 261}
	got, err := m.NewSession(pool(t), 16).Forward(prompt, false)
	require.NoError(t, err)
	want, err := ref.NewSession(pool(t), 16).Forward(prompt, false)
	require.NoError(t, err)
	require.Equal(t, want, got, "the tied head must be the embedding, not the stored lm_head")

	out := filepath.Join(t.TempDir(), "m.sinf")
	rep, err := convert.Convert(ck, out, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true}))
	require.NoError(t, err)
	require.Equal(t, ck.Ignored, rep.Ignored)
	f, err := format.Open(out)
	require.NoError(t, err)
	defer f.Close()
	require.False(t, f.Has("lm_head.weight"), "a tied model stores the shared matrix once")
	require.True(t, f.Has("model.embed_tokens.weight"))
}

// TestUnusedTensors (issue 16 item 8): every stored tensor is read or
// reported; a bias the config does not provide for is an error naming the
// tensor and the field, at load and at conversion (before anything is
// written).
func TestUnusedTensors(t *testing.T) {
	bias := func(name string, n int) func(map[string]format.Tensor) {
		return func(ts map[string]format.Tensor) {
			ts[name] = format.Tensor{Name: name, DType: format.F32, Shape: []int{n}, Data: make([]byte, 4*n)}
		}
	}
	cases := []struct {
		model, tensor string
		n             int
		want          string
	}{
		{"stories260k", "model.layers.0.self_attn.q_proj.bias", 64,
			`tensor model.layers.0.self_attn.q_proj.bias is stored, but config.json field attention_bias is not true, so HF builds no attention bias and it would be ignored, which changes the result: set "attention_bias": true or remove the tensor`},
		{"stories260k", "model.layers.1.mlp.up_proj.bias", 172,
			"tensor model.layers.1.mlp.up_proj.bias is stored, but config.json field mlp_bias is not true, so HF builds no MLP bias and it would be ignored, which changes the result (sinf does not run MLP biases)"},
		{"tiny-random-qwen2", "model.layers.1.self_attn.o_proj.bias", 64,
			"tensor model.layers.1.self_attn.o_proj.bias is stored, but HF Qwen2Attention has no o_proj bias, so it would be ignored, which changes the result: is config.json's model_type right?"},
	}
	for _, c := range cases {
		t.Run(c.tensor, func(t *testing.T) {
			dir := editedCopy(t, c.model, bias(c.tensor, c.n))
			_, _, err := hf.Load(dir)
			require.EqualError(t, err, dir+": "+c.want)
			ck, err := hf.Open(dir)
			require.NoError(t, err)
			defer ck.Close()
			out := filepath.Join(t.TempDir(), "m.sinf")
			_, err = convert.Convert(ck, out, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true}))
			require.EqualError(t, err, dir+": "+c.want)
			require.NoFileExists(t, out)
		})
	}

	// A RoPE buffer is harmless: reported, not stored.
	dir := editedCopy(t, "stories260k", bias("model.layers.0.self_attn.rotary_emb.inv_freq", 4))
	ck, err := hf.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	out := filepath.Join(t.TempDir(), "m.sinf")
	rep, err := convert.Convert(ck, out, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true}))
	require.NoError(t, err)
	require.Equal(t, []string{"model.layers.0.self_attn.rotary_emb.inv_freq: ignored: a RoPE buffer, recomputed from rope_theta"}, rep.Ignored)
}

// TestConvertValidatesAttention (issue 16 item 13): a wrong attention
// shape is refused by convert, naming the tensor and both shapes, before
// any file is written (it used to write a file sinf-run refused).
func TestConvertValidatesAttention(t *testing.T) {
	dir := editedCopy(t, "stories260k", func(ts map[string]format.Tensor) {
		k := ts["model.layers.3.self_attn.k_proj.weight"]
		k.Shape = []int{16, 64}
		k.Data = k.Data[:16*64*4]
		ts[k.Name] = k
	})
	ck, err := hf.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	out := filepath.Join(t.TempDir(), "m.sinf")
	_, err = convert.Convert(ck, out, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true}))
	require.EqualError(t, err, dir+": tensor model.layers.3.self_attn.k_proj.weight: expected shape [32 64], found [16 64]")
	require.NoFileExists(t, out)
}

// TestConvertRefusesBadTokenizer (issue 16 items 2, 13): convert builds the
// tokenizer it embeds, so a Split regex that backtracks catastrophically is
// refused, naming the folder, the file, the field and the pattern, and no
// file is written.
func TestConvertRefusesBadTokenizer(t *testing.T) {
	dir := editedCopy(t, "stories260k", func(map[string]format.Tensor) {})
	p := filepath.Join(dir, "tokenizer.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	m["pre_tokenizer"] = json.RawMessage(`{"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": false}`)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	ck, err := hf.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	out := filepath.Join(t.TempDir(), "m.sinf")
	_, err = convert.Convert(ck, out, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true}))
	require.EqualError(t, err, "tokenizer "+dir+`: tokenizer.json: pre_tokenizer.pattern.Regex: pattern "(a+)+$" backtracks catastrophically: matching "aaaaaaaaaaaaaaaaaaaaaaaaaaaa!" ran past 100ms (it would hang encoding); refused`)
	require.NoFileExists(t, out)
}

// TestConvertF16Overflow (issue 16 item 10): an F32 weight beyond F16's
// range is refused at conversion to F16, naming the tensor, the element and
// the value (it became ±Inf, which verify passed); the largest F16 value
// itself converts, and BF16 holds the big one.
func TestConvertF16Overflow(t *testing.T) {
	set := func(v float32) string {
		return editedCopy(t, "stories260k", func(ts map[string]format.Tensor) {
			w := ts["model.layers.1.self_attn.v_proj.weight"]
			binary.LittleEndian.PutUint32(w.Data[4*70:], math.Float32bits(v))
		})
	}
	conv := func(dir string, dt format.DType) error {
		ck, err := hf.Open(dir)
		require.NoError(t, err)
		defer ck.Close()
		_, err = convert.Convert(ck, filepath.Join(t.TempDir(), "m.sinf"), allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true, DType: dt}))
		return err
	}
	big := set(-70000)
	require.EqualError(t, conv(big, format.F16), "tensor model.layers.1.self_attn.v_proj.weight [32 64]: element 70 is -70000, outside the F16 range (±65504), so it would be stored as ±Inf: convert with --dtype bf16 or f32")
	require.NoError(t, conv(big, format.BF16))
	require.NoError(t, conv(set(65504), format.F16))
}

// TestConvertTruncatedSource (attacker pass, as issue 16 item 3 for the
// converter): a model.safetensors truncated while convert has it mapped is
// an error naming the folder, no output file is left, and the process is
// not killed by the SIGBUS.
func TestConvertTruncatedSource(t *testing.T) {
	dir := editedCopy(t, "stories260k", func(map[string]format.Tensor) {})
	ck, err := hf.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	require.NoError(t, os.Truncate(filepath.Join(dir, "model.safetensors"), 4096))
	out := filepath.Join(t.TempDir(), "m.sinf")
	_, err = convert.Convert(ck, out, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true}))
	require.Error(t, err)
	require.Regexp(t, `^`+regexp.QuoteMeta(dir)+`: file changed or was truncated while mapped \(a read of its weights at address 0x[0-9a-f]+ faulted\)`, err.Error())
	require.NoFileExists(t, out)
	entries, err := os.ReadDir(filepath.Dir(out))
	require.NoError(t, err)
	require.Empty(t, entries, "a temporary file was left behind")
}

// setConfig edits dir/config.json: key set to v, or removed when v is nil.
func setConfig(t *testing.T, dir, key string, v any) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	if v == nil {
		delete(m, key)
	} else {
		m[key] = v
	}
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
}

// TestTieDefaultUntied (issue 23 item 5, a regression): a config.json
// without tie_word_embeddings is untied, as HF's LlamaConfig and
// Qwen2Config default it, so a stored lm_head.weight is the output
// projection: the logits equal those of the same folder with an explicit
// "tie_word_embeddings": false exactly, and differ from the tied model's.
// Without an lm_head.weight the load is refused, saying where false came
// from.
func TestTieDefaultUntied(t *testing.T) {
	withHead := func(ts map[string]format.Tensor) {
		h := ts["model.embed_tokens.weight"]
		h.Name, h.Data = "lm_head.weight", append([]byte(nil), h.Data...)
		for i := 0; i < len(h.Data); i += 4 {
			h.Data[i+3] ^= 0x80 // the negated embedding: a different matrix, finite logits
		}
		ts[h.Name] = h
	}
	absent := editedCopy(t, "stories260k", withHead)
	setConfig(t, absent, "tie_word_embeddings", nil)
	explicit := editedCopy(t, "stories260k", withHead)
	setConfig(t, explicit, "tie_word_embeddings", false)

	ck, m, err := hf.Load(absent)
	require.NoError(t, err)
	defer ck.Close()
	require.False(t, ck.Config.TieEmbeddings)
	require.Empty(t, ck.Ignored, "the stored lm_head is read, not ignored")
	ck2, m2, err := hf.Load(explicit)
	require.NoError(t, err)
	defer ck2.Close()
	_, tied := openHF(t, "stories260k")
	prompt := []int{1, 403, 407, 261}
	got, err := m.NewSession(pool(t), 16).Forward(prompt, false)
	require.NoError(t, err)
	want, err := m2.NewSession(pool(t), 16).Forward(prompt, false)
	require.NoError(t, err)
	require.Equal(t, want, got, "absent tie_word_embeddings must read as false")
	tiedLogits, err := tied.NewSession(pool(t), 16).Forward(prompt, false)
	require.NoError(t, err)
	require.NotEqual(t, tiedLogits, got, "the stored lm_head must be the output projection")

	// Converted, the file keeps the head and runs as the folder does.
	_, fm, _ := convertFile(t, ck, allLayers(ck, convert.Options{Gamma: 1, Delta: 0.3, Random: true}))
	fromFile, err := fm.NewSession(pool(t), 16).Forward(prompt, false)
	require.NoError(t, err)
	for j := range want {
		requireClose(t, want[j], fromFile[j], "logit %d", j)
	}

	// No lm_head and no key: refused, naming the default's source.
	bare := editedCopy(t, "stories260k", func(map[string]format.Tensor) {})
	setConfig(t, bare, "tie_word_embeddings", nil)
	_, _, err = hf.Load(bare)
	require.EqualError(t, err, bare+`: tensor lm_head.weight not found, and tie_word_embeddings is false (absent from config.json: HF LlamaConfig's default), so the output projection is its own matrix, not the embedding (HF would start it at random): set "tie_word_embeddings": true in config.json if the model is tied`)
}

// TestUnknownTensorSkipped (issue 23 item 5, a regression): a tensor the
// architecture does not have is skipped with a warning naming it, as HF's
// from_pretrained skips unexpected weights (the model runs as without it,
// the .sinf file does not store it); Strict refuses it, at load and at
// conversion.
func TestUnknownTensorSkipped(t *testing.T) {
	names := []string{"model.layers.0.self_attn.q_norm.weight", "model.layers.1.self_attn.q_norm.weight"}
	dir := editedCopy(t, "stories260k", func(ts map[string]format.Tensor) {
		for _, n := range names {
			ts[n] = format.Tensor{Name: n, DType: format.F32, Shape: []int{8}, Data: make([]byte, 32)}
		}
	})
	ck, m, err := hf.Load(dir)
	require.NoError(t, err)
	defer ck.Close()
	require.Equal(t, names, ck.Unknown)
	warning := "tensors model.layers.0.self_attn.q_norm.weight, model.layers.1.self_attn.q_norm.weight are not part of a llama model (HF LlamaForCausalLM): skipped, as HF skips unexpected weights with a warning; is config.json's model_type right? (--strict refuses them)"
	require.Equal(t, []string{warning}, ck.Warnings)
	_, ref := openHF(t, "stories260k")
	prompt := []int{1, 403, 407, 261}
	got, err := m.NewSession(pool(t), 16).Forward(prompt, false)
	require.NoError(t, err)
	want, err := ref.NewSession(pool(t), 16).Forward(prompt, false)
	require.NoError(t, err)
	require.Equal(t, want, got)

	out := filepath.Join(t.TempDir(), "m.sinf")
	rep, err := convert.Convert(ck, out, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true}))
	require.NoError(t, err)
	require.Equal(t, []string{dir + ": " + warning}, rep.Warnings)
	f, err := format.Open(out)
	require.NoError(t, err)
	defer f.Close()
	require.False(t, f.Has(names[0]))

	strictErr := dir + ": tensors model.layers.0.self_attn.q_norm.weight, model.layers.1.self_attn.q_norm.weight are not part of a llama model (HF LlamaForCausalLM), and --strict refuses tensors the model does not read: is config.json's model_type right?"
	_, _, err = hf.LoadWith(dir, hf.Options{Strict: true})
	require.EqualError(t, err, strictErr)
	ck2, err := hf.Open(dir)
	require.NoError(t, err)
	defer ck2.Close()
	ck2.Strict = true
	out2 := filepath.Join(t.TempDir(), "m.sinf")
	_, err = convert.Convert(ck2, out2, allLayers(ck2, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true}))
	require.EqualError(t, err, strictErr)
	require.NoFileExists(t, out2)
}
