package format

import (
	"encoding/hex"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuantizeSK2Golden checks SK2's rounding (spec §5.2) byte for byte
// against an independent float64 implementation of the spec's rule (Python,
// F16 by struct's round-to-nearest-even; the digests below are its output):
// a smooth block, an all-zero block (d = 0, codes 2) and a block with one
// outlier, whose best scale clips it.
func TestQuantizeSK2Golden(t *testing.T) {
	x := make([]float32, 3*BlockElems)
	for j := range BlockElems {
		x[j] = float32(math.Sin(0.7*float64(j)+0.3) * (1 + 0.1*float64(j)))
		x[2*BlockElems+j] = float32(0.01 * float64((j*7)%5-2))
	}
	x[2*BlockElems+5] = -3
	got, err := Quantize(nil, x, SK2)
	require.NoError(t, err)
	require.Equal(t, "093b061a6abefaf9e541"+"0000aaaaaaaaaaaaaaaa"+"0034a56a96a95aa46a96", hex.EncodeToString(got))

	out := make([]float32, len(x))
	require.NoError(t, Dequantize(out, got, SK2))
	d := F16ToF32(0x3b09) // block 0's scale
	for j := range BlockElems {
		q := got[2+j%8] >> (2 * (j / 8)) & 3
		require.Equal(t, d*float32(2*int(q)-3), out[j], "element %d", j)
		require.LessOrEqual(t, math.Abs(float64(out[j]-x[j])), 1.6*float64(d), "element %d is within one level step", j)
		require.Zero(t, out[BlockElems+j])
	}
	_, err = Quantize(nil, x[:40], SK2)
	require.ErrorContains(t, err, "not a whole number of blocks")
	require.False(t, SK2.Weight(), "SK2 stores sketches, not weight matrices")
	b, err := SK2.RowBytes(64)
	require.NoError(t, err)
	require.Equal(t, 20, b)
}
