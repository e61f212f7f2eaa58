package format

import (
	"encoding/binary"
	"math"
)

// Q5_0, Q5_1 (spec §5.2) and the K-quants Q4_K, Q5_K, Q6_K (spec §5.3):
// GGML's block layouts and its reference quantization (ggml-quants.c,
// quantize_row_q5_0_ref … quantize_row_q6_K_ref: what llama-quantize runs for
// a tensor without an importance matrix), written from its description. As
// for Q8_0/Q4_0, every step is binary32 arithmetic rounded on its own: each
// product or quotient that feeds an addition is wrapped in float32(), which
// keeps the compiler from fusing it into a multiply-add (the Go spec: an
// explicit conversion rounds), so arm64 (which fuses) gives amd64's bytes.

// nearestInt rounds v to the nearest integer, halves to even, as GGML's
// nearest_int does: by adding 1.5·2²³ in binary32 and reading the mantissa
// (exact for |v| ≤ 2²² − 1, the range GGML asserts).
func nearestInt(v float32) int {
	b := math.Float32bits(float32(v + 12582912))
	return int(b&0x007fffff) - 0x00400000
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

func sqrt32(v float32) float32 { return float32(math.Sqrt(float64(v))) } // correctly rounded, as sqrtf

func clampInt(v, lo, hi int) int { return max(lo, min(hi, v)) }

// quantizeQ5_0 encodes one block of 32: m = the value of largest magnitude
// (the first of equals), d = m/−16, q = min(31, trunc(x/d + 16.5)); the low
// nibbles as Q4_0's, bit 4 of element j in bit j of the little-endian qh.
func quantizeQ5_0(dst []byte, x []float32) []byte {
	var amax, m float32
	for _, v := range x {
		if a := abs32(v); amax < a {
			amax, m = a, v
		}
	}
	d := m / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(d))
	var qh uint32
	var qs [16]byte
	for j := range 16 {
		q0 := byte(min(31, int8(float32(x[j]*id)+16.5)))
		q1 := byte(min(31, int8(float32(x[j+16]*id)+16.5)))
		qs[j] = q0&15 | q1&15<<4
		qh |= uint32(q0>>4&1)<<j | uint32(q1>>4&1)<<(j+16)
	}
	dst = binary.LittleEndian.AppendUint32(dst, qh)
	return append(dst, qs[:]...)
}

func dequantizeQ5_0(out []float32, blk []byte) {
	d := F16ToF32(binary.LittleEndian.Uint16(blk))
	qh := binary.LittleEndian.Uint32(blk[2:])
	for j, q := range blk[6:22] {
		out[j] = float32(int(q&15|byte(qh>>j&1)<<4)-16) * d
		out[j+16] = float32(int(q>>4|byte(qh>>(j+16)&1)<<4)-16) * d
	}
}

// quantizeQ5_1 encodes one block of 32: min and max of x, d = (max−min)/31,
// q = trunc((x − min)/d + 0.5); F16 d, F16 min, qh and nibbles as Q5_0's.
func quantizeQ5_1(dst []byte, x []float32) []byte {
	lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	d := (hi - lo) / 31
	var id float32
	if d != 0 {
		id = 1 / d
	}
	dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(d))
	dst = binary.LittleEndian.AppendUint16(dst, F32ToF16(lo))
	var qh uint32
	var qs [16]byte
	for j := range 16 {
		q0 := byte(float32(float32(x[j]-lo)*id) + 0.5)
		q1 := byte(float32(float32(x[j+16]-lo)*id) + 0.5)
		qs[j] = q0&15 | q1&15<<4
		qh |= uint32(q0>>4&1)<<j | uint32(q1>>4&1)<<(j+16)
	}
	dst = binary.LittleEndian.AppendUint32(dst, qh)
	return append(dst, qs[:]...)
}

func dequantizeQ5_1(out []float32, blk []byte) {
	d := F16ToF32(binary.LittleEndian.Uint16(blk))
	m := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
	qh := binary.LittleEndian.Uint32(blk[4:])
	for j, q := range blk[8:24] {
		out[j] = float32(float32(q&15|byte(qh>>j&1)<<4)*d) + m
		out[j+16] = float32(float32(q>>4|byte(qh>>(j+16)&1)<<4)*d) + m
	}
}

// makeQKX2 is GGML's make_qkx2_quants for one sub-block x of 32 with weights
// w: the scale and minimum (returned as −min, ≥ 0) of x ≈ scale·L + min, L in
// [0, nmax], chosen by weighted least squares over nstep+1 trial scales
// (rmin + rdelta·is + nmax)/(max − min) after the plain max−min one.
func makeQKX2(x, w []float32, L []uint8, nmax int, rmin, rdelta float32, nstep int) (scale, negMin float32) {
	var laux [32]uint8
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		clear(L[:n])
		return 0, -lo
	}
	fmax := float32(nmax)
	iscale := fmax / (hi - lo)
	scale = 1 / iscale
	var best float32
	for i := range n {
		l := clampInt(nearestInt(float32(iscale*(x[i]-lo))), 0, nmax)
		L[i] = uint8(l)
		diff := float32(float32(scale*float32(l))+lo) - x[i]
		best += float32(w[i] * float32(diff*diff))
	}
	for is := 0; is <= nstep; is++ {
		iscale = float32(rmin+float32(rdelta*float32(is))+fmax) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := range n {
			l := clampInt(nearestInt(float32(iscale*(x[i]-lo))), 0, nmax)
			laux[i] = uint8(l)
			wl := float32(w[i] * float32(l))
			sumL += wl
			sumL2 += float32(wl * float32(l))
			sumXL += float32(wl * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if !(D > 0) {
			continue
		}
		thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
		thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
		if thisMin > 0 {
			thisMin = 0
			thisScale = sumXL / sumL2
		}
		var cur float32
		for i := range n {
			diff := float32(float32(thisScale*float32(laux[i]))+thisMin) - x[i]
			cur += float32(w[i] * float32(diff*diff))
		}
		if cur < best {
			copy(L[:n], laux[:n])
			best, scale, lo = cur, thisScale, thisMin
		}
	}
	return scale, -lo
}

// scaleMinK4 returns sub-block j's 6-bit scale and minimum from the 12 packed
// bytes of a Q4_K/Q5_K block (spec §5.3; GGML's get_scale_min_k4).
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | q[j-4]>>6<<4, q[j+4]>>4 | q[j]>>6<<4
}

// quantizeScalesMinK4 runs the per-sub-block search of Q4_K/Q5_K over one
// super-block x of 256 (L gets the sub-blocks' levels), quantizes the eight
// scales and minimums to 6 bits against F16 d = max scale/63 and dmin = max
// min/63, and requantizes x against the rounded scales. It returns d, dmin
// and the 12 packed scale bytes.
func quantizeScalesMinK4(x []float32, L *[256]uint8, nmax int, rmin, rdelta float32, nstep int) (d, dmin uint16, sc [12]byte) {
	var scales, mins [8]float32
	var w [32]float32
	var maxScale, maxMin float32
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		av := sqrt32(sumX2 / 32)
		for l, v := range xs {
			w[l] = av + abs32(v)
		}
		scales[j], mins[j] = makeQKX2(xs, w[:], L[32*j:32*j+32], nmax, rmin, rdelta, nstep)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	for j := range 8 {
		ls := min(63, uint8(nearestInt(float32(invScale*scales[j]))))
		lm := min(63, uint8(nearestInt(float32(invMin*mins[j]))))
		if j < 4 {
			sc[j], sc[j+4] = ls, lm
		} else {
			sc[j+4] = ls&0xF | lm&0xF<<4
			sc[j-4] |= ls >> 4 << 6
			sc[j] |= lm >> 4 << 6
		}
	}
	d, dmin = F32ToF16(maxScale/63), F32ToF16(maxMin/63)
	fd, fm := F16ToF32(d), F16ToF32(dmin)
	for j := range 8 {
		s, m := scaleMinK4(j, sc[:])
		dj := float32(fd * float32(s))
		if dj == 0 {
			continue // keeps the search's levels, as GGML does
		}
		dm := float32(fm * float32(m))
		for i := 32 * j; i < 32*j+32; i++ {
			L[i] = uint8(clampInt(nearestInt((x[i]+dm)/dj), 0, nmax))
		}
	}
	return d, dmin, sc
}

// quantizeQ4_K encodes one super-block of 256 (spec §5.3): F16 d, F16 dmin,
// 12 scale bytes, then 128 bytes whose byte l of group g (g < 4) holds
// element 64g+l in its low nibble and 64g+32+l in its high one.
func quantizeQ4_K(dst []byte, x []float32) []byte {
	var L [256]uint8
	d, dmin, sc := quantizeScalesMinK4(x, &L, 15, -1, 0.1, 20)
	dst = binary.LittleEndian.AppendUint16(dst, d)
	dst = binary.LittleEndian.AppendUint16(dst, dmin)
	dst = append(dst, sc[:]...)
	for g := 0; g < 256; g += 64 {
		for l := range 32 {
			dst = append(dst, L[g+l]|L[g+l+32]<<4)
		}
	}
	return dst
}

func dequantizeQ4_K(out []float32, blk []byte) {
	d := F16ToF32(binary.LittleEndian.Uint16(blk))
	dmin := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
	sc, qs := blk[4:16], blk[16:144]
	for g := range 4 {
		s0, m0 := scaleMinK4(2*g, sc)
		s1, m1 := scaleMinK4(2*g+1, sc)
		d0, dm0 := float32(d*float32(s0)), float32(dmin*float32(m0))
		d1, dm1 := float32(d*float32(s1)), float32(dmin*float32(m1))
		q := qs[32*g : 32*g+32]
		for l, v := range q {
			out[64*g+l] = float32(d0*float32(v&15)) - dm0
			out[64*g+32+l] = float32(d1*float32(v>>4)) - dm1
		}
	}
}

// quantizeQ5_K encodes one super-block of 256 (spec §5.3): Q4_K's d, dmin and
// scales, then qh[32] (bit 2g of qh[l] is bit 4 of element 64g+l, bit 2g+1
// that of 64g+32+l), then Q4_K's nibble layout of the low four bits.
func quantizeQ5_K(dst []byte, x []float32) []byte {
	var L [256]uint8
	d, dmin, sc := quantizeScalesMinK4(x, &L, 31, -0.5, 0.1, 15)
	dst = binary.LittleEndian.AppendUint16(dst, d)
	dst = binary.LittleEndian.AppendUint16(dst, dmin)
	dst = append(dst, sc[:]...)
	var qh [32]byte
	var qs [128]byte
	for g := range 4 {
		for l := range 32 {
			a, b := L[64*g+l], L[64*g+32+l]
			qh[l] |= a>>4<<(2*g) | b>>4<<(2*g+1)
			qs[32*g+l] = a&15 | b&15<<4
		}
	}
	dst = append(dst, qh[:]...)
	return append(dst, qs[:]...)
}

func dequantizeQ5_K(out []float32, blk []byte) {
	d := F16ToF32(binary.LittleEndian.Uint16(blk))
	dmin := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
	sc, qh, qs := blk[4:16], blk[16:48], blk[48:176]
	for g := range 4 {
		s0, m0 := scaleMinK4(2*g, sc)
		s1, m1 := scaleMinK4(2*g+1, sc)
		d0, dm0 := float32(d*float32(s0)), float32(dmin*float32(m0))
		d1, dm1 := float32(d*float32(s1)), float32(dmin*float32(m1))
		for l, v := range qs[32*g : 32*g+32] {
			h0, h1 := qh[l]>>(2*g)&1, qh[l]>>(2*g+1)&1
			out[64*g+l] = float32(d0*float32(v&15|h0<<4)) - dm0
			out[64*g+32+l] = float32(d1*float32(v>>4|h1<<4)) - dm1
		}
	}
}

// makeQX is GGML's make_qx_quants with rmse_type 1 and no importance weights,
// for Q6_K's sub-blocks of 16: the scale of x ≈ scale·(L − nmax), L in
// [0, 2·nmax), searched over the 19 trial scales −(nmax + 0.1·is)/max by
// x²-weighted least squares.
func makeQX(x []float32, L []int8, nmax int) float32 {
	var m, amax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, m = a, v
		}
	}
	if amax < 1e-15 {
		clear(L[:len(x)])
		return 0
	}
	fmax := float32(nmax)
	level := func(iscale, v float32) int { return clampInt(nearestInt(float32(iscale*v)), -nmax, nmax-1) }
	sums := func(iscale float32) (sumLX, sumL2 float32) {
		for _, v := range x {
			l := float32(level(iscale, v))
			wv := float32(v * v)
			sumLX += float32(float32(wv*v) * l)
			sumL2 += float32(float32(wv*l) * l)
		}
		return
	}
	iscale := -fmax / m
	for i, v := range x {
		L[i] = int8(level(iscale, v) + nmax)
	}
	sumLX, sumL2 := sums(iscale)
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := float32(scale * sumLX)
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -float32(fmax+float32(0.1*float32(is))) / m
		sumLX, sumL2 = sums(iscale)
		if sumL2 > 0 && float32(sumLX*sumLX) > float32(best*sumL2) {
			for i, v := range x {
				L[i] = int8(level(iscale, v) + nmax)
			}
			scale = sumLX / sumL2
			best = float32(scale * sumLX)
		}
	}
	return scale
}

// quantizeQ6_K encodes one super-block of 256 (spec §5.3): ql[128], qh[64],
// 16 int8 scales, F16 d. Element 128h + 32k + l (h < 2, k < 4, l < 32) has
// its low nibble in ql[64h + l + 32·(k&1)] (k ≥ 2: the high nibble) and its
// top two bits at bit 2k of qh[32h + l]; value d·scale[8h + 2k + l/16]·(q − 32).
func quantizeQ6_K(dst []byte, x []float32) []byte {
	var L [256]int8
	var scales [16]float32
	var maxScale, maxAbs float32
	for ib := range 16 {
		s := makeQX(x[16*ib:16*ib+16], L[16*ib:16*ib+16], 32)
		scales[ib] = s
		if a := abs32(s); a > maxAbs {
			maxAbs, maxScale = a, s
		}
	}
	if maxAbs < 1e-15 {
		return append(dst, make([]byte, 210)...)
	}
	iscale := -128 / maxScale
	d := F32ToF16(1 / iscale)
	var sc [16]int8
	for ib := range 16 {
		sc[ib] = int8(min(127, nearestInt(float32(iscale*scales[ib]))))
	}
	fd := F16ToF32(d)
	for j := range 16 {
		dj := float32(fd * float32(sc[j]))
		if dj == 0 {
			continue
		}
		for i := 16 * j; i < 16*j+16; i++ {
			L[i] = int8(clampInt(nearestInt(x[i]/dj), -32, 31) + 32)
		}
	}
	var ql [128]byte
	var qh [64]byte
	for h := range 2 {
		for l := range 32 {
			q := [4]uint8{uint8(L[128*h+l]), uint8(L[128*h+l+32]), uint8(L[128*h+l+64]), uint8(L[128*h+l+96])}
			ql[64*h+l] = q[0]&15 | q[2]&15<<4
			ql[64*h+l+32] = q[1]&15 | q[3]&15<<4
			qh[32*h+l] = q[0]>>4 | q[1]>>4<<2 | q[2]>>4<<4 | q[3]>>4<<6
		}
	}
	dst = append(dst, ql[:]...)
	dst = append(dst, qh[:]...)
	for _, s := range sc {
		dst = append(dst, byte(s))
	}
	return binary.LittleEndian.AppendUint16(dst, d)
}

func dequantizeQ6_K(out []float32, blk []byte) {
	ql, qh, sc := blk[:128], blk[128:192], blk[192:208]
	d := F16ToF32(binary.LittleEndian.Uint16(blk[208:]))
	for h := range 2 {
		for l := range 32 {
			a, b, hb := ql[64*h+l], ql[64*h+l+32], qh[32*h+l]
			q := [4]int{int(a&15|hb&3<<4) - 32, int(b&15|hb>>2&3<<4) - 32, int(a>>4|hb>>4&3<<4) - 32, int(b>>4|hb>>6&3<<4) - 32}
			for k, v := range q {
				s := float32(d * float32(int8(sc[8*h+2*k+l/16])))
				out[128*h+32*k+l] = s * float32(v)
			}
		}
	}
}
