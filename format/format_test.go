package format

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoundTrip(t *testing.T) {
	for _, align := range []int{0, 64, 128, 4096} {
		dir := t.TempDir()
		ts := samples()
		path := writeFile(t, dir, "m.sinf", testMeta(), align, ts)

		f, err := Open(path)
		require.NoError(t, err)
		defer f.Close()

		wantAlign := max(align, DefaultAlignment)
		require.EqualValues(t, wantAlign, f.Alignment)
		require.EqualValues(t, Version, f.Version)
		require.Equal(t, testMeta(), f.Metadata())

		infos := f.Tensors()
		require.Len(t, infos, len(ts))
		for i, s := range ts {
			info := infos[i]
			require.Equal(t, s.name, info.Name, "directory is in write order")
			require.Equal(t, s.dtype, info.DType)
			require.Equal(t, s.shape, info.Shape)
			require.Zero(t, info.Offset%int64(wantAlign), "tensor %s at %d is not %d-aligned", s.name, info.Offset, wantAlign)
			require.EqualValues(t, len(s.data), info.Length)
			require.Equal(t, Checksum(s.data), info.CRC32C)

			v, err := f.Tensor(s.name)
			require.NoError(t, err)
			require.Equal(t, s.dtype, v.DType)
			require.Equal(t, s.shape, v.Shape)
			require.Equal(t, len(s.data), len(v.Data))
			if len(s.data) > 0 {
				require.Equal(t, s.data, v.Data)
			}
			require.Equal(t, len(v.Data), v.Elems()*v.DType.Size())
		}
		require.NoError(t, f.Verify())
		require.NoError(t, f.Advise(AdviceWillNeed))
		require.NoError(t, f.AdviseTensor(ts[0].name, AdviceSequential))

		// Exact size from the layout (spec §3.4): header, metadata, then each
		// tensor at the next multiple of the alignment, then the directory.
		a := int64(wantAlign)
		pos := int64(HeaderSize) + int64(f.MetadataLength)
		var dirLen int64
		for i, s := range ts {
			pos = alignUp(pos, a)
			require.Equal(t, pos, infos[i].Offset)
			pos += int64(len(s.data))
			dirLen += int64(4 + len(s.name) + 4 + 4 + 8*len(s.shape) + 8 + 8 + 4)
		}
		require.EqualValues(t, pos, f.DirectoryOffset)
		require.EqualValues(t, dirLen, f.DirectoryLength)
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, pos+dirLen, st.Size())
		require.Equal(t, st.Size(), f.Size())
		require.Len(t, f.Bytes(), int(st.Size()))

		// Decoded values survive.
		v, _ := f.Tensor(ts[0].name)
		got, err := v.F32s()
		require.NoError(t, err)
		require.Equal(t, float32(-7.5), got[0])
		require.Equal(t, float32(6.5), got[14])

		require.NoError(t, f.Close())
		require.NoError(t, f.Close(), "second Close is harmless")
		_, err = f.Tensor(ts[0].name)
		require.ErrorIs(t, err, ErrClosed)
	}
}

func TestStreamingWriterMatchesAddTensor(t *testing.T) {
	dir := t.TempDir()
	ts := samples()
	a := writeFile(t, dir, "a.sinf", testMeta(), 0, ts)

	b := filepath.Join(dir, "b.sinf")
	w, err := Create(b, testMeta(), 0)
	require.NoError(t, err)
	defer w.Abort()
	for _, s := range ts {
		tw, err := w.BeginTensor(s.name, s.dtype, s.shape)
		require.NoError(t, err)
		for i := 0; i < len(s.data); i += 3 { // odd-sized pieces
			_, err := tw.Write(s.data[i:min(i+3, len(s.data))])
			require.NoError(t, err)
		}
		require.NoError(t, w.EndTensor())
	}
	require.NoError(t, w.Close())
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	require.Equal(t, ab, bb)
}

func TestEmptyFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "e.sinf", Metadata{}, 0, nil)
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.Empty(t, f.Tensors())
	require.NoError(t, f.Verify())
	require.EqualValues(t, HeaderSize+f.MetadataLength, f.Size())
}

func TestTensorMissing(t *testing.T) {
	f, err := NewFile(sampleBytes(t), "mem.sinf")
	require.NoError(t, err)
	_, err = f.Tensor("model.layers.9.mlp.up_proj.weight")
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), "model.layers.9.mlp.up_proj.weight")
	require.Contains(t, err.Error(), "mem.sinf")
	require.ErrorIs(t, f.VerifyTensor("nope"), ErrNotFound)
	require.False(t, f.Has("nope"))
	require.True(t, f.Has("scalar"))
}

func TestMetadataJSON(t *testing.T) {
	mb, err := MarshalMetadata(testMeta())
	require.NoError(t, err)
	require.Contains(t, string(mb), `"<s>"`, "no HTML escaping")
	require.Contains(t, string(mb), `"a&b"`)
	require.Contains(t, string(mb), `"dtype":"F32"`)
	require.Contains(t, string(mb), `"last_layer":1`)

	// Unknown keys are ignored by readers (spec §2).
	var m map[string]any
	require.NoError(t, json.Unmarshal(mb, &m))
	m["future_key"] = map[string]any{"x": 1}
	m["provenance"].(map[string]any)["future"] = true
	mb2, _ := json.Marshal(m)
	b := sampleBytes(t)
	f0, err := NewFile(b, "x")
	require.NoError(t, err)
	// Point the header at the new block, appended after the directory.
	c := append(append([]byte(nil), b...), mb2...)
	c = patchHeader(c, func(h *Header) {
		h.MetadataOffset = uint64(len(b))
		h.MetadataLength = uint64(len(mb2))
		h.MetadataCRC = Checksum(mb2)
		h.FileSize = uint64(len(c))
	})
	f, err := NewFile(c, "x")
	require.NoError(t, err)
	require.Equal(t, mb2, f.RawMetadata())
	// The embedded files keep their JSON values, not necessarily their bytes.
	got, want := f.Metadata(), f0.Metadata()
	require.JSONEq(t, string(want.Config), string(got.Config))
	require.JSONEq(t, string(want.Tokenizer), string(got.Tokenizer))
	got.Config, got.Tokenizer, want.Config, want.Tokenizer = nil, nil, nil, nil
	require.Equal(t, want, got)
}

func TestMetadataValidate(t *testing.T) {
	cases := map[string]func(m *Metadata){
		"gamma":             func(m *Metadata) { m.Selection.Gamma = 0 },
		"selection.layers":  func(m *Metadata) { m.Selection.LastLayer = 2 },
		"layers[0].layer":   func(m *Metadata) { m.Selection.Layers[0].Layer = 1 },
		"base ≤ kept":       func(m *Metadata) { m.Selection.Layers[0].Base = 4 },
		"kept ≥ 1":          func(m *Metadata) { m.Selection.Layers[0].Kept, m.Selection.Layers[0].Base = 0, 0 },
		"selection.delta":   func(m *Metadata) { m.Selection.Delta = 0.6 },
		"layer range":       func(m *Metadata) { m.Selection.FirstLayer = -1 },
		"config":            func(m *Metadata) { m.Config = json.RawMessage(`[1]`) },
		"source_digest":     func(m *Metadata) { m.Provenance.SourceDigest = "md5:abc" },
		"task_scores":       func(m *Metadata) { m.Provenance.TaskScores.Digest = "sha256:XYZ" },
		"provenance.create": func(m *Metadata) { m.Provenance.Created = "yesterday" },
		"dtype":             func(m *Metadata) { m.DType = 42 },
		"a tensor layout":   func(m *Metadata) { m.DType = Q4_0X16 },
	}
	for want, mod := range cases {
		m := testMeta()
		mod(&m)
		err := m.Validate()
		require.Error(t, err, want)
		require.Contains(t, err.Error(), want)
		_, err = Create(filepath.Join(t.TempDir(), "x.sinf"), m, 0)
		require.Error(t, err, "Create validates metadata")
	}
	m := testMeta()
	require.NoError(t, m.Validate())
}

func TestDTypeText(t *testing.T) {
	for _, d := range []DType{F32, F16, BF16, I32, F64, Q8_0, Q4_0, SK2} {
		b, err := d.MarshalText()
		require.NoError(t, err)
		var e DType
		require.NoError(t, e.UnmarshalText(b))
		require.Equal(t, d, e)
	}
	_, err := DType(0).MarshalText()
	require.Error(t, err)
	var e DType
	require.Error(t, e.UnmarshalText([]byte("Q4_1")))
	_, err = DType(16).MarshalText()
	require.Error(t, err)
}

func TestDigest(t *testing.T) {
	write := func(dir string, files map[string]string) {
		for name, body := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
		}
	}
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	// Single file.
	dir := t.TempDir()
	write(dir, map[string]string{"config.json": "C", "model.safetensors": "M", "other.safetensors": "X"})
	d, err := SourceDigest(dir)
	require.NoError(t, err)
	require.Equal(t, hash("CM"), d)
	require.NoError(t, checkDigest("k", d))

	// Shards named by the index, in name order, each once.
	dir = t.TempDir()
	write(dir, map[string]string{"config.json": "C", "model-2.safetensors": "B", "model-1.safetensors": "A",
		"stray.safetensors": "X", "model.safetensors.index.json": `{"weight_map":{"a":"model-2.safetensors","b":"model-1.safetensors","c":"model-2.safetensors"}}`})
	d, err = SourceDigest(dir)
	require.NoError(t, err)
	require.Equal(t, hash("CAB"), d)
	want, err := DigestFiles(filepath.Join(dir, "config.json"), filepath.Join(dir, "model-1.safetensors"), filepath.Join(dir, "model-2.safetensors"))
	require.NoError(t, err)
	require.Equal(t, want, d)

	write(dir, map[string]string{"model.safetensors.index.json": `{"weight_map":{"a":"../x.safetensors"}}`})
	_, err = SourceDigest(dir)
	require.ErrorContains(t, err, "outside the folder")
	_, err = SourceDigest(t.TempDir())
	require.Error(t, err)
}

func TestErrorsAreTyped(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "missing.sinf"))
	require.True(t, errors.Is(err, os.ErrNotExist))
	var fe *FormatError
	require.False(t, errors.As(err, &fe))
}
