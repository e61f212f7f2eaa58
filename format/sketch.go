package format

import (
	"encoding/binary"
	"math"
)

// The 2-bit sketch dtype SK2 (spec §5.2): the up_proj rows GateFirst's
// predictor reads to estimate each stored neuron's up_proj output per token
// (spec §6.2 up_proj.sketch). Not a GGML type.

// SK2Levels is the number of candidate scales quantizeSK2 tries per block.
const SK2Levels = 25

// quantizeSK2 encodes one block of 32: with amax = max |x[j]|, each
// candidate scale d_k = F16(amax·(k+8)/96) for k = 0 … 24 (the largest level
// 3·d_k from amax/4 to amax) codes x[j] as the nearest level,
// q = clamp(round((x[j]/d_k + 3)/2), 0, 3) (halves away from zero), and the
// d_k whose squared error Σ (x[j] − d_k·(2q − 3))² (float64) is smallest is
// kept (the first of equals); amax = 0 stores d = 0 and q = 2. Element j's
// code is bits 2·(j/8) … 2·(j/8)+1 of byte j%8.
func quantizeSK2(dst []byte, x []float32) []byte {
	var amax float64
	for _, v := range x {
		amax = max(amax, math.Abs(float64(v)))
	}
	code := func(v, d float64) int {
		if d == 0 {
			return 2
		}
		return int(max(0, min(3, math.Round((v/d+3)/2))))
	}
	var best uint16
	bestErr := math.Inf(1)
	for k := 0; k < SK2Levels && amax > 0; k++ {
		h := F32ToF16(float32(amax * float64(k+8) / 96))
		d := float64(F16ToF32(h))
		var e float64
		for _, v := range x {
			r := float64(v) - d*float64(2*code(float64(v), d)-3)
			e += r * r
		}
		if e < bestErr {
			best, bestErr = h, e
		}
	}
	d := float64(F16ToF32(best))
	dst = binary.LittleEndian.AppendUint16(dst, best)
	var qs [8]byte
	for j, v := range x[:BlockElems] {
		qs[j%8] |= byte(code(float64(v), d)) << (2 * (j / 8))
	}
	return append(dst, qs[:]...)
}

func dequantizeSK2(out []float32, blk []byte) {
	d := F16ToF32(binary.LittleEndian.Uint16(blk))
	for j := range out[:BlockElems] {
		q := blk[2+j%8] >> (2 * (j / 8)) & 3
		out[j] = d * float32(2*int(q)-3)
	}
}
