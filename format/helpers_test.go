package format

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// sample is one tensor a test writes and expects back.
type sample struct {
	name  string
	dtype DType
	shape []int
	data  []byte
}

// samples returns tensors of every dtype with odd shapes, a scalar and an
// empty tensor; the data is a deterministic pattern.
func samples() []sample {
	mk := func(name string, dt DType, shape ...int) sample {
		n := 1
		for _, d := range shape {
			n *= d
		}
		b := make([]byte, n*dt.Size())
		for i := range b {
			b[i] = byte(i*7 + len(name))
		}
		return sample{name, dt, shape, b}
	}
	f32 := mk("model.layers.0.self_attn.q_proj.weight", F32, 3, 5)
	for i := 0; i < 15; i++ { // real float values, for ToF32 checks
		binary.LittleEndian.PutUint32(f32.data[4*i:], math.Float32bits(float32(i)-7.5))
	}
	return []sample{
		f32,
		mk("model.embed_tokens.weight", F16, 7, 3),
		mk("model.norm.weight", BF16, 13),
		mk("model.layers.0.mlp.neuron_index", I32, 5),
		mk("odd.three_d", BF16, 3, 1, 9),
		mk("scalar", F32),
		mk("empty", F16, 0, 11),
		mk("scores", F64, 2, 3),
		mk("after.empty", I32, 1),
	}
}

// testMeta returns metadata with every kind of key filled in.
func testMeta() Metadata {
	return Metadata{
		Config:           json.RawMessage(`{"model_type":"llama","hidden_size":4,"intermediate_size":6,"num_hidden_layers":2}`),
		GenerationConfig: json.RawMessage(`{"do_sample":false}`),
		Tokenizer:        json.RawMessage(`{"model":{"type":"BPE","vocab":{"<s>":0,"a&b":1}}}`),
		DType:            F32,
		Selection: &Selection{Gamma: 0.5, Delta: 0.25, FirstLayer: 0, LastLayer: 1, Random: true, Seed: 7,
			Layers: []LayerSelection{{Layer: 0, Kept: 3, Base: 1}}},
		Provenance: Provenance{
			SourceDigest: "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			Source:       "models/tiny",
			TaskScores: &ScoresRef{Path: "scores/squad.sinf", Task: "squad",
				Digest:      "sha256:" + "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
				InputTokens: 1000, GeneratedTokens: 200},
			ToolVersion: "test",
			Created:     "2025-01-02T03:04:05Z",
		},
	}
}

// writeFile writes tensors through the Writer to dir/name and returns the path.
func writeFile(t testing.TB, dir, name string, meta Metadata, align int, ts []sample) string {
	t.Helper()
	path := filepath.Join(dir, name)
	w, err := Create(path, meta, align)
	require.NoError(t, err)
	defer w.Abort()
	for _, s := range ts {
		require.NoError(t, w.AddTensor(s.name, s.dtype, s.shape, s.data))
	}
	require.NoError(t, w.Close())
	return path
}

// sampleBytes returns the bytes of a file holding samples() with testMeta().
func sampleBytes(t testing.TB) []byte {
	t.Helper()
	path := writeFile(t, t.TempDir(), "s.sinf", testMeta(), 0, samples())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// fixChecksums recomputes the metadata, directory and header checksums of b
// in place wherever the header's regions lie within b, so that a corruption
// reaches the checks behind them. It never panics.
func fixChecksums(b []byte) {
	if len(b) < HeaderSize {
		return
	}
	h := decodeHeader(b)
	size := uint64(len(b))
	if h.MetadataOffset <= size && h.MetadataLength <= size-h.MetadataOffset {
		binary.LittleEndian.PutUint32(b[offMetaCRC:], Checksum(b[h.MetadataOffset:h.MetadataOffset+h.MetadataLength]))
	}
	if h.DirectoryOffset <= size && h.DirectoryLength <= size-h.DirectoryOffset {
		binary.LittleEndian.PutUint32(b[offDirCRC:], Checksum(b[h.DirectoryOffset:h.DirectoryOffset+h.DirectoryLength]))
	}
	binary.LittleEndian.PutUint32(b[offHeaderCRC:], Checksum(b[:offHeaderCRC]))
}

// patchHeader returns a copy of b with the header changed by mod and the
// header checksum recomputed.
func patchHeader(b []byte, mod func(h *Header)) []byte {
	c := append([]byte(nil), b...)
	h := decodeHeader(c)
	mod(&h)
	copy(c, h.encode())
	return c
}

// rewriteDir returns a copy of b (a file whose directory is its last region,
// as the Writer lays it out) with the directory entries changed by mod and
// the header's directory fields, file size and checksums updated.
func rewriteDir(t testing.TB, b []byte, mod func(es []TensorInfo) []TensorInfo) []byte {
	t.Helper()
	f, err := NewFile(b, "orig")
	require.NoError(t, err)
	es := mod(f.Tensors())
	var dir []byte
	for i := range es {
		dir = encodeEntry(dir, &es[i])
	}
	h := f.Header
	c := append(append([]byte(nil), b[:h.DirectoryOffset]...), dir...)
	h.DirectoryLength = uint64(len(dir))
	h.DirectoryCRC = Checksum(dir)
	h.TensorCount = uint32(len(es))
	h.FileSize = uint64(len(c))
	copy(c, h.encode())
	return c
}

// requireFormatError asserts err is a *FormatError whose field contains
// field and whose message contains every one of msgs.
func requireFormatError(t testing.TB, err error, field string, msgs ...string) *FormatError {
	t.Helper()
	require.Error(t, err)
	var fe *FormatError
	require.ErrorAs(t, err, &fe, "error %v is not a *FormatError", err)
	require.Contains(t, fe.Field, field, "error: %v", err)
	for _, m := range msgs {
		require.Contains(t, err.Error(), m)
	}
	return fe
}

// readAll returns a file's bytes.
func readAll(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}
