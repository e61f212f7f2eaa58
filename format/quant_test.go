package format

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuantizeQ8_0Block checks one block byte for byte against values worked
// out by hand from GGML's Q8_0 rule: d = 127/127 = 1 (F16 0x3c00), q = round
// half away from zero.
func TestQuantizeQ8_0Block(t *testing.T) {
	x := make([]float32, 32)
	x[0], x[1], x[2], x[3], x[4], x[31] = 127, -127, 0.5, -0.5, 2.49, -1.5
	b, err := Quantize(nil, x, Q8_0)
	require.NoError(t, err)
	want := make([]byte, 34)
	want[0], want[1] = 0x00, 0x3c
	want[2], want[3], want[4], want[5], want[6], want[33] = 127, 0x81, 1, 0xff, 2, 0xfe
	require.Equal(t, want, b)
}

// TestQuantizeQ4_0Block checks one block against GGML's Q4_0 rule worked by
// hand: the largest magnitude is −16 (first), so d = −16/−8 = 2 (F16 0x4000)
// and q = min(15, trunc(x/2 + 8.5)).
func TestQuantizeQ4_0Block(t *testing.T) {
	x := make([]float32, 32)
	x[0], x[1], x[16], x[17], x[15], x[31] = -16, 16, 14, 3, 1, -1
	b, err := Quantize(nil, x, Q4_0)
	require.NoError(t, err)
	want := make([]byte, 18)
	want[0], want[1] = 0x00, 0x40
	// element j: low nibble of byte 2+j; element 16+j: high nibble.
	// x/2+8.5: −16→0.5→0, 16→16.5→16→15, 14→15.5→15, 3→10, 0→8, 1→9, −1→8.
	for j := range 16 {
		want[2+j] = 8 | 8<<4
	}
	want[2] = 0 | 15<<4
	want[3] = 15 | 10<<4
	want[2+15] = 9 | 8<<4
	require.Equal(t, want, b)
}

// TestQuantizeRoundTrip checks the error bound of each dtype on random data:
// |x − dequant(quant(x))| ≤ d/2 (Q8_0) and ≤ d (Q4_0: the top level is
// clipped) per block, with d = the block's scale, plus what rounding d to F16
// (relative 2⁻¹¹) costs at the largest level: 127·2⁻¹¹·d and 8·2⁻¹¹·d.
func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 32*64)
	for i := range x {
		x[i] = float32(rng.NormFloat64()) * float32(1+i%7)
	}
	x[5] = 0
	clear(x[64:96]) // an all-zero block: d = 0, every q the zero level
	for _, d := range []DType{Q8_0, Q4_0} {
		b, err := Quantize(nil, x, d)
		require.NoError(t, err)
		n, err := d.RowBytes(len(x))
		require.NoError(t, err)
		require.Len(t, b, n)
		y := make([]float32, len(x))
		require.NoError(t, Dequantize(y, b, d))
		_, bb := d.Block()
		for i := range x {
			scale := float64(F16ToF32(binary.LittleEndian.Uint16(b[i/32*bb:])))
			bound := math.Abs(scale) * (0.5 + 127.0/2048 + 1e-4)
			if d == Q4_0 {
				bound = math.Abs(scale) * (1 + 8.0/2048 + 1e-4)
			}
			require.LessOrEqual(t, math.Abs(float64(x[i]-y[i])), bound, "%v element %d: %g → %g", d, i, x[i], y[i])
		}
		for i := 64; i < 96; i++ {
			require.Zero(t, y[i], "%v zero block", d)
		}
	}
	_, err := Quantize(nil, x[:31], Q8_0)
	require.Error(t, err)
	_, err = Quantize(nil, x[:32], F16)
	require.Error(t, err)
}

func TestBlockSizes(t *testing.T) {
	for _, c := range []struct {
		d           DType
		n, bytes    int
		bad         int
		elems, size int
	}{{Q8_0, 64, 68, 48, 32, 34}, {Q4_0, 96, 54, 33, 32, 18}, {F16, 3, 6, -1, 1, 2}} {
		e, s := c.d.Block()
		require.Equal(t, [2]int{c.elems, c.size}, [2]int{e, s}, "%v", c.d)
		n, err := c.d.RowBytes(c.n)
		require.NoError(t, err)
		require.Equal(t, c.bytes, n, "%v", c.d)
		_, err = c.d.RowBytes(c.bad)
		require.Error(t, err, "%v %d", c.d, c.bad)
	}
	require.False(t, DType(0).Known())
	require.True(t, Q4_0.Known() && Q4_0.Quantized() && !F32.Quantized())
	n, why := byteSize([]uint64{3, 64}, Q8_0)
	require.Equal(t, "", why)
	require.Equal(t, int64(3*68), n)
	_, why = byteSize([]uint64{3, 40}, Q8_0)
	require.Contains(t, why, "not a multiple of the Q8_0 block size 32")
	_, why = byteSize(nil, Q4_0)
	require.Contains(t, why, "at least one dimension")
}
