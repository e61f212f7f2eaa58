package format

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Block quantization (spec/sinf.md §5.2). The block layouts and the rounding
// are GGML's reference quantizers (ggml-quants.c, quantize_row_q8_0_ref and
// quantize_row_q4_0_ref), so a tensor quantized here holds the same bytes as
// the same float32 tensor quantized by llama.cpp's llama-quantize (without an
// importance matrix). Every step is float32 arithmetic, each product rounded
// to float32 on its own (explicit conversions keep the compiler from fusing a
// multiply and an add), and the scale is rounded to F16 to nearest even.

// Quantize appends the blocks of src encoded as the block dtype d to dst and
// returns it; len(src) must be a whole number of d's blocks (32 elements, or
// 256 for the K-quants of spec §5.3). It returns an error for another dtype
// or a partial block.
func Quantize(dst []byte, src []float32, d DType) ([]byte, error) {
	e, _ := d.Block()
	if d.Interleaved() {
		return dst, fmt.Errorf("dtype %v is interleaved: quantize to %v, then Interleave", d, d.Base())
	}
	if e <= 1 {
		return dst, fmt.Errorf("dtype %v is not a block-quantized dtype", d)
	}
	if len(src)%e != 0 {
		return dst, fmt.Errorf("%v: %d values are not a whole number of blocks of %d", d, len(src), e)
	}
	for b := 0; b < len(src); b += e {
		dst = quantizeBlock(dst, src[b:b+e], d)
	}
	return dst, nil
}

// quantizeBlock encodes one block of d (len(x) its elements).
func quantizeBlock(dst []byte, x []float32, d DType) []byte {
	switch d {
	case Q8_0:
		return quantizeQ8_0(dst, x)
	case Q4_0:
		return quantizeQ4_0(dst, x)
	case Q5_0:
		return quantizeQ5_0(dst, x)
	case Q5_1:
		return quantizeQ5_1(dst, x)
	case Q4_K:
		return quantizeQ4_K(dst, x)
	case Q5_K:
		return quantizeQ5_K(dst, x)
	case SK2:
		return quantizeSK2(dst, x)
	}
	return quantizeQ6_K(dst, x)
}

// dequantizeBlock decodes one block of d. Direct calls (not a table of
// functions) let the caller's buffers stay on its stack.
func dequantizeBlock(out []float32, blk []byte, d DType) {
	switch d {
	case Q8_0:
		dequantizeQ8_0(out, blk)
	case Q4_0:
		dequantizeQ4_0(out, blk)
	case Q5_0:
		dequantizeQ5_0(out, blk)
	case Q5_1:
		dequantizeQ5_1(out, blk)
	case Q4_K:
		dequantizeQ4_K(out, blk)
	case Q5_K:
		dequantizeQ5_K(out, blk)
	case Q6_K:
		dequantizeQ6_K(out, blk)
	case SK2:
		dequantizeSK2(out, blk)
	}
}

// quantizeQ8_0 encodes one block: d = max|x|/127, q = round(x/d) (half away
// from zero), computed as x·(1/d) as GGML does.
func quantizeQ8_0(dst []byte, x []float32) []byte {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(d))
	for _, v := range x {
		dst = append(dst, byte(int8(math.Round(float64(float32(v*id))))))
	}
	return dst
}

// quantizeQ4_0 encodes one block: m = the value of largest magnitude (the
// first of equals), d = m/−8, q = min(15, trunc(x/d + 8.5)); element j < 16 in
// the low nibble of byte j, element 16+j in its high nibble.
func quantizeQ4_0(dst []byte, x []float32) []byte {
	var amax, m float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); amax < a {
			amax, m = a, v
		}
	}
	d := m / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(d))
	q := func(v float32) byte { return byte(min(15, int8(float32(v*id)+8.5))) }
	for j := 0; j < BlockElems/2; j++ {
		dst = append(dst, q(x[j])|q(x[j+BlockElems/2])<<4)
	}
	return dst
}

// Dequantize decodes the blocks of the block dtype d in src into dst, one
// block's elements (32, or 256 for a K-quant) per block; len(dst) must be the
// number of blocks times that.
func Dequantize(dst []float32, src []byte, d DType) error {
	e, bb := d.Block()
	if d.Interleaved() {
		return fmt.Errorf("dtype %v is interleaved: Deinterleave it to %v first", d, d.Base())
	}
	if e <= 1 {
		return fmt.Errorf("dtype %v is not a block-quantized dtype", d)
	}
	if len(src)%bb != 0 || len(src)/bb*e != len(dst) {
		return fmt.Errorf("%v: %d bytes do not hold %d values", d, len(src), len(dst))
	}
	for b := 0; b*bb < len(src); b++ {
		dequantizeBlock(dst[b*e:(b+1)*e], src[b*bb:(b+1)*bb], d)
	}
	return nil
}

func dequantizeQ8_0(out []float32, blk []byte) {
	scale := F16ToF32(binary.LittleEndian.Uint16(blk))
	for j, q := range blk[2:34] {
		out[j] = float32(int8(q)) * scale
	}
}

func dequantizeQ4_0(out []float32, blk []byte) {
	scale := F16ToF32(binary.LittleEndian.Uint16(blk))
	for j, q := range blk[2:18] {
		out[j] = float32(int(q&15)-8) * scale
		out[j+BlockElems/2] = float32(int(q>>4)-8) * scale
	}
}
