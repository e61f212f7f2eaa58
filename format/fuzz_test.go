package format

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzOpen feeds arbitrary bytes to NewFile, and again after repairing the
// checksums so that mutations get past them to the metadata and directory
// checks. Whatever the input, nothing may panic; when a file opens, every
// tensor view is touched, decoded and verified.
func FuzzOpen(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		exercise(b)
		if len(b) >= HeaderSize {
			c := append([]byte(nil), b...)
			fixChecksums(c)
			exercise(c)
		}
	})
}

// exercise opens b and, when it opens, uses everything a reader can reach.
func exercise(b []byte) {
	f, err := NewFile(b, "fuzz")
	if err != nil {
		if err.Error() == "" {
			panic("empty error")
		}
		return
	}
	_ = f.Metadata()
	_ = f.RawMetadata()
	_ = f.ValidateSelection()
	var sum byte
	for _, info := range f.Tensors() {
		v, err := f.Tensor(info.Name)
		if err != nil {
			panic(fmt.Sprintf("listed tensor %q does not open: %v", info.Name, err))
		}
		if len(v.Data) != v.Elems()*v.DType.Size() {
			panic(fmt.Sprintf("tensor %q: %d bytes for %v of %v", v.Name, len(v.Data), v.Shape, v.DType))
		}
		for _, x := range v.Data {
			sum += x
		}
		switch v.DType {
		case I32:
			_, _ = v.I32s()
		case F32:
			_, _ = v.F32s()
		}
		if v.Elems() < 1<<20 {
			_, _ = v.ToF32()
		}
		_ = f.VerifyTensor(info.Name)
	}
	_ = f.Verify()
	_ = f.Close()
	_ = sum
}

// fuzzSeeds returns small valid files and corruptions of them.
func fuzzSeeds(t testing.TB) [][]byte {
	small := fileBytes(t, Metadata{}, []sample{
		{"a", F32, []int{2, 3}, make([]byte, 24)},
		{"idx", I32, []int{2}, []byte{1, 0, 0, 0, 0, 0, 0, 0}},
	})
	m := testMeta()
	m.Tokenizer, m.GenerationConfig, m.Provenance = nil, nil, Provenance{}
	sparse := fileBytes(t, m, sparseSample([]int32{5, 0, 2}))
	flip := func(b []byte, i int) []byte {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		return c
	}
	return [][]byte{
		small,
		sparse,
		small[:len(small)/2], // truncated
		flip(small, 0),       // bad magic
		patchHeader(small, func(h *Header) { h.Version = 2 }),                  // newer version
		patchHeader(small, func(h *Header) { h.DirectoryOffset = h.FileSize }), // directory past the end
		rewriteDir(t, small, func(es []TensorInfo) []TensorInfo { // overlapping entries
			es[1].Offset = es[0].Offset
			return es
		}),
		rewriteDir(t, sparse, func(es []TensorInfo) []TensorInfo { // duplicate names
			es[2].Name = es[1].Name
			return es
		}),
	}
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzOpen from fuzzSeeds when
// SINF_WRITE_FUZZ_SEEDS=1; the files are committed.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("SINF_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set SINF_WRITE_FUZZ_SEEDS=1 to regenerate testdata/fuzz/FuzzOpen")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	names := []string{"valid-small", "valid-sparse", "truncated", "bad-magic", "newer-version",
		"directory-past-end", "overlap", "duplicate-name"}
	for i, b := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		require.NoError(t, os.WriteFile(filepath.Join(dir, names[i]), []byte(body), 0o644))
	}
}
