package scores

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"
	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/internal/rsvgtest"
)

const testDigest = "4f1c0ffee0000000000000000000000000000000000000000000000000000001"

// rawFile returns a raw profile with random scores: each score is a sum of
// |a| over tokens, so it is drawn as tokens·u with u uniform in [0, scale).
func rawFile(rng *rand.Rand, task, dataset string, layers, n int, in, gen int64, scale float64) *File {
	f := &File{
		ModelDigest: testDigest, Task: task, Dataset: dataset, ToolVersion: "test",
		Prompts: 1 + rng.IntN(100), InputTokens: in, GeneratedTokens: gen,
		Scores: make([][]float64, layers),
	}
	for l := range f.Scores {
		f.Scores[l] = make([]float64, n)
		for i := range f.Scores[l] {
			f.Scores[l][i] = float64(in+gen) * scale * rng.Float64()
		}
	}
	return f
}

func requireRelClose(t *testing.T, want, got [][]float64, tol float64) {
	t.Helper()
	require.Len(t, got, len(want))
	for l := range want {
		require.Len(t, got[l], len(want[l]))
		for i := range want[l] {
			w, g := want[l][i], got[l][i]
			d := math.Abs(w - g)
			if d > tol*math.Max(math.Abs(w), math.Abs(g)) && d != 0 {
				t.Fatalf("layer %d neuron %d: want %.17g, got %.17g (relative difference %.3g > %g)", l, i, w, g, d/math.Max(math.Abs(w), math.Abs(g)), tol)
			}
		}
	}
}

func mustMerge(t *testing.T, fs ...*File) *File {
	t.Helper()
	m, err := Merge(fs, nil)
	require.NoError(t, err)
	return m
}

func TestWriteReadRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	f := rawFile(rng, "gsm8k", "gsm8k/test", 3, 17, 1234, 567, 0.7)
	f.Shard = "2/4"
	f.Scores[0][0] = 0
	f.Scores[0][1] = math.Copysign(0, -1)
	f.Scores[1][2] = math.SmallestNonzeroFloat64
	f.Scores[2][3] = math.MaxFloat64
	f.Scores[2][4] = 1.0 / 3
	path := filepath.Join(dir, "gsm8k.scores.safetensors")
	require.NoError(t, Write(path, f))
	g, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, f, g)
	for l := range f.Scores {
		for i := range f.Scores[l] {
			require.Equal(t, math.Float64bits(f.Scores[l][i]), math.Float64bits(g.Scores[l][i]))
		}
	}
	require.Equal(t, f.ContentDigest(), g.ContentDigest())

	// Any safetensors reader sees the tensors and every metadata key.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	_, md, err := safetensors.ReadMetadata(data)
	require.NoError(t, err)
	meta := md.Metadata()
	for _, k := range []string{KeyFormat, KeyFormatVersion, KeyModelDigest, KeyTask, KeyDataset, KeyPrompts,
		KeyInputTokens, KeyGeneratedTokens, KeyShard, KeyToolVersion, KeyMergedFrom, KeyNormalized, KeyLayers, KeyIntermediateSize} {
		require.Contains(t, meta, k)
	}
	require.Equal(t, "sinf-scores", meta[KeyFormat])
	require.Equal(t, "1", meta[KeyFormatVersion])
	require.Equal(t, "[]", meta[KeyMergedFrom])
	require.Equal(t, "false", meta[KeyNormalized])
	require.Equal(t, "3", meta[KeyLayers])
	require.Equal(t, "17", meta[KeyIntermediateSize])
	require.Equal(t, "1234", meta[KeyInputTokens])
	require.Equal(t, "2/4", meta[KeyShard])
	ti := md.Tensors()
	require.Len(t, ti, 3)
	require.Equal(t, safetensors.F64, ti["scores.layers.2"].DType)
	require.Equal(t, []uint64{17}, ti["scores.layers.2"].Shape)

	// A merge result round-trips too, merged_from included.
	a := rawFile(rng, "squad", "squad/validation", 3, 17, 10, 20, 1)
	_, err = Merge([]*File{f, a}, nil) // shard 2/4 alone is an incomplete run
	require.ErrorContains(t, err, "incomplete shard set")
	unsharded := *f
	unsharded.Shard = ""
	m := mustMerge(t, &unsharded, a)
	m.ToolVersion = "sinf 0.1"
	mpath := filepath.Join(dir, "merged.safetensors")
	require.NoError(t, Write(mpath, m))
	mg, err := Read(mpath)
	require.NoError(t, err)
	require.Equal(t, m, mg)
	require.Len(t, mg.MergedFrom, 2)
	require.True(t, mg.Normalized)
	require.Equal(t, []string{"gsm8k", "squad"}, mg.Tasks())
	require.Equal(t, []string{"gsm8k"}, f.Tasks())

	// Overwriting an existing file replaces it.
	require.NoError(t, Write(mpath, f))
	g, err = Read(mpath)
	require.NoError(t, err)
	require.Equal(t, f, g)
}

// writeSafetensors writes an arbitrary safetensors file.
func writeSafetensors(t *testing.T, path string, meta map[string]string, tensors map[string]safetensors.TensorView) {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, safetensors.SerializeToWriter(tensors, meta, &buf))
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

func f64View(t *testing.T, shape []uint64, n int) safetensors.TensorView {
	t.Helper()
	data := make([]byte, 0, 8*n)
	for i := range n {
		data = binary.LittleEndian.AppendUint64(data, math.Float64bits(float64(i)))
	}
	tv, err := safetensors.NewTensorView(safetensors.F64, shape, data)
	require.NoError(t, err)
	return tv
}

func TestReadErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := rawFile(rng, "t", "d", 2, 4, 5, 6, 1)
	goodMeta, err := base.metadata()
	require.NoError(t, err)
	goodTensors := func() map[string]safetensors.TensorView {
		return map[string]safetensors.TensorView{
			"scores.layers.0": f64View(t, []uint64{4}, 4),
			"scores.layers.1": f64View(t, []uint64{4}, 4),
		}
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for kk, vv := range goodMeta {
			m[kk] = vv
		}
		if v == "\x00delete" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	f32, err := safetensors.NewTensorView(safetensors.F32, []uint64{4}, make([]byte, 16))
	require.NoError(t, err)

	cases := []struct {
		name    string
		write   func(path string)
		is      error
		wantSub []string
	}{
		{"not safetensors", func(p string) {
			require.NoError(t, os.WriteFile(p, []byte("hello, this is text not a tensor file"), 0o644))
		},
			ErrNotSafetensors, []string{"not a safetensors file"}},
		{"empty file", func(p string) { require.NoError(t, os.WriteFile(p, nil, 0o644)) },
			ErrNotSafetensors, nil},
		{"no format key", func(p string) { writeSafetensors(t, p, nil, goodTensors()) },
			ErrNotScoreFile, []string{`"format"`}},
		{"other format", func(p string) { writeSafetensors(t, p, with(KeyFormat, "pt"), goodTensors()) },
			ErrNotScoreFile, []string{"format", `"pt"`}},
		{"newer version", func(p string) { writeSafetensors(t, p, with(KeyFormatVersion, "2"), goodTensors()) },
			ErrNewerVersion, []string{"format_version", "2"}},
		{"bad version", func(p string) { writeSafetensors(t, p, with(KeyFormatVersion, "one"), goodTensors()) },
			nil, []string{"format_version", `"one"`}},
		{"missing key", func(p string) { writeSafetensors(t, p, with(KeyInputTokens, "\x00delete"), goodTensors()) },
			nil, []string{"input_tokens", "missing"}},
		{"bad number", func(p string) { writeSafetensors(t, p, with(KeyPrompts, "many"), goodTensors()) },
			nil, []string{"prompts", `"many"`}},
		{"bad normalized", func(p string) { writeSafetensors(t, p, with(KeyNormalized, "yes"), goodTensors()) },
			nil, []string{"normalized", `"yes"`}},
		{"bad shard", func(p string) { writeSafetensors(t, p, with(KeyShard, "5/4"), goodTensors()) },
			nil, []string{"shard", `"5/4"`}},
		{"bad merged_from", func(p string) { writeSafetensors(t, p, with(KeyMergedFrom, "{"), goodTensors()) },
			nil, []string{"merged_from"}},
		{"normalized without sources", func(p string) { writeSafetensors(t, p, with(KeyNormalized, "true"), goodTensors()) },
			nil, []string{"normalized", "merged_from"}},
		{"wrong shape", func(p string) {
			ts := goodTensors()
			ts["scores.layers.1"] = f64View(t, []uint64{5}, 5)
			writeSafetensors(t, p, goodMeta, ts)
		}, nil, []string{"scores.layers.1", "shape", "[5]", "intermediate_size"}},
		{"wrong rank", func(p string) {
			ts := goodTensors()
			ts["scores.layers.0"] = f64View(t, []uint64{1, 4}, 4)
			writeSafetensors(t, p, goodMeta, ts)
		}, nil, []string{"scores.layers.0", "shape"}},
		{"wrong dtype", func(p string) {
			ts := goodTensors()
			ts["scores.layers.0"] = f32
			writeSafetensors(t, p, goodMeta, ts)
		}, nil, []string{"scores.layers.0", "F32", "F64"}},
		{"missing tensor", func(p string) {
			ts := goodTensors()
			delete(ts, "scores.layers.1")
			writeSafetensors(t, p, goodMeta, ts)
		}, nil, []string{"scores.layers.1", "missing", "layers"}},
		{"extra tensor", func(p string) {
			ts := goodTensors()
			ts["scores.layers.2"] = f64View(t, []uint64{4}, 4)
			writeSafetensors(t, p, goodMeta, ts)
		}, nil, []string{"scores.layers.2", "inconsistent layers"}},
		{"layers says more", func(p string) { writeSafetensors(t, p, with(KeyLayers, "3"), goodTensors()) },
			nil, []string{"scores.layers.2", "missing", "layers"}},
		{"non-finite score", func(p string) {
			ts := goodTensors()
			data := make([]byte, 32)
			binary.LittleEndian.PutUint64(data[8:], math.Float64bits(math.NaN()))
			tv, err := safetensors.NewTensorView(safetensors.F64, []uint64{4}, data)
			require.NoError(t, err)
			ts["scores.layers.1"] = tv
			writeSafetensors(t, p, goodMeta, ts)
		}, nil, []string{"scores.layers.1", "NaN"}},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors")
			c.write(path)
			_, err := Read(path)
			require.Error(t, err)
			require.ErrorContains(t, err, path)
			if c.is != nil {
				require.ErrorIs(t, err, c.is)
			}
			for _, s := range c.wantSub {
				require.ErrorContains(t, err, s)
			}
		})
	}

	// The unmodified header reads fine (the cases above fail for their one fault).
	path := filepath.Join(dir, "good.safetensors")
	writeSafetensors(t, path, goodMeta, goodTensors())
	_, err = Read(path)
	require.NoError(t, err)

	_, err = Read(filepath.Join(dir, "absent.safetensors"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestWriteRefusesInvalid(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	dir := t.TempDir()
	path := filepath.Join(dir, "x.safetensors")
	mk := func() *File { return rawFile(rng, "t", "d", 2, 3, 4, 5, 1) }
	cases := map[string]func(f *File){
		"model_digest":      func(f *File) { f.ModelDigest = "" },
		"inconsistent":      func(f *File) { f.Scores[1] = f.Scores[1][:2] },
		"NaN":               func(f *File) { f.Scores[0][1] = math.NaN() },
		"+Inf":              func(f *File) { f.Scores[0][1] = math.Inf(1) },
		"layers":            func(f *File) { f.Scores = nil },
		"intermediate_size": func(f *File) { f.Scores = [][]float64{{}} },
		"input_tokens":      func(f *File) { f.InputTokens = -1 },
		"shard":             func(f *File) { f.Shard = "3/3" },
		"merged_from":       func(f *File) { f.Normalized = true },
	}
	for name, mod := range cases {
		f := mk()
		mod(f)
		err := Write(path, f)
		require.Error(t, err, name)
		require.ErrorContains(t, err, path)
		require.ErrorContains(t, err, name)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestShardParse(t *testing.T) {
	for _, s := range []string{"0/1", "3/4", "9/10", "10/11"} {
		i, n, err := ParseShard(s)
		require.NoError(t, err, s)
		require.Equal(t, s, FormatShard(i, n))
	}
	for _, s := range []string{"", "4/4", "5/4", "0/0", "1/0", "a/b", "1/4/5", "-1/4", " 1/4", "1/", "/4"} {
		_, _, err := ParseShard(s)
		require.Error(t, err, s)
	}
}

func TestModelDigest(t *testing.T) {
	cfg := []byte(`{"model_type":"llama","intermediate_size":8}`)
	shapes := func(names ...string) map[string][]int {
		m := map[string][]int{}
		for _, n := range names {
			m[n] = []int{8, 4}
		}
		return m
	}
	names := []string{
		"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
		"model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.down_proj.weight",
	}
	d := ModelDigest(cfg, shapes(names...))
	require.Len(t, d, 64)
	for range 20 {
		rev := slices.Clone(names)
		rand.Shuffle(len(rev), func(i, j int) { rev[i], rev[j] = rev[j], rev[i] })
		require.Equal(t, d, ModelDigest(cfg, shapes(rev...)))
	}
	other := shapes(names...)
	other["model.layers.1.mlp.down_proj.weight"] = []int{4, 8}
	require.NotEqual(t, d, ModelDigest(cfg, other))
	require.NotEqual(t, d, ModelDigest(cfg, shapes(names[:5]...)))
	require.NotEqual(t, d, ModelDigest([]byte(`{"model_type":"llama","intermediate_size":9}`), shapes(names...)))
	// Names and shapes cannot run into each other.
	require.NotEqual(t, ModelDigest(nil, map[string][]int{"a": {12}}), ModelDigest(nil, map[string][]int{"a": {1, 2}}))
	require.NotEqual(t, ModelDigest([]byte("ab"), nil), ModelDigest([]byte("a"), map[string][]int{"b": nil}))
}

func TestMergeRefusesDifferentModels(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	a := rawFile(rng, "t1", "d1", 2, 5, 10, 10, 1)
	b := rawFile(rng, "t2", "d2", 2, 5, 10, 10, 1)
	b.ModelDigest = "0123456789abcdef"
	_, err := Merge([]*File{a, b}, []string{"/p/a.safetensors", "/p/b.safetensors"})
	require.Error(t, err)
	for _, s := range []string{"/p/a.safetensors", "/p/b.safetensors", testDigest, "0123456789abcdef", "model_digest"} {
		require.ErrorContains(t, err, s)
	}

	c := rawFile(rng, "t3", "d3", 3, 5, 10, 10, 1)
	_, err = Merge([]*File{a, c}, []string{"a.st", "c.st"})
	require.ErrorContains(t, err, "a.st has layers 2")
	require.ErrorContains(t, err, "c.st has layers 3")

	d := rawFile(rng, "t3", "d3", 2, 6, 10, 10, 1)
	_, err = Merge([]*File{a, d}, []string{"a.st", "d.st"})
	require.ErrorContains(t, err, "a.st has intermediate_size 5")
	require.ErrorContains(t, err, "d.st has intermediate_size 6")

	_, err = Merge(nil, nil)
	require.Error(t, err)
	_, err = Merge([]*File{a}, []string{"x", "y"})
	require.Error(t, err)
}

func TestMergeAssociative(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const layers, n = 4, 257
	a := rawFile(rng, "gsm8k", "gsm8k/test", layers, n, 7, 3, 1e-3)
	b := rawFile(rng, "squad", "squad/validation", layers, n, 2_500_000_000, 1_700_000_000, 40)
	c := rawFile(rng, "xsum", "xsum/test", layers, n, 123_456, 98_765, 0.5)
	d := rawFile(rng, "gsm8k", "gsm8k/train", layers, n, 1, 0, 1e6)

	want := make([][]float64, layers)
	for l := range want {
		want[l] = make([]float64, n)
		for i := range want[l] {
			for _, f := range []*File{a, b, c, d} {
				want[l][i] += f.Scores[l][i] / float64(f.Tokens())
			}
		}
	}

	// Intermediate results also go through a file, as in real use.
	dir := t.TempDir()
	viaFile := func(f *File) *File {
		p := filepath.Join(dir, "m.safetensors")
		require.NoError(t, Write(p, f))
		g, err := Read(p)
		require.NoError(t, err)
		return g
	}
	results := []*File{
		mustMerge(t, a, b, c, d),
		mustMerge(t, d, c, b, a),
		mustMerge(t, c, a, d, b),
		mustMerge(t, viaFile(mustMerge(t, mustMerge(t, a, b), c)), d),
		mustMerge(t, a, mustMerge(t, b, mustMerge(t, c, d))),
		mustMerge(t, mustMerge(t, d, b), viaFile(mustMerge(t, c, a))),
		mustMerge(t, mustMerge(t, a), mustMerge(t, b), mustMerge(t, c), mustMerge(t, d)),
	}
	for _, r := range results {
		requireRelClose(t, want, r.Scores, 1e-12)
		requireRelClose(t, results[0].Scores, r.Scores, 1e-12)
		require.True(t, r.Normalized)
		require.Equal(t, results[0].MergedFrom, r.MergedFrom)
		require.Equal(t, a.Tokens()+b.Tokens()+c.Tokens()+d.Tokens(), r.Tokens())
		require.Equal(t, a.InputTokens+b.InputTokens+c.InputTokens+d.InputTokens, r.InputTokens)
		require.Equal(t, a.Prompts+b.Prompts+c.Prompts+d.Prompts, r.Prompts)
		require.Equal(t, "", r.Task)
		require.Equal(t, "", r.Dataset)
		require.Equal(t, "", r.Shard)
		require.Equal(t, "test", r.ToolVersion)
		require.Equal(t, []string{"gsm8k", "squad", "xsum"}, r.Tasks())
	}
	// The same inputs in another order give bit-identical scores.
	require.Equal(t, results[0].Scores, results[1].Scores)
	require.Equal(t, results[0].Scores, results[2].Scores)
	// Sources are listed canonically.
	var tasks []string
	for _, s := range results[0].MergedFrom {
		tasks = append(tasks, s.Task+" "+s.Dataset)
		require.Len(t, s.Digest, 64)
	}
	require.Equal(t, []string{"gsm8k gsm8k/test", "gsm8k gsm8k/train", "squad squad/validation", "xsum xsum/test"}, tasks)

	// A task-level merge keeps its task.
	g := mustMerge(t, d, a)
	require.Equal(t, "gsm8k", g.Task)
	require.Equal(t, "", g.Dataset)
	require.Equal(t, []string{"gsm8k"}, g.Tasks())
}

func TestMergeShards(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const layers, n = 3, 101
	// Shards of very different sizes; the unsharded run's sums are the sums
	// of the shards' sums.
	shards := []*File{
		rawFile(rng, "squad", "squad/validation", layers, n, 10, 5, 1),
		rawFile(rng, "squad", "squad/validation", layers, n, 3_000_000, 1_000_000, 2),
		rawFile(rng, "squad", "squad/validation", layers, n, 50_000, 200, 0.1),
	}
	whole := rawFile(rng, "squad", "squad/validation", layers, n, 0, 0, 1)
	whole.Prompts = 0
	for i, s := range shards {
		s.Shard = FormatShard(i, len(shards))
		whole.Prompts += s.Prompts
		whole.InputTokens += s.InputTokens
		whole.GeneratedTokens += s.GeneratedTokens
		for l := range layers {
			for k := range n {
				if i == 0 {
					whole.Scores[l][k] = 0
				}
				whole.Scores[l][k] += s.Scores[l][k]
			}
		}
	}
	wholeNorm := mustMerge(t, whole)
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}} {
		in := []*File{shards[order[0]], shards[order[1]], shards[order[2]]}
		m := mustMerge(t, in...)
		requireRelClose(t, wholeNorm.Scores, m.Scores, 1e-12)
		require.Equal(t, whole.Tokens(), m.Tokens())
		require.Equal(t, whole.Prompts, m.Prompts)
		require.Equal(t, "squad", m.Task)
		require.Equal(t, "squad/validation", m.Dataset)
		require.Equal(t, "", m.Shard)
		require.Len(t, m.MergedFrom, 3)
		for i, s := range m.MergedFrom {
			require.Equal(t, FormatShard(i, 3), s.Shard)
		}
	}
	// Normalising each shard on its own would give something else: the rule matters.
	// (Merge refuses a lone shard for that reason.)
	perShard := 0.0
	for _, s := range shards {
		perShard += s.Scores[0][0] / float64(s.Tokens())
	}
	require.Greater(t, math.Abs(perShard-wholeNorm.Scores[0][0])/wholeNorm.Scores[0][0], 0.1)
	_, err := Merge([]*File{shards[1]}, nil)
	require.ErrorContains(t, err, "incomplete")

	// Shards merged with other tasks, in one go or after merging the run.
	other := rawFile(rng, "gsm8k", "gsm8k/test", layers, n, 999, 1, 3)
	x := mustMerge(t, other, shards[2], shards[0], shards[1])
	y := mustMerge(t, mustMerge(t, shards...), other)
	z := mustMerge(t, wholeNorm, other)
	requireRelClose(t, x.Scores, y.Scores, 1e-12)
	requireRelClose(t, z.Scores, y.Scores, 1e-12)
	require.Equal(t, x.MergedFrom, y.MergedFrom)

	// Shards of another run (other N, or other dataset) are a separate run.
	two := []*File{
		rawFile(rng, "squad", "squad/validation", layers, n, 100, 100, 1),
		rawFile(rng, "squad", "squad/validation", layers, n, 300, 100, 1),
	}
	two[0].Shard, two[1].Shard = "0/2", "1/2"
	w := mustMerge(t, shards[0], two[1], shards[1], two[0], shards[2])
	want := make([][]float64, layers)
	for l := range want {
		want[l] = make([]float64, n)
		for k := range want[l] {
			want[l][k] = wholeNorm.Scores[l][k] + (two[0].Scores[l][k]+two[1].Scores[l][k])/600
		}
	}
	requireRelClose(t, want, w.Scores, 1e-12)

	// An incomplete shard set is refused, naming the missing shard.
	_, err = Merge([]*File{shards[0], shards[2]}, []string{"s0.st", "s2.st"})
	require.ErrorContains(t, err, "incomplete")
	require.ErrorContains(t, err, "missing shard 1/3")
	require.ErrorContains(t, err, "s0.st")
	// And so is a shard given twice.
	dup := rawFile(rng, "squad", "squad/validation", layers, n, 10, 5, 1)
	dup.Shard = "1/3"
	_, err = Merge([]*File{shards[0], shards[1], dup, shards[2]}, []string{"s0.st", "s1.st", "s1bis.st", "s2.st"})
	require.ErrorContains(t, err, "s1.st and s1bis.st are both shard 1/3")
}

func TestMergeRefusesRepeatsAndEmpty(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	a := rawFile(rng, "t1", "d1", 2, 5, 10, 10, 1)
	b := rawFile(rng, "t2", "d2", 2, 5, 10, 10, 1)
	ab := mustMerge(t, a, b)
	_, err := Merge([]*File{ab, b}, []string{"ab.st", "b.st"})
	require.ErrorContains(t, err, "ab.st and b.st both contain")
	require.ErrorContains(t, err, "counted twice")
	_, err = Merge([]*File{a, a}, nil)
	require.ErrorContains(t, err, "counted twice")

	z := rawFile(rng, "t3", "d3", 2, 5, 0, 0, 1)
	_, err = Merge([]*File{a, z}, []string{"a.st", "z.st"})
	require.ErrorContains(t, err, "z.st")
	require.ErrorContains(t, err, "0 tokens")
}

func TestRank(t *testing.T) {
	negZero := math.Copysign(0, -1)
	require.Equal(t, []int32{1, 2, 4, 0, 3, 5, 6}, Rank([]float64{1, 3, 3, 0, 3, negZero, 0}))
	require.Equal(t, []int32{0, 1, 2, 3}, Rank([]float64{5, 5, 5, 5}))
	require.Equal(t, []int32{2, 0, 1, 3}, Rank([]float64{1, math.NaN(), 2, math.NaN()}))
	require.Equal(t, []int32{}, Rank(nil))

	// Random data with many ties: decreasing scores, increasing index within a tie.
	rng := rand.New(rand.NewPCG(15, 16))
	s := make([]float64, 1000)
	for i := range s {
		s[i] = float64(rng.IntN(20))
	}
	r := Rank(s)
	for i := 1; i < len(r); i++ {
		a, b := r[i-1], r[i]
		require.True(t, s[a] > s[b] || (s[a] == s[b] && a < b))
	}
	f := &File{Scores: [][]float64{{1, 2}, {2, 1}}}
	require.Equal(t, []int32{1, 0}, f.Ranking(0))
	require.Equal(t, []int32{0, 1}, f.Ranking(1))
}

func TestTopSet(t *testing.T) {
	for _, c := range []struct {
		n    int
		frac float64
		k    int
	}{
		{10, 0.25, 3}, // 2.5 rounds up
		{10, 0.24, 2},
		{10, 0.26, 3},
		{7, 0.4, 3}, // 2.8
		{8, 0.4, 3}, // 3.2
		{10, 0.05, 1},
		{10, 0.04, 0},
		{10, 0, 0},
		{10, -1, 0},
		{10, math.NaN(), 0},
		{10, 1, 10},
		{10, 2, 10},
		{14336, 0.4, 5734},
	} {
		require.Equal(t, c.k, TopCount(c.n, c.frac), "n=%d frac=%v", c.n, c.frac)
	}
	f := &File{Scores: [][]float64{
		{0, 9, 1, 8, 2, 7, 3, 6, 4, 5},
		{1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
	}}
	sets := TopSet(f, 0.25)
	require.Equal(t, [][]int32{{1, 3, 5}, {0, 1, 2}}, sets)
	for l, s := range sets {
		require.Equal(t, f.Ranking(l)[:3], s)
	}
}

func TestOverlap(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	a := rawFile(rng, "t1", "d", 4, 50, 10, 10, 1)
	mean, per, err := Overlap(a, a, 0.4)
	require.NoError(t, err)
	require.Equal(t, 1.0, mean)
	require.Equal(t, []float64{1, 1, 1, 1}, per)

	// Disjoint: a ranks the first half on top, b the second half.
	hi := &File{ModelDigest: testDigest, Scores: [][]float64{{9, 8, 7, 1, 2, 3}, {5, 5, 5, 0, 0, 0}}}
	lo := &File{ModelDigest: testDigest, Scores: [][]float64{{1, 2, 3, 9, 8, 7}, {0, 0, 0, 1, 1, 1}}}
	mean, per, err = Overlap(hi, lo, 0.5)
	require.NoError(t, err)
	require.Equal(t, 0.0, mean)
	require.Equal(t, []float64{0, 0}, per)

	// By hand: n = 5, frac 0.4 → 2 neurons per layer.
	x := &File{ModelDigest: testDigest, Scores: [][]float64{{9, 8, 0, 0, 0}, {0, 0, 0, 8, 9}}}
	y := &File{ModelDigest: testDigest, Scores: [][]float64{{0, 8, 9, 0, 0}, {0, 0, 0, 9, 8}}}
	z := &File{ModelDigest: testDigest, Scores: [][]float64{{0, 9, 0, 0, 8}, {9, 8, 0, 0, 0}}}
	mean, per, err = Overlap(x, y, 0.4)
	require.NoError(t, err)
	require.Equal(t, []float64{0.5, 1}, per)
	require.Equal(t, 0.75, mean)
	mean, per, err = OverlapAll([]*File{x, y, z}, 0.4)
	require.NoError(t, err)
	require.Equal(t, []float64{0.5, 0}, per)
	require.Equal(t, 0.25, mean)

	_, _, err = Overlap(x, y, 0)
	require.Error(t, err)
	_, _, err = Overlap(x, y, 0.05) // 0.25 neurons rounds to 0
	require.ErrorContains(t, err, "rounds to 0")
	other := &File{ModelDigest: "other", Scores: x.Scores}
	_, _, err = Overlap(x, other, 0.4)
	require.ErrorContains(t, err, "different models")
	_, _, err = Overlap(x, &File{ModelDigest: testDigest, Scores: [][]float64{{1, 2, 3, 4, 5}}}, 0.4)
	require.Error(t, err)
	_, _, err = OverlapAll([]*File{x}, 0.4)
	require.Error(t, err)
}

func TestReport(t *testing.T) {
	x := &File{ModelDigest: testDigest, Scores: [][]float64{{9, 8, 0, 0, 0}, {0, 0, 0, 8, 9}}}
	y := &File{ModelDigest: testDigest, Scores: [][]float64{{0, 8, 9, 0, 0}, {0, 0, 0, 9, 8}}}
	z := &File{ModelDigest: testDigest, Scores: [][]float64{{0, 9, 0, 0, 8}, {9, 8, 0, 0, 0}}}
	r, err := BuildReport([]string{"gsm8k", "squad", "xsum"}, []*File{x, y, z}, 0.4)
	require.NoError(t, err)
	require.Equal(t, [][]float64{{1, 0.75, 0.25}, {0.75, 1, 0.25}, {0.25, 0.25, 1}}, r.Pairwise)
	require.Equal(t, []float64{0.5, 1}, r.PerLayer[0][1])
	require.Equal(t, []float64{0.5, 1}, r.PerLayer[1][0])
	require.Equal(t, []float64{1, 1}, r.PerLayer[2][2])
	require.Equal(t, 0.25, r.All)
	require.Equal(t, []float64{0.5, 0}, r.AllPerLayer)
	// IoU by hand: x, y share 1 of 3 neurons in layer 0 and 2 of 2 in layer 1.
	iou := [][]float64{{1, 2.0 / 3, 1.0 / 6}, {2.0 / 3, 1, 1.0 / 6}, {1.0 / 6, 1.0 / 6, 1}}
	for i := range iou {
		for j := range iou {
			require.InDelta(t, iou[i][j], r.PairwiseIoU[i][j], 1e-15, "%d %d", i, j)
		}
	}
	require.InDelta(t, 0.125, r.AllIoU, 1e-15) // layer 0: {1} of {0,1,2,4}; layer 1: none
	// Chance at p = 2/5: |A∩B|/|A| 0.4, IoU 0.16/0.64; three sets 0.16 and 0.064/0.784.
	require.InDelta(t, 0.4, r.Chance, 1e-15)
	require.InDelta(t, 0.25, r.ChanceIoU, 1e-15)
	require.InDelta(t, 0.16, r.ChanceAll, 1e-15)
	require.InDelta(t, 0.064/0.784, r.ChanceAllIoU, 1e-15)

	var buf bytes.Buffer
	require.NoError(t, r.WriteTable(&buf))
	out := buf.String()
	for _, s := range []string{"top 40%", "gsm8k", "squad", "xsum", "0.7500", "0.2500", "All 3 files", "gsm8k & squad", "layer",
		"Intersection over union", "0.6667", "(random sets of this size: 0.4000)", "(random sets of this size: 0.2500, ratio of expectations)",
		"IoU 0.1250 (random 0.0816)"} {
		require.Contains(t, out, s)
	}
	t.Log("\n" + out)

	dir := t.TempDir()
	svg := filepath.Join(dir, "overlap.svg")
	require.NoError(t, r.WritePlot(svg))
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	require.Contains(t, string(data), "<svg")
	png := filepath.Join(dir, "overlap.png")
	require.NoError(t, r.WritePlot(png))
	data, err = os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")))
	require.Error(t, r.WritePlot(filepath.Join(dir, "overlap.gif")))

	// Two files, all layers equal (flat colour scale), many layers.
	rng := rand.New(rand.NewPCG(19, 20))
	a := rawFile(rng, "a", "d", 32, 64, 10, 10, 1)
	r2, err := BuildReport([]string{"a", "a again"}, []*File{a, a}, 0.4)
	require.NoError(t, err)
	require.NoError(t, r2.WritePlot(filepath.Join(dir, "flat.svg")))
	st, err := os.Stat(filepath.Join(dir, "flat.svg"))
	require.NoError(t, err)
	require.Positive(t, st.Size())

	_, err = BuildReport([]string{"a"}, []*File{a, a}, 0.4)
	require.Error(t, err)
	_, err = BuildReport([]string{"x", "a"}, []*File{x, a}, 0.4)
	require.ErrorContains(t, err, `"x"`)
	require.ErrorContains(t, err, `"a"`)
}

func requireOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	got := []string{}
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := append([]string{}, names...)
	slices.Sort(want)
	require.Equal(t, want, got)
}

func TestWriteInterrupted(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	f := rawFile(rng, "t", "d", 3, 10, 10, 10, 1)
	dir := t.TempDir()
	path := filepath.Join(dir, "s.safetensors")

	// An error just before the rename: nothing appears.
	injected := errors.New("injected failure")
	var sawTmp string
	failBeforeRename = func(tmp string) error {
		sawTmp = tmp
		st, err := os.Stat(tmp)
		require.NoError(t, err)
		require.Positive(t, st.Size()) // the data was written out
		return injected
	}
	t.Cleanup(func() { failBeforeRename = nil })
	err := Write(path, f)
	require.ErrorIs(t, err, injected)
	require.ErrorContains(t, err, path)
	require.NotEmpty(t, sawTmp)
	require.Equal(t, dir, filepath.Dir(sawTmp))
	requireOnly(t, dir)

	// Over an existing file: the old content stays.
	failBeforeRename = nil
	require.NoError(t, Write(path, f))
	old, err := os.ReadFile(path)
	require.NoError(t, err)
	g := rawFile(rng, "t", "d", 3, 10, 10, 10, 1)
	failBeforeRename = func(string) error { return injected }
	require.ErrorIs(t, Write(path, g), injected)
	now, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, old, now)
	requireOnly(t, dir, "s.safetensors")
	failBeforeRename = nil

	// A real failure of the rename (the target is a non-empty folder).
	blocked := filepath.Join(dir, "blocked")
	require.NoError(t, os.MkdirAll(filepath.Join(blocked, "inside"), 0o755))
	require.Error(t, Write(blocked, f))
	requireOnly(t, dir, "s.safetensors", "blocked")

	// A folder that does not exist.
	require.Error(t, Write(filepath.Join(dir, "no", "such.safetensors"), f))

	// A read-only folder (meaningless for root, who may write anyway).
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		require.NoError(t, os.Mkdir(ro, 0o555))
		t.Cleanup(func() { os.Chmod(ro, 0o755) })
		require.Error(t, Write(filepath.Join(ro, "s.safetensors"), f))
		requireOnly(t, ro)
	}

	// The plot is written the same way.
	r, err := BuildReport([]string{"a", "b"}, []*File{f, g}, 0.5)
	require.NoError(t, err)
	failBeforeRename = func(string) error { return injected }
	require.ErrorIs(t, r.WritePlot(filepath.Join(dir, "p.svg")), injected)
	failBeforeRename = nil
	requireOnly(t, dir, "s.safetensors", "blocked")
}

// TestPlotRenders draws overlap figures and renders them as a viewer would
// (rsvg-convert; skipped without it): the colour bar is vector shapes that
// rsvg draws (plotter.ColorBar's PNG, labelled image/jpg, was not drawn), the
// heat map's layer axis reads whole layers at the rows (not -0.5, 0.5, ...),
// and nothing touches the left or right edge. SINF_FIGURES=DIR keeps the
// PNGs.
func TestPlotRenders(t *testing.T) {
	x := &File{ModelDigest: testDigest, Scores: [][]float64{{9, 8, 0, 0, 0}, {0, 0, 0, 8, 9}}}
	y := &File{ModelDigest: testDigest, Scores: [][]float64{{0, 8, 9, 0, 0}, {0, 0, 0, 9, 8}}}
	z := &File{ModelDigest: testDigest, Scores: [][]float64{{0, 9, 0, 0, 8}, {9, 8, 0, 0, 0}}}
	r3, err := BuildReport([]string{"tinystories", "squad_v2", "wikitext2"}, []*File{x, y, z}, 0.4)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(19, 20))
	a, b := rawFile(rng, "a", "d", 32, 64, 10, 10, 1), rawFile(rng, "b", "d", 32, 64, 10, 10, 1)
	r32, err := BuildReport([]string{"a", "b"}, []*File{a, b}, 0.4)
	require.NoError(t, err)
	dir := rsvgtest.Dir(t)
	for _, c := range []struct {
		name   string
		r      *Report
		labels []string // layer tick labels
		not    []string
	}{
		{"overlap-3files", r3, []string{"0", "1"}, []string{"-0.5", "1.5"}},
		{"overlap-32layers", r32, []string{"0", "2", "30"}, []string{"-0.5", "31", "31.5"}},
	} {
		svg := filepath.Join(dir, c.name+".svg")
		require.NoError(t, c.r.WritePlot(svg))
		data, err := os.ReadFile(svg)
		require.NoError(t, err)
		require.NotContains(t, string(data), "<image", "%s: the colour bar is an embedded picture", c.name)
		for _, l := range c.labels {
			require.Contains(t, string(data), ">"+l+"</text>", c.name)
		}
		for _, l := range c.not {
			require.NotContains(t, string(data), ">"+l+"</text>", c.name)
		}
		if c.r == r3 { // each cell's value is written in it
			for _, v := range append(slices.Clone(r3.PerLayer[0][1]), r3.AllPerLayer...) {
				require.Contains(t, string(data), ">"+strconv.FormatFloat(v, 'f', 2, 64)+"</text>", c.name)
			}
		}
		img, ok := rsvgtest.Render(t, svg)
		if !ok {
			continue
		}
		bd := img.Bounds()
		w, h := bd.Dx(), bd.Dy()
		require.Greater(t, rsvgtest.Hues(img, image.Rect(w/5, h*9/10, w*4/5, h)), 64, "%s: no colour bar drawn", c.name)
		require.True(t, rsvgtest.Blank(img, image.Rect(w-4, 0, w, h)), "%s: something touches the right edge", c.name)
		require.True(t, rsvgtest.Blank(img, image.Rect(0, 0, 2, h)), "%s: something touches the left edge", c.name)
	}
}

// TestHeatScale: the heat map's highest value is drawn in a colour, not the
// near-white end of the black-body map (the cell looked empty), its lowest
// near black, and equal values get a range of 0.05.
func TestHeatScale(t *testing.T) {
	cm, lo, hi := heatScale([][]float64{{0.31, 0.52}, {0.47, 0.66}})
	require.Equal(t, 0.31, lo)
	require.Equal(t, 0.66, hi)
	top, err := cm.At(hi)
	require.NoError(t, err)
	r, g, b, _ := top.RGBA()
	require.False(t, r > 0xdc00 && g > 0xdc00 && b > 0xdc00, "the highest cell is near-white: %v", top)
	bottom, err := cm.At(lo)
	require.NoError(t, err)
	r, g, b, _ = bottom.RGBA()
	require.Less(t, max(r, g, b), uint32(0x2000), "the lowest cell is not dark: %v", bottom)
	_, lo, hi = heatScale([][]float64{{0.5, 0.5}})
	require.InDelta(t, 0.45, lo, 1e-12)
	require.InDelta(t, 0.5, hi, 1e-12)
}
