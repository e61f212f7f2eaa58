package format

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// specExample is the worked example of spec/sinf.md §10, byte for byte,
// field by field.
var specExample = strings.Join([]string{
	// Header, 80 bytes.
	"53494e46",         // magic "SINF"
	"01000000",         // version 1
	"00000000",         // flags
	"40000000",         // alignment 64
	"ef01000000000000", // file_size 495
	"5000000000000000", // metadata_offset 80
	"3700000000000000", // metadata_length 55
	"6201000000000000", // directory_offset 354
	"8d00000000000000", // directory_length 141
	"03000000",         // tensor_count 3
	"a1610501",         // metadata_crc32c 0x010561a1
	"9d3e1521",         // directory_crc32c 0x21153e9d
	"0000000000000000", // reserved
	"6982caec",         // header_crc32c 0xecca8269
	// Metadata, 55 bytes at 80: {"dtype":"F32","provenance":{"tool_version":"example"}}
	hex.EncodeToString([]byte(`{"dtype":"F32","provenance":{"tool_version":"example"}}`)),
	strings.Repeat("00", 192-135), // padding to 192
	// Tensor "w", F32 [2 3] = 1..6, 24 bytes at 192.
	"0000803f000000400000404000008040" + "0000a0400000c040",
	strings.Repeat("00", 256-216), // padding to 256
	// Tensor "idx", I32 [2] = 5, 1, 8 bytes at 256.
	"0500000001000000",
	strings.Repeat("00", 320-264), // padding to 320
	// Tensor "q", Q8_0 [1 32]: one block, d = F16 1.0, q = −127, 1, 2, …, 31; 34 bytes at 320.
	"003c" + "81" + "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
	// Directory, 141 bytes at 354.
	"01000000", "77", "01000000", "02000000", "0200000000000000", "0300000000000000", // "w" F32 2-D [2 3]
	"c000000000000000", "1800000000000000", "b9045180", // offset 192, length 24, crc 0x805104b9
	"03000000", "696478", "04000000", "01000000", "0200000000000000", // "idx" I32 1-D [2]
	"0001000000000000", "0800000000000000", "78e74c39", // offset 256, length 8, crc 0x394ce778
	"01000000", "71", "06000000", "02000000", "0100000000000000", "2000000000000000", // "q" Q8_0 2-D [1 32]
	"4001000000000000", "2200000000000000", "cf95d1f6", // offset 320, length 34, crc 0xf6d195cf
}, "")

func TestSpecExample(t *testing.T) {
	want, err := hex.DecodeString(specExample)
	require.NoError(t, err)
	w := make([]byte, 24)
	for i := range 6 {
		binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(float32(i+1)))
	}
	x := make([]float32, 32) // −127, 1, 2, …, 31
	x[0] = -127
	for j := 1; j < 32; j++ {
		x[j] = float32(j)
	}
	q, err := Quantize(nil, x, Q8_0)
	require.NoError(t, err)
	got := fileBytes(t, Metadata{DType: F32, Provenance: Provenance{ToolVersion: "example"}}, []sample{
		{"w", F32, []int{2, 3}, w},
		{"idx", I32, []int{2}, []byte{5, 0, 0, 0, 1, 0, 0, 0}},
		{"q", Q8_0, []int{1, 32}, q},
	})
	require.Equal(t, hex.Dump(want), hex.Dump(got))
	f, err := NewFile(want, "example.sinf")
	require.NoError(t, err)
	require.Equal(t, Header{Version: 1, Alignment: 64, FileSize: 495, MetadataOffset: 80, MetadataLength: 55,
		DirectoryOffset: 354, DirectoryLength: 141, TensorCount: 3,
		MetadataCRC: 0x010561a1, DirectoryCRC: 0x21153e9d, HeaderCRC: 0xecca8269}, f.Header)
	qt, err := f.Tensor("q")
	require.NoError(t, err)
	back, err := qt.ToF32()
	require.NoError(t, err)
	require.Equal(t, x, back) // d = 1 and integers: exact
}
