package hf_test

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/internal/sharedtest"
)

// copyModel copies a shared model folder into a temp dir and returns it.
func copyModel(t *testing.T, name string) string {
	t.Helper()
	src := sharedtest.Path(t, "models", name)
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
	}
	return dir
}

func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	edit(m)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
}

// rewriteHeader replaces the safetensors JSON header of dir/model.safetensors.
func rewriteHeader(t *testing.T, dir string, edit func(map[string]any)) {
	p := filepath.Join(dir, "model.safetensors")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	n := binary.LittleEndian.Uint64(b)
	var h map[string]any
	require.NoError(t, json.Unmarshal(b[8:8+n], &h))
	edit(h)
	hb, err := json.Marshal(h)
	require.NoError(t, err)
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
	out = append(append(out, hb...), b[8+n:]...)
	require.NoError(t, os.WriteFile(p, out, 0o644))
}

func TestOpenReadsSharded(t *testing.T) {
	dir := copyModel(t, "stories260k")
	// Split into two shards with an index.
	ck, err := hf.Open(sharedtest.Path(t, "models", "stories260k"))
	require.NoError(t, err)
	defer ck.Close()
	require.NoError(t, os.Remove(filepath.Join(dir, "model.safetensors")))
	weightMap := map[string]string{}
	shards := [2]map[string]any{{}, {}}
	var data [2][]byte
	for i, name := range ck.Names() {
		tt, err := ck.Tensor(name)
		require.NoError(t, err)
		s := i % 2
		shards[s][name] = map[string]any{"dtype": tt.DType.String(), "shape": tt.Shape, "data_offsets": []int{len(data[s]), len(data[s]) + len(tt.Data)}}
		data[s] = append(data[s], tt.Data...)
		weightMap[name] = []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[s]
	}
	for s, fname := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		hb, _ := json.Marshal(shards[s])
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
		require.NoError(t, os.WriteFile(filepath.Join(dir, fname), append(append(out, hb...), data[s]...), 0o644))
	}
	idx, _ := json.Marshal(map[string]any{"weight_map": weightMap})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644))
	sharded, m, err := hf.Load(dir)
	require.NoError(t, err)
	defer sharded.Close()
	require.Equal(t, ck.Names(), sharded.Names())
	require.Equal(t, 5, len(m.Layers))
}

// TestBadInput: each malformed checkpoint gives an error naming the file and
// the field or tensor, never a panic.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"unknown model_type", func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["model_type"] = "gemma2" })
		}, []string{"config.json", `model_type "gemma2"`, "llama, qwen2"}},
		{"bad generation_config.json", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"temperature":"hot","do_sample":1}`), 0o644))
		}, []string{"generation_config.json", "temperature"}},
		{"missing size", func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { delete(m, "hidden_size") })
		}, []string{"config.json", "hidden_size"}},
		{"missing tensor", func(t *testing.T, dir string) {
			rewriteHeader(t, dir, func(h map[string]any) {
				// Keep offsets contiguous: rename rather than drop.
				h["model.layers.2.mlp.up_proj.weightX"] = h["model.layers.2.mlp.up_proj.weight"]
				delete(h, "model.layers.2.mlp.up_proj.weight")
			})
		}, []string{"model.layers.2.mlp.up_proj.weight", "not found"}},
		{"wrong shape", func(t *testing.T, dir string) {
			rewriteHeader(t, dir, func(h map[string]any) {
				e := h["model.layers.1.self_attn.q_proj.weight"].(map[string]any)
				e["shape"] = []int{32, 128}
			})
		}, []string{"model.layers.1.self_attn.q_proj.weight", "expected shape [64 64]", "found [32 128]"}},
		{"truncated", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			b, _ := os.ReadFile(p)
			require.NoError(t, os.WriteFile(p, b[:len(b)-100], 0o644))
		}, []string{"model.safetensors"}},
		{"tiny file", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte{1, 2, 3}, 0o644))
		}, []string{"model.safetensors", "truncated"}},
		{"absurd header length", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			b, _ := os.ReadFile(p)
			binary.LittleEndian.PutUint64(b, 1<<62)
			require.NoError(t, os.WriteFile(p, b, 0o644))
		}, []string{"model.safetensors", "header"}},
		{"offsets past the end", func(t *testing.T, dir string) {
			rewriteHeader(t, dir, func(h map[string]any) {
				e := h["model.norm.weight"].(map[string]any)
				off := e["data_offsets"].([]any)
				e["data_offsets"] = []any{off[0], off[1].(float64) + 1e9}
			})
		}, []string{"model.safetensors"}},
		{"unsupported dtype", func(t *testing.T, dir string) {
			rewriteHeader(t, dir, func(h map[string]any) {
				e := h["model.norm.weight"].(map[string]any)
				e["dtype"] = "I16"
				e["shape"] = []int{128}
			})
		}, []string{"model.safetensors", "model.norm.weight", "I16"}},
		{"no weights", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "model.safetensors")))
		}, []string{"no model.safetensors"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyModel(t, "stories260k")
			c.setup(t, dir)
			ck, _, err := hf.Load(dir)
			if ck != nil {
				ck.Close()
			}
			require.Error(t, err)
			for _, w := range c.want {
				require.True(t, strings.Contains(err.Error(), w), "error %q does not contain %q", err, w)
			}
		})
	}
}

var shardNames = [2]string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}

// shardedCopy writes stories260k as two shards and an index: tensor i goes
// to shard i%2, plus the shards in extra[name] (an altered copy: its first
// byte flipped); index, when not nil, edits the weight_map.
func shardedCopy(t *testing.T, extra map[string][]int, index func(weightMap map[string]string)) string {
	t.Helper()
	dir := copyModel(t, "stories260k")
	ck, err := hf.Open(sharedtest.Path(t, "models", "stories260k"))
	require.NoError(t, err)
	defer ck.Close()
	require.NoError(t, os.Remove(filepath.Join(dir, "model.safetensors")))
	weightMap := map[string]string{}
	shards := [2]map[string]any{{}, {}}
	var data [2][]byte
	put := func(s int, name string, b []byte, shape []int, dtype string) {
		shards[s][name] = map[string]any{"dtype": dtype, "shape": shape, "data_offsets": []int{len(data[s]), len(data[s]) + len(b)}}
		data[s] = append(data[s], b...)
	}
	for i, name := range ck.Names() {
		tt, err := ck.Tensor(name)
		require.NoError(t, err)
		put(i%2, name, tt.Data, tt.Shape, tt.DType.String())
		weightMap[name] = shardNames[i%2]
		for _, s := range extra[name] {
			b := append([]byte(nil), tt.Data...)
			b[0] ^= 0xff
			put(s, name, b, tt.Shape, tt.DType.String())
		}
	}
	for s, fname := range shardNames {
		hb, _ := json.Marshal(shards[s])
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
		require.NoError(t, os.WriteFile(filepath.Join(dir, fname), append(append(out, hb...), data[s]...), 0o644))
	}
	if index != nil {
		index(weightMap)
	}
	idx, _ := json.Marshal(map[string]any{"weight_map": weightMap})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644))
	return dir
}

// TestIndexAgainstShards (issue 23 item 5): the index decides which shard
// serves a tensor stored in two (HF loads it from there), and an index
// entry naming a shard that does not hold the tensor, a tensor no shard
// holds, or a shard "." or ".." is an error naming the entry.
func TestIndexAgainstShards(t *testing.T) {
	const norm = "model.norm.weight"
	orig, err := hf.Open(sharedtest.Path(t, "models", "stories260k"))
	require.NoError(t, err)
	defer orig.Close()
	want, err := orig.Tensor(norm)
	require.NoError(t, err)
	home := -1 // the shard shardedCopy puts norm in
	for i, n := range orig.Names() {
		if n == norm {
			home = i % 2
		}
	}
	other := 1 - home

	// Stored in both shards: the index names the unaltered copy's shard,
	// then the altered copy's.
	dir := shardedCopy(t, map[string][]int{norm: {other}}, nil)
	ck, _, err := hf.Load(dir)
	require.NoError(t, err)
	got, err := ck.Tensor(norm)
	require.NoError(t, err)
	require.Equal(t, want.Data, got.Data, "the shard the index names serves the tensor")
	ck.Close()
	dir = shardedCopy(t, map[string][]int{norm: {other}}, func(w map[string]string) { w[norm] = shardNames[other] })
	ck, _, err = hf.Load(dir)
	require.NoError(t, err)
	got, err = ck.Tensor(norm)
	require.NoError(t, err)
	require.Equal(t, want.Data[0]^0xff, got.Data[0], "the shard the index names serves the tensor")
	require.Equal(t, want.Data[1:], got.Data[1:])
	ck.Close()

	idx := func(dir string) string { return filepath.Join(dir, "model.safetensors.index.json") }
	for _, c := range []struct {
		name  string
		edit  func(map[string]string)
		extra map[string][]int
		want  string
	}{
		{"wrong shard", func(w map[string]string) { w[norm] = shardNames[other] }, nil,
			`: field weight_map entry "model.norm.weight" names shard ` + shardNames[other] + `, which does not hold it (` + shardNames[home] + ` does)`},
		{"no shard holds it", func(w map[string]string) { w["model.layers.9.mlp.up_proj.weight"] = shardNames[0] }, nil,
			`: field weight_map entry "model.layers.9.mlp.up_proj.weight" names shard ` + shardNames[0] + `, which does not hold it (no shard does)`},
		{"dot dot", func(w map[string]string) { w[norm] = ".." }, nil,
			`: field weight_map entry "model.norm.weight" names shard "..", which is not a file name in the folder`},
		{"dot", func(w map[string]string) { w[norm] = "." }, nil,
			`: field weight_map entry "model.norm.weight" names shard ".", which is not a file name in the folder`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := shardedCopy(t, c.extra, c.edit)
			ck, _, err := hf.Load(dir)
			if ck != nil {
				ck.Close()
			}
			require.EqualError(t, err, idx(dir)+c.want)
		})
	}
}
