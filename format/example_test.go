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
	"6401000000000000", // file_size 356
	"5000000000000000", // metadata_offset 80
	"3700000000000000", // metadata_length 55
	"0801000000000000", // directory_offset 264
	"5c00000000000000", // directory_length 92
	"02000000",         // tensor_count 2
	"a1610501",         // metadata_crc32c 0x010561a1
	"1f238729",         // directory_crc32c 0x2987231f
	"0000000000000000", // reserved
	"23cc0c76",         // header_crc32c 0x760ccc23
	// Metadata, 55 bytes at 80: {"dtype":"F32","provenance":{"tool_version":"example"}}
	hex.EncodeToString([]byte(`{"dtype":"F32","provenance":{"tool_version":"example"}}`)),
	strings.Repeat("00", 192-135), // padding to 192
	// Tensor "w", F32 [2 3] = 1..6, 24 bytes at 192.
	"0000803f000000400000404000008040" + "0000a0400000c040",
	strings.Repeat("00", 256-216), // padding to 256
	// Tensor "idx", I32 [2] = 5, 1, 8 bytes at 256.
	"0500000001000000",
	// Directory, 92 bytes at 264.
	"01000000", "77", "01000000", "02000000", "0200000000000000", "0300000000000000", // "w" F32 2-D [2 3]
	"c000000000000000", "1800000000000000", "b9045180", // offset 192, length 24, crc 0x805104b9
	"03000000", "696478", "04000000", "01000000", "0200000000000000", // "idx" I32 1-D [2]
	"0001000000000000", "0800000000000000", "78e74c39", // offset 256, length 8, crc 0x394ce778
}, "")

func TestSpecExample(t *testing.T) {
	want, err := hex.DecodeString(specExample)
	require.NoError(t, err)
	w := make([]byte, 24)
	for i := range 6 {
		binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(float32(i+1)))
	}
	got := fileBytes(t, Metadata{DType: F32, Provenance: Provenance{ToolVersion: "example"}}, []sample{
		{"w", F32, []int{2, 3}, w},
		{"idx", I32, []int{2}, []byte{5, 0, 0, 0, 1, 0, 0, 0}},
	})
	require.Equal(t, hex.Dump(want), hex.Dump(got))
	f, err := NewFile(want, "example.sinf")
	require.NoError(t, err)
	require.Equal(t, Header{Version: 1, Alignment: 64, FileSize: 356, MetadataOffset: 80, MetadataLength: 55,
		DirectoryOffset: 264, DirectoryLength: 92, TensorCount: 2,
		MetadataCRC: 0x010561a1, DirectoryCRC: 0x2987231f, HeaderCRC: 0x760ccc23}, f.Header)
}
