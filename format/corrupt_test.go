package format

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every check of spec §7 has a corruption that trips it, with the error
// naming the field.

func TestTruncatedEveryPrefix(t *testing.T) {
	b := sampleBytes(t)
	for n := 0; n < len(b); n++ {
		_, err := NewFile(b[:n], "cut.sinf")
		require.Error(t, err, "prefix of %d bytes", n)
		var fe *FormatError
		require.ErrorAs(t, err, &fe, "prefix of %d bytes", n)
	}
	_, err := NewFile(b[:HeaderSize-1], "cut.sinf")
	requireFormatError(t, err, "header", "truncated")
	_, err = NewFile(b[:len(b)-1], "cut.sinf")
	requireFormatError(t, err, "file_size", "truncated")

	// The same through Open, which maps the file.
	dir := t.TempDir()
	for _, n := range []int{0, 3, 7, HeaderSize - 1, HeaderSize, HeaderSize + 1, len(b) / 2, len(b) - 1} {
		path := filepath.Join(dir, fmt.Sprint(n))
		require.NoError(t, os.WriteFile(path, b[:n], 0o644))
		_, err := Open(path)
		fe := requireFormatError(t, err, "", path)
		require.Equal(t, path, fe.Path)
	}
}

func TestBadMagic(t *testing.T) {
	b := sampleBytes(t)
	b[0] = 'G'
	_, err := NewFile(b, "x.sinf")
	fe := requireFormatError(t, err, "magic", "x.sinf", "not a sinf file")
	require.EqualValues(t, 0, fe.Off)
	_, err = NewFile([]byte("GGUF"), "x.sinf")
	requireFormatError(t, err, "magic")
}

func TestNewerVersion(t *testing.T) {
	b := patchHeader(sampleBytes(t), func(h *Header) { h.Version = 2 })
	_, err := NewFile(b, "x.sinf")
	fe := requireFormatError(t, err, "version", "version 2", "version 1")
	require.EqualValues(t, offVersion, fe.Off)
	// A newer version is reported even if the rest of the header differs
	// (here: is missing).
	_, err = NewFile(b[:8], "x.sinf")
	requireFormatError(t, err, "version", "version 2", "version 1")
	_, err = NewFile(patchHeader(b, func(h *Header) { h.Version = 0 }), "x.sinf")
	requireFormatError(t, err, "version", "invalid")
}

func TestHeaderFields(t *testing.T) {
	b := sampleBytes(t)
	cases := []struct {
		name, field, msg string
		mod              func(h *Header)
	}{
		{"incompatible flag", "flags", "0x00020000", func(h *Header) { h.Flags = 1 << 17 }}, // bit 16 is FlagFFNBias
		{"alignment not a power of two", "alignment", "100", func(h *Header) { h.Alignment = 100 }},
		{"alignment too small", "alignment", "32", func(h *Header) { h.Alignment = 32 }},
		{"file_size larger", "file_size", "truncated", func(h *Header) { h.FileSize++ }},
		{"file_size smaller", "file_size", "trailing", func(h *Header) { h.FileSize-- }},
		{"metadata past end", "metadata_offset", "not within", func(h *Header) { h.MetadataLength = h.FileSize }},
		{"metadata in header", "metadata_offset", "not within", func(h *Header) { h.MetadataOffset = 8 }},
		{"metadata offset overflow", "metadata_offset", "not within", func(h *Header) { h.MetadataOffset = 1<<64 - 1 }},
		{"directory length overflow", "directory_offset", "not within", func(h *Header) { h.DirectoryLength = 1<<64 - 8 }},
		{"metadata checksum", "metadata_crc32c", "does not match", func(h *Header) { h.MetadataCRC ^= 1 }},
		{"directory checksum", "directory_crc32c", "does not match", func(h *Header) { h.DirectoryCRC ^= 1 }},
		{"tensor count huge", "tensor_count", "cannot fit", func(h *Header) { h.TensorCount = 1<<32 - 1 }},
		{"tensor count short", "directory_length", "follow the last", func(h *Header) { h.TensorCount-- }},
		{"tensor count long", "directory[9]", "past the end", func(h *Header) { h.TensorCount++ }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewFile(patchHeader(b, c.mod), "x.sinf")
			requireFormatError(t, err, c.field, c.msg, "x.sinf")
		})
	}
	// A compatible flag is ignored.
	_, err := NewFile(patchHeader(b, func(h *Header) { h.Flags = 1 }), "x.sinf")
	require.NoError(t, err)
	// Reserved bytes are ignored (but covered by the header checksum).
	c := append([]byte(nil), b...)
	c[offReserved] = 1
	_, err = NewFile(c, "x.sinf")
	requireFormatError(t, err, "header_crc32c", "does not match")
	fixChecksums(c)
	_, err = NewFile(c, "x.sinf")
	require.NoError(t, err)
}

func TestBadMetadata(t *testing.T) {
	b := sampleBytes(t)
	h := decodeHeader(b)
	at := func(c []byte, i int) *byte { return &c[int(h.MetadataOffset)+i] }
	cases := map[string]func(c []byte){
		"not a JSON object": func(c []byte) { *at(c, 0) = '[' },
		"UTF-8":             func(c []byte) { *at(c, 5) = 0xff },
		"cannot unmarshal": func(c []byte) { // valid JSON, wrong type: a string for a bool
			s := string(c[h.MetadataOffset : h.MetadataOffset+h.MetadataLength])
			i := indexOf(s, `"random":true`)
			copy(c[int(h.MetadataOffset)+i:], `"random":"ok"`)
		},
		"base ≤ kept": func(c []byte) {
			s := string(c[h.MetadataOffset : h.MetadataOffset+h.MetadataLength])
			i := indexOf(s, `"base":1`)
			copy(c[int(h.MetadataOffset)+i:], `"base":9`)
		},
	}
	for want, mod := range cases {
		c := append([]byte(nil), b...)
		mod(c)
		fixChecksums(c)
		_, err := NewFile(c, "x.sinf")
		fe := requireFormatError(t, err, "metadata", want)
		require.EqualValues(t, h.MetadataOffset, fe.Off)
	}
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	panic("test: " + sub + " not found")
}

// huge is a dimension whose square overflows an int.
const huge = 1 << (strconv.IntSize/2 + 1)

func TestBadDirectory(t *testing.T) {
	b := sampleBytes(t)
	f, err := NewFile(b, "orig")
	require.NoError(t, err)
	size := int64(len(b))
	cases := []struct {
		name, field, msg string
		mod              func(es []TensorInfo) []TensorInfo
	}{
		{"past end", `"model.norm.weight" offset`, "not within", func(es []TensorInfo) []TensorInfo {
			es[2].Offset = alignUp(size, 64) + 64
			return es
		}},
		{"straddles end", `"model.norm.weight" offset`, "not within", func(es []TensorInfo) []TensorInfo {
			es[2].Offset = alignUp(size, 64) - 64 // starts inside, ends past the end
			es[2].Shape, es[2].Length = []int{1000}, 2000
			return es
		}},
		{"in header", `"model.norm.weight" offset`, "not within", func(es []TensorInfo) []TensorInfo {
			es[2].Offset = 0
			return es
		}},
		{"overlap", `region`, "overlaps", func(es []TensorInfo) []TensorInfo {
			es[2].Offset = es[1].Offset
			return es
		}},
		{"overlap with directory", `region`, "directory", func(es []TensorInfo) []TensorInfo {
			es[len(es)-1].Offset = alignUp(int64(f.DirectoryOffset), 64) - 64
			es[len(es)-1].Shape, es[len(es)-1].Length = []int{100}, 400
			return es
		}},
		{"overlap with metadata", `region`, "overlaps the metadata", func(es []TensorInfo) []TensorInfo {
			es[0].Offset = 128
			return es
		}},
		{"misaligned", `"model.norm.weight" offset`, "not a multiple of the alignment 64", func(es []TensorInfo) []TensorInfo {
			es[2].Offset += 4
			return es
		}},
		{"length ≠ shape·size", `"model.norm.weight" length`, "holds 26", func(es []TensorInfo) []TensorInfo {
			es[2].Length = 24
			return es
		}},
		{"shape·size ≠ length", `"model.norm.weight" length`, "holds 24", func(es []TensorInfo) []TensorInfo {
			es[2].Shape = []int{12}
			return es
		}},
		{"duplicate names", `"model.embed_tokens.weight" name`, "duplicate", func(es []TensorInfo) []TensorInfo {
			es[3].Name = es[1].Name
			return es
		}},
		{"unknown dtype", `"model.norm.weight" dtype`, "unknown dtype code 16", func(es []TensorInfo) []TensorInfo {
			es[2].DType = 16
			return es
		}},
		{"interleaved vector", `"model.norm.weight" shape`, "is a matrix", func(es []TensorInfo) []TensorInfo {
			es[2].DType = Q4_0X16
			return es
		}},
		{"block dtype, partial block", `"model.norm.weight" shape`, "13 is not a multiple of the Q8_0 block size 32", func(es []TensorInfo) []TensorInfo {
			es[2].DType = Q8_0
			return es
		}},
		{"block dtype, length ≠ shape", `"model.norm.weight" length`, "holds 18", func(es []TensorInfo) []TensorInfo {
			es[2].DType, es[2].Shape = Q4_0, []int{32}
			return es
		}},
		{"K-quant, row not a multiple of 256", `"model.norm.weight" shape`, "32 is not a multiple of the Q4_K block size 256", func(es []TensorInfo) []TensorInfo {
			es[2].DType, es[2].Shape = Q4_K, []int{32}
			return es
		}},
		{"K-quant, length ≠ shape", `"model.norm.weight" length`, "holds 210", func(es []TensorInfo) []TensorInfo {
			es[2].DType, es[2].Shape = Q6_K, []int{256}
			return es
		}},
		{"block dtype, scalar", `"model.norm.weight" shape`, "at least one dimension", func(es []TensorInfo) []TensorInfo {
			es[2].DType, es[2].Shape = Q4_0, nil
			return es
		}},
		{"too many dims", `"model.norm.weight" ndim`, "9 dimensions", func(es []TensorInfo) []TensorInfo {
			es[2].Shape = []int{1, 1, 1, 1, 1, 1, 1, 1, 13}
			return es
		}},
		{"shape overflow", `"model.norm.weight" shape`, "too large", func(es []TensorInfo) []TensorInfo {
			es[2].Shape = []int{huge, huge}
			return es
		}},
		{"shape overflow hidden by a zero", `"empty" shape`, "too large", func(es []TensorInfo) []TensorInfo {
			es[6].Shape = []int{0, huge, huge}
			return es
		}},
		{"empty name", `directory[0] name_length`, "not in [1, 4096]", func(es []TensorInfo) []TensorInfo {
			es[0].Name = ""
			return es
		}},
		{"bad UTF-8 name", `directory[0] name`, "UTF-8", func(es []TensorInfo) []TensorInfo {
			es[0].Name = "a\xffb"
			return es
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewFile(rewriteDir(t, b, c.mod), "x.sinf")
			requireFormatError(t, err, c.field, c.msg, "x.sinf")
		})
	}
	_, err = NewFile(rewriteDir(t, b, func(es []TensorInfo) []TensorInfo {
		es[len(es)-1].Offset = alignUp(int64(f.DirectoryOffset), 64) - 64
		es[len(es)-1].Shape, es[len(es)-1].Length = []int{100}, 400
		return es
	}), "x.sinf")
	requireFormatError(t, err, "region", `tensor "after.empty"`, "the directory", "overlaps")
	// Trailing bytes inside the directory.
	c := append([]byte(nil), b...)
	c = append(c, 0, 0, 0)
	c = patchHeader(c, func(h *Header) { h.DirectoryLength += 3; h.FileSize += 3 })
	fixChecksums(c)
	_, err = NewFile(c, "x.sinf")
	requireFormatError(t, err, "directory_length", "3 bytes follow")
	// A directory entry cut short.
	c = append([]byte(nil), b[:len(b)-2]...)
	c = patchHeader(c, func(h *Header) { h.DirectoryLength -= 2; h.FileSize -= 2 })
	fixChecksums(c)
	_, err = NewFile(c, "x.sinf")
	requireFormatError(t, err, "directory[8]", "past the end")
}

func TestVerifyNamesCorruptTensor(t *testing.T) {
	b := sampleBytes(t)
	f, err := NewFile(b, "x.sinf")
	require.NoError(t, err)
	require.NoError(t, f.Verify())
	bad := f.Tensors()[4] // odd.three_d
	later := f.Tensors()[7]
	b[bad.Offset+5] ^= 0x10
	b[later.Offset] ^= 0x10
	f, err = NewFile(b, "x.sinf")
	require.NoError(t, err, "Open does not read tensor data")
	err = f.Verify()
	fe := requireFormatError(t, err, `"odd.three_d"`, "checksum", "x.sinf")
	require.Equal(t, bad.Offset, fe.Off)
	requireFormatError(t, f.VerifyTensor("scores"), `"scores"`, "checksum")
	require.NoError(t, f.VerifyTensor("model.norm.weight"))
}

func TestCRC32CKnownValue(t *testing.T) {
	// RFC 3720 B.4: CRC-32C of 32 zero bytes.
	require.Equal(t, uint32(0x8a9136aa), Checksum(make([]byte, 32)))
	require.Equal(t, uint32(0xe3069283), Checksum([]byte("123456789")))
	var le [4]byte
	binary.LittleEndian.PutUint32(le[:], Checksum([]byte("123456789")))
	require.Equal(t, []byte{0x83, 0x92, 0x06, 0xe3}, le[:], "stored little-endian")
}
