package format

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInterleave checks spec §5.4's layout at named bytes, the round trip,
// the plain tail rows and ToF32 on an interleaved tensor.
func TestInterleave(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 4))
	const rows, cols = 37, 64 // two groups of 16 and a tail of 5; two blocks a row
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, d := range []DType{Q8_0, Q4_0} {
		rm, err := Quantize(nil, x, d)
		require.NoError(t, err)
		il := make([]byte, len(rm))
		require.NoError(t, Interleave(il, rm, d, rows, cols))
		xd, _ := InterleavedOf(d)
		_, bb := d.Block()
		rb := 2 * bb
		// Group 1, block column 1, row 3: its scale, then element e.
		blk := il[(1*2+1)*16*bb:]
		src := rm[(16+3)*rb+bb:]
		require.Equal(t, src[:2], blk[6:8], "%v scale of row 3", d)
		for e := range 32 {
			var got, want byte
			if d == Q8_0 {
				got, want = blk[32+64*(e/4)+4*3+e%4], src[2+e]
			} else {
				v := blk[32+64*(e/8)+4*3+e%4]
				got, want = v&15, src[2+e%16]&15
				if e%8 >= 4 {
					got = v >> 4
				}
				if e >= 16 {
					want = src[2+e-16] >> 4
				}
			}
			require.Equal(t, want, got, "%v element %d of row 3", d, e)
		}
		require.Equal(t, rm[32*rb:], il[32*rb:], "%v tail rows stay row-major", d)
		back := make([]byte, len(rm))
		require.NoError(t, Deinterleave(back, il, xd, rows, cols))
		require.Equal(t, rm, back, "%v round trip", d)
		want, err := Tensor{Name: "w", DType: d, Shape: []int{rows, cols}, Data: rm}.ToF32()
		require.NoError(t, err)
		got, err := Tensor{Name: "w", DType: xd, Shape: []int{rows, cols}, Data: il}.ToF32()
		require.NoError(t, err)
		require.Equal(t, want, got, "%v ToF32", xd)
		require.Equal(t, d, xd.Base())
		require.True(t, xd.Interleaved())
		require.False(t, d.Interleaved())
	}
	require.ErrorContains(t, Interleave(make([]byte, 18), make([]byte, 18), Q4_K, 1, 32), "no interleaved form")
	require.ErrorContains(t, Interleave(make([]byte, 18), make([]byte, 17), Q4_0, 1, 32), "do not both hold")
	require.ErrorContains(t, Deinterleave(make([]byte, 18), make([]byte, 18), Q4_0, 1, 32), "not an interleaved dtype")
	require.ErrorContains(t, Dequantize(make([]float32, 32), make([]byte, 18), Q4_0X16), "Deinterleave")
}
