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
	"5e03000000000000", // file_size 862
	"5000000000000000", // metadata_offset 80
	"3700000000000000", // metadata_length 55
	"a002000000000000", // directory_offset 672
	"be00000000000000", // directory_length 190
	"04000000",         // tensor_count 4
	"a1610501",         // metadata_crc32c 0x010561a1
	"6ff29088",         // directory_crc32c 0x8890f26f
	"0000000000000000", // reserved
	"290d2100",         // header_crc32c 0x00210d29
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
	strings.Repeat("00", 384-354), // padding to 384
	// Tensor "x", Q4_0X16 [16 32]: one group of 16 rows, one block column;
	// 288 bytes at 384. Row i has d = i + 1 and element e the level
	// ℓ(i, e) = (i + e + 4·⌊e/16⌋) mod 16 (value (i + 1)·(ℓ − 8)).
	// The 16 rows' scales d, F16 1, 2, …, 16:
	"003c" + "0040" + "0042" + "0044" + "0045" + "0046" + "0047" + "0048" +
		"8048" + "0049" + "8049" + "004a" + "804a" + "004b" + "804b" + "004c",
	// Chunk j (0–3), 64 bytes: byte 4i+m = ℓ(i, 8j+m) | ℓ(i, 8j+4+m) << 4,
	// four bytes a row, rows 0–3, 4–7, 8–11, 12–15 a line.
	"40516273" + "51627384" + "62738495" + "738495a6", // chunk 0: elements 0–3 (low), 4–7 (high)
	"8495a6b7" + "95a6b7c8" + "a6b7c8d9" + "b7c8d9ea",
	"c8d9eafb" + "d9eafb0c" + "eafb0c1d" + "fb0c1d2e",
	"0c1d2e3f" + "1d2e3f40" + "2e3f4051" + "3f405162",
	"c8d9eafb" + "d9eafb0c" + "eafb0c1d" + "fb0c1d2e", // chunk 1: elements 8–11, 12–15
	"0c1d2e3f" + "1d2e3f40" + "2e3f4051" + "3f405162",
	"40516273" + "51627384" + "62738495" + "738495a6",
	"8495a6b7" + "95a6b7c8" + "a6b7c8d9" + "b7c8d9ea",
	"8495a6b7" + "95a6b7c8" + "a6b7c8d9" + "b7c8d9ea", // chunk 2: elements 16–19, 20–23
	"c8d9eafb" + "d9eafb0c" + "eafb0c1d" + "fb0c1d2e",
	"0c1d2e3f" + "1d2e3f40" + "2e3f4051" + "3f405162",
	"40516273" + "51627384" + "62738495" + "738495a6",
	"0c1d2e3f" + "1d2e3f40" + "2e3f4051" + "3f405162", // chunk 3: elements 24–27, 28–31
	"40516273" + "51627384" + "62738495" + "738495a6",
	"8495a6b7" + "95a6b7c8" + "a6b7c8d9" + "b7c8d9ea",
	"c8d9eafb" + "d9eafb0c" + "eafb0c1d" + "fb0c1d2e",
	// Directory, 190 bytes at 672.
	"01000000", "77", "01000000", "02000000", "0200000000000000", "0300000000000000", // "w" F32 2-D [2 3]
	"c000000000000000", "1800000000000000", "b9045180", // offset 192, length 24, crc 0x805104b9
	"03000000", "696478", "04000000", "01000000", "0200000000000000", // "idx" I32 1-D [2]
	"0001000000000000", "0800000000000000", "78e74c39", // offset 256, length 8, crc 0x394ce778
	"01000000", "71", "06000000", "02000000", "0100000000000000", "2000000000000000", // "q" Q8_0 2-D [1 32]
	"4001000000000000", "2200000000000000", "cf95d1f6", // offset 320, length 34, crc 0xf6d195cf
	"01000000", "78", "0f000000", "02000000", "1000000000000000", "2000000000000000", // "x" Q4_0X16 2-D [16 32]
	"8001000000000000", "2001000000000000", "cbdbc7ed", // offset 384, length 288, crc 0xedc7dbcb
}, "")

// exampleLevel is the level ℓ(i, e) of element e of row i of the example's
// tensor "x" (spec §10).
func exampleLevel(i, e int) byte { return byte((i + e + 4*(e/16)) % 16) }

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
	// "x": the Q4_0 rows quantized from (i + 1)·(ℓ − 8) (§5.2: the value of
	// largest magnitude is −8·(i + 1), so d = i + 1 and q = ℓ), interleaved.
	xv := make([]float32, 16*32)
	for i := range 16 {
		for e := range 32 {
			xv[32*i+e] = float32((i + 1) * (int(exampleLevel(i, e)) - 8))
		}
	}
	xrm, err := Quantize(nil, xv, Q4_0)
	require.NoError(t, err)
	xil := make([]byte, len(xrm))
	require.NoError(t, Interleave(xil, xrm, Q4_0, 16, 32))
	// §5.4 directly: the scales at 2i, then chunk j's byte 4i+m holds the
	// levels of elements 8j+m (low nibble) and 8j+4+m (high nibble) of row i.
	formula := make([]byte, 288)
	for i := range 16 {
		binary.LittleEndian.PutUint16(formula[2*i:], F32ToF16(float32(i+1)))
		for j := range 4 {
			for m := range 4 {
				formula[32+64*j+4*i+m] = exampleLevel(i, 8*j+m) | exampleLevel(i, 8*j+4+m)<<4
			}
		}
	}
	require.Equal(t, formula, xil)
	// One byte by hand: chunk 2, row 1, m = 0 is at 32 + 128 + 4 = 164;
	// elements 16 and 20 of row 1 have levels (1 + 16 + 4) mod 16 = 5 and
	// (1 + 20 + 4) mod 16 = 9, so it is 0x95.
	require.Equal(t, byte(0x95), xil[164])
	got := fileBytes(t, Metadata{DType: F32, Provenance: Provenance{ToolVersion: "example"}}, []sample{
		{"w", F32, []int{2, 3}, w},
		{"idx", I32, []int{2}, []byte{5, 0, 0, 0, 1, 0, 0, 0}},
		{"q", Q8_0, []int{1, 32}, q},
		{"x", Q4_0X16, []int{16, 32}, xil},
	})
	require.Equal(t, hex.Dump(want), hex.Dump(got))
	f, err := NewFile(want, "example.sinf")
	require.NoError(t, err)
	require.Equal(t, Header{Version: 1, Alignment: 64, FileSize: 862, MetadataOffset: 80, MetadataLength: 55,
		DirectoryOffset: 672, DirectoryLength: 190, TensorCount: 4,
		MetadataCRC: 0x010561a1, DirectoryCRC: 0x8890f26f, HeaderCRC: 0x00210d29}, f.Header)
	require.NoError(t, f.Verify())
	qt, err := f.Tensor("q")
	require.NoError(t, err)
	back, err := qt.ToF32()
	require.NoError(t, err)
	require.Equal(t, x, back) // d = 1 and integers: exact
	xt, err := f.Tensor("x")
	require.NoError(t, err)
	back, err = xt.ToF32()
	require.NoError(t, err)
	require.Equal(t, xv, back) // d = i + 1 and integers: exact
}
