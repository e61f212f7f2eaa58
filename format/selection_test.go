package format

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateIndexMap(t *testing.T) {
	require.NoError(t, ValidateIndexMap([]int32{5, 0, 2}, 6))
	require.NoError(t, ValidateIndexMap(nil, 0))
	require.NoError(t, ValidateIndexMap([]int32{2, 1, 0}, 3))
	for _, c := range []struct {
		idx  []int32
		n    int
		want string
	}{
		{[]int32{0, 6}, 6, "entry 1 is 6, outside [0, 6)"},
		{[]int32{-1}, 6, "entry 0 is -1"},
		{[]int32{3, 1, 3}, 6, "entries 0 and 2 both name neuron 3"},
		{[]int32{0, 1, 2}, 2, "3 entries for 2 neurons"},
		{[]int32{}, -1, "negative"},
	} {
		err := ValidateIndexMap(c.idx, c.n)
		require.Error(t, err)
		require.Contains(t, err.Error(), c.want)
	}
}

// sparseSample returns the tensors of a 2-layer model (hidden 4, N 6) whose
// layer 0 keeps neurons {5, 0, 2}, base 1, and whose layer 1 is whole.
func sparseSample(index []int32) []sample {
	f32 := func(name string, shape ...int) sample {
		return sample{name, F32, shape, make([]byte, 4*shape[0]*shape[1])}
	}
	ib := make([]byte, 4*len(index))
	for i, v := range index {
		binary.LittleEndian.PutUint32(ib[4*i:], uint32(v))
	}
	return []sample{
		{"model.embed_tokens.weight", F32, []int{8, 4}, make([]byte, 128)},
		f32(GateName(0), 3, 4), f32(UpName(0), 3, 4), f32(DownTName(0), 3, 4),
		{IndexName(0), I32, []int{3}, ib},
		f32(GateName(1), 6, 4), f32(UpName(1), 6, 4), f32(DownName(1), 4, 6),
	}
}

func TestValidateSelection(t *testing.T) {
	ok := []int32{5, 0, 2}
	f, err := NewFile(fileBytes(t, testMeta(), sparseSample(ok)), "s.sinf")
	require.NoError(t, err)
	require.NoError(t, f.ValidateSelection())

	// A huge num_hidden_layers from an untrusted config costs nothing.
	m0 := testMeta()
	m0.Config = json.RawMessage(`{"hidden_size":4,"intermediate_size":6,"num_hidden_layers":` + strconv.Itoa(math.MaxInt) + `}`)
	f, err = NewFile(fileBytes(t, m0, sparseSample(ok)), "s.sinf")
	require.NoError(t, err)
	require.NoError(t, f.ValidateSelection())

	// No selection: nothing to check.
	m := testMeta()
	m.Selection = nil
	f, err = NewFile(fileBytes(t, m, samples()), "s.sinf")
	require.NoError(t, err)
	require.NoError(t, f.ValidateSelection())

	replace := func(ts []sample, name string, s sample) []sample {
		for i := range ts {
			if ts[i].name == name {
				ts[i] = s
			}
		}
		return ts
	}
	drop := func(ts []sample, name string) []sample {
		out := ts[:0]
		for _, s := range ts {
			if s.name != name {
				out = append(out, s)
			}
		}
		return out
	}
	cases := []struct {
		name, field, msg string
		meta             func(m *Metadata)
		ts               []sample
	}{
		{"repeat", `"model.layers.0.mlp.neuron_index" data`, "both name neuron 5", nil, sparseSample([]int32{5, 0, 5})},
		{"out of range", `"model.layers.0.mlp.neuron_index" data`, "outside [0, 6)", nil, sparseSample([]int32{5, 0, 6})},
		{"missing index", `"model.layers.0.mlp.neuron_index"`, "missing", nil, drop(sparseSample(ok), IndexName(0))},
		{"missing down_t", `"model.layers.0.mlp.down_proj.weight_t"`, "missing", nil, drop(sparseSample(ok), DownTName(0))},
		{"wrong gate shape", `"model.layers.0.mlp.gate_proj.weight" shape`, "want [3 4]", nil,
			replace(sparseSample(ok), GateName(0), sample{GateName(0), F32, []int{6, 4}, make([]byte, 96)})},
		{"wrong dtype", `"model.layers.0.mlp.up_proj.weight" dtype`, "metadata dtype is F32", nil,
			replace(sparseSample(ok), UpName(0), sample{UpName(0), BF16, []int{3, 4}, make([]byte, 24)})},
		{"index dtype", `"model.layers.0.mlp.neuron_index"`, "want I32 [3]", nil,
			replace(sparseSample(ok), IndexName(0), sample{IndexName(0), F32, []int{3}, make([]byte, 12)})},
		{"whole down in sliced layer", `"model.layers.0.mlp.down_proj.weight"`, "not down_proj.weight", nil,
			append(sparseSample(ok), sample{DownName(0), F32, []int{4, 6}, make([]byte, 96)})},
		{"sliced tensor outside range", `"model.layers.1.mlp.neuron_index"`, "outside the selection", nil,
			append(sparseSample(ok), sample{IndexName(1), I32, []int{1}, make([]byte, 4)})},
		{"sliced tensor with odd layer number", `"model.layers.00.mlp.neuron_index"`, "outside the selection", nil,
			append(sparseSample(ok), sample{"model.layers.00.mlp.neuron_index", I32, []int{1}, make([]byte, 4)})},
		{"range past layers", "metadata selection", "exceeds num_hidden_layers 2", func(m *Metadata) {
			m.Selection.FirstLayer, m.Selection.LastLayer = 2, 3
			m.Selection.Layers[0].Layer = 2
		}, sparseSample(ok)},
		{"kept > N", "metadata selection", "keeps 7 neurons", func(m *Metadata) { m.Selection.Layers[0].Kept = 7 }, sparseSample(ok)},
		{"no config", "metadata config", "needs config", func(m *Metadata) { m.Config = nil }, sparseSample(ok)},
		{"bad config", "metadata config", "must be positive", func(m *Metadata) { m.Config = json.RawMessage(`{"hidden_size":4}`) }, sparseSample(ok)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testMeta()
			if c.meta != nil {
				c.meta(&m)
			}
			f, err := NewFile(fileBytes(t, m, c.ts), "s.sinf")
			require.NoError(t, err)
			requireFormatError(t, f.ValidateSelection(), c.field, c.msg, "s.sinf")
		})
	}
}

// fileBytes writes a file and returns its bytes.
func fileBytes(t testing.TB, m Metadata, ts []sample) []byte {
	t.Helper()
	return readAll(t, writeFile(t, t.TempDir(), "f.sinf", m, 0, ts))
}

func TestValidateIndexMapHugeN(t *testing.T) {
	// n comes from an untrusted config: a huge n must not allocate n entries.
	const n = math.MaxInt
	require.NoError(t, ValidateIndexMap([]int32{7, 1 << 30, 3}, n))
	require.ErrorContains(t, ValidateIndexMap([]int32{7, 1 << 30, 7}, n), "entries 0 and 2 both name neuron 7")
	allocs := testing.AllocsPerRun(3, func() { _ = ValidateIndexMap([]int32{1, 2}, n) })
	require.Less(t, allocs, 10.0)
}

// TestFFNBias: a sliced layer's down_proj.bias makes the writer set
// FlagFFNBias (a whole layer's does not), the reader accepts the flag, and
// ValidateSelection refuses the bias without the flag or with a shape
// other than F32 [hidden].
func TestFFNBias(t *testing.T) {
	bias := sample{DownBiasName(0), F32, []int{4}, make([]byte, 16)}
	b := fileBytes(t, testMeta(), append(sparseSample([]int32{5, 0, 2}), bias))
	f, err := NewFile(b, "s.sinf")
	require.NoError(t, err)
	require.Equal(t, uint32(FlagFFNBias), f.Flags)
	require.NoError(t, f.ValidateSelection())

	f, err = NewFile(patchHeader(b, func(h *Header) { h.Flags = 0 }), "s.sinf")
	require.NoError(t, err)
	requireFormatError(t, f.ValidateSelection(), "flags", "down_proj.bias", "s.sinf")

	whole := sample{DownBiasName(1), F32, []int{4}, make([]byte, 16)}
	f, err = NewFile(fileBytes(t, testMeta(), append(sparseSample([]int32{5, 0, 2}), whole)), "s.sinf")
	require.NoError(t, err)
	require.Zero(t, f.Flags, "a whole layer's bias is not the sliced layers' output bias")

	short := sample{DownBiasName(0), F32, []int{3}, make([]byte, 12)}
	f, err = NewFile(fileBytes(t, testMeta(), append(sparseSample([]int32{5, 0, 2}), short)), "s.sinf")
	require.NoError(t, err)
	requireFormatError(t, f.ValidateSelection(), `tensor "model.layers.0.mlp.down_proj.bias"`, "want F32 [4]", "s.sinf")
}

// TestValidateSelectionInterleaved: a sliced layer's gate_proj may be stored
// interleaved (spec §5.4, §6.2), its up_proj and down_proj.weight_t may not.
func TestValidateSelectionInterleaved(t *testing.T) {
	m := testMeta()
	m.Config = json.RawMessage(`{"model_type":"llama","hidden_size":32,"intermediate_size":6,"num_hidden_layers":2}`)
	m.DType = Q4_0
	ib := make([]byte, 12)
	for i, v := range []uint32{5, 0, 2} {
		binary.LittleEndian.PutUint32(ib[4*i:], v)
	}
	q := func(name string, dt DType, rows int) sample {
		rb, err := dt.RowBytes(32)
		require.NoError(t, err)
		return sample{name, dt, []int{rows, 32}, make([]byte, rb*rows)}
	}
	ts := func(gate, up, down DType) []sample {
		return []sample{
			q("model.embed_tokens.weight", Q4_0, 8),
			q(GateName(0), gate, 3), q(UpName(0), up, 3), q(DownTName(0), down, 3),
			{IndexName(0), I32, []int{3}, ib},
			q(GateName(1), Q4_0X16, 6), q(UpName(1), Q4_0X16, 6), {DownName(1), F32, []int{32, 6}, make([]byte, 4*32*6)},
		}
	}
	for _, c := range []struct {
		gate, up, down DType
		field, msg     string
	}{
		{Q4_0, Q4_0, Q4_0, "", ""},
		{Q4_0X16, Q4_0, Q4_0, "", ""},
		{Q4_0, Q4_0X16, Q4_0, `"model.layers.0.mlp.up_proj.weight" dtype`, "a sliced layer's up_proj and down_proj.weight_t are whole rows"},
		{Q4_0X16, Q4_0X16, Q4_0, `"model.layers.0.mlp.up_proj.weight" dtype`, "a sliced layer's up_proj and down_proj.weight_t are whole rows"},
		{Q4_0, Q4_0, Q4_0X16, `"model.layers.0.mlp.down_proj.weight_t" dtype`, "a sliced layer's up_proj and down_proj.weight_t are whole rows"},
		{Q8_0X16, Q4_0, Q4_0, `"model.layers.0.mlp.gate_proj.weight" dtype`, "Q8_0X16, metadata dtype is Q4_0"},
	} {
		t.Run(c.gate.String()+"/"+c.up.String()+"/"+c.down.String(), func(t *testing.T) {
			f, err := NewFile(fileBytes(t, m, ts(c.gate, c.up, c.down)), "s.sinf")
			require.NoError(t, err)
			if c.msg == "" {
				require.NoError(t, f.ValidateSelection())
				return
			}
			requireFormatError(t, f.ValidateSelection(), c.field, c.msg, "s.sinf")
		})
	}
}
