package kernels

import (
	"encoding/binary"
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// Q5_0, Q5_1 and the K-quants Q4_K, Q5_K, Q6_K (spec/sinf.md §5.2–5.3), q
// table indices 2–6: portable kernels, which fillPortableQ puts into every
// set's entries that have no SIMD form (amd64 has AVX2 forms of the three
// Q5_0/Q5_1 kernels, kernels_amd64.s, and of the K-quants', kquant_amd64.s).
// Decode takes x as quantizeX leaves it, int8 blocks of 32 with a float32
// scale xd[b] and the block sum xd[nb32+b] = 8·d·Σq: a weight block
// contributes its scale times the integer dot of its levels with the x
// levels, minus (for the dtypes with a minimum) the minimum times x's block
// sum, as GGML's vec_dot kernels do with Q8_K (whose x blocks are 256 long;
// ours are 32, so x is quantized a little more finely). Prefill and the
// neuron-row accumulation dequantize Q5_0 and Q5_1 with format.Dequantize
// where there is no SIMD form, and the K-quants through kaxpy4 and kcvt
// (below; amd64 and arm64 have SIMD forms of their inner kernel).

func init() {
	archQKernels()
	for _, ks := range declaredSets {
		fillPortableQ(ks)
	}
	fillPortableQ(genericSet)
}

// fillPortableQ puts the portable kernels into the q table entries of ks
// that have none.
func fillPortableQ(ks *kernelSet) {
	for q := range nq {
		if ks.qdotRows[q] == nil {
			ks.qdotRows[q] = qdotRowsPortable[q]
		}
		if ks.qcvt[q] == nil {
			ks.qcvt[q] = qcvtPortable[q]
		}
		if ks.qaxpy4[q] == nil {
			ks.qaxpy4[q] = qaxpy4Portable[q]
		}
	}
}

var (
	qdotRowsPortable = [nq]func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int){
		qdotRowsQ8_0Go, qdotRowsQ4_0Go, qdotRowsKGo(2), qdotRowsKGo(3), qdotRowsKGo(4), qdotRowsKGo(5), qdotRowsKGo(6)}
	qcvtPortable = [nq]func(dst *float32, src unsafe.Pointer, nb int){
		qcvtQ8_0Go, qcvtQ4_0Go, qcvtKGo(2), qcvtKGo(3), kcvt(4, false), kcvt(5, false), kcvt(6, false)}
	qaxpy4Portable = [nq]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int){
		qaxpy4Q8_0Go, qaxpy4Q4_0Go, qaxpy4KGo(2), qaxpy4KGo(3), kaxpy4(4, false), kaxpy4(5, false), kaxpy4(6, false)}
)

func qcvtKGo(q int) func(dst *float32, src unsafe.Pointer, nb int) {
	return func(dst *float32, src unsafe.Pointer, nb int) { qcvtGo(q, dst, src, nb) }
}

func qaxpy4KGo(q int) func(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
	return func(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
		qaxpy4Go(q, dst, w0, w1, w2, w3, a0, a1, a2, a3, nb)
	}
}

func qdotRowsKGo(q int) func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, _ int) {
	return qdotRowsWith(q, qdotBlock[q])
}

// qdotRowsWith is qdotRows for the dtype of q table index q over dot, one
// weight block's dot with x (qdotBlock's form).
func qdotRowsWith(q int, dot func(blk []byte, qx []int8, xd, xsum []float32) float32) func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, _ int) {
	return func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, _ int) {
		bb, be := qBlockBytes[q], qBlockElems[q]
		nx := nb * be / 32 // x blocks
		qx, dx := unsafe.Slice(xq, 64*nx), xs(xd, 2*nx)
		d := xs(dst, m)
		for j := range d {
			row := unsafe.Slice((*byte)(rowAt(w, stride, idx, j)), nb*bb)
			var s float32
			for b := range nb {
				xb := b * be / 32
				s += dot(row[b*bb:(b+1)*bb], qx[64*xb:], dx[xb:], dx[nx+xb:])
			}
			d[j] = s
		}
	}
}

// qdotBlock[q] returns one weight block's dot with x: blk its bytes, qx the
// x levels from the block's first x block on (64 bytes per x block, the
// first 32 the levels), xd their scales and xsum their 8·d·Σq.
var qdotBlock = [nq]func(blk []byte, qx []int8, xd, xsum []float32) float32{
	2: dotQ5_0, 3: dotQ5_1, 4: dotQ4_K, 5: dotQ5_K, 6: dotQ6_K,
}

func f16(b []byte) float32 { return f16Table[binary.LittleEndian.Uint16(b)] }

func dotQ5_0(blk []byte, qx []int8, xd, _ []float32) float32 {
	qh, qs := binary.LittleEndian.Uint32(blk[2:]), blk[6:22]
	var sum int32
	for e, v := range qs {
		lo := int32(v&15|byte(qh>>e&1)<<4) - 16
		hi := int32(v>>4|byte(qh>>(e+16)&1)<<4) - 16
		sum += lo*int32(qx[e]) + hi*int32(qx[e+16])
	}
	return f16(blk) * xd[0] * float32(sum)
}

func dotQ5_1(blk []byte, qx []int8, xd, xsum []float32) float32 {
	qh, qs := binary.LittleEndian.Uint32(blk[4:]), blk[8:24]
	var sum int32
	for e, v := range qs {
		lo := int32(v&15 | byte(qh>>e&1)<<4)
		hi := int32(v>>4 | byte(qh>>(e+16)&1)<<4)
		sum += lo*int32(qx[e]) + hi*int32(qx[e+16])
	}
	return f16(blk)*xd[0]*float32(sum) + f16(blk[2:])*(xsum[0]/8)
}

// scaleMinK4 returns sub-block j's 6-bit scale and minimum (spec §5.3).
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | q[j-4]>>6<<4, q[j+4]>>4 | q[j]>>6<<4
}

// dotK4 is the dot of a Q4_K (qh nil) or Q5_K block with x: per group g
// of 64 elements, the low nibbles of qs[32g:] pair with x block 2g and the
// high ones with x block 2g+1 (array pointers keep the loops free of bounds
// checks), the integer sums then scaled by k4Dot.
func dotK4(blk, qh, qs []byte, qx []int8, xd, xsum []float32) float32 {
	var sums [8]int32
	for g := range 4 {
		q := (*[32]byte)(qs[32*g:])
		x0, x1 := (*[32]int8)(qx[128*g:]), (*[32]int8)(qx[128*g+64:])
		var s0, s1 int32
		if qh == nil {
			for l := range 32 {
				s0 += int32(q[l]&15) * int32(x0[l])
				s1 += int32(q[l]>>4) * int32(x1[l])
			}
		} else {
			h := (*[32]byte)(qh)
			for l := range 32 {
				s0 += int32(q[l]&15|h[l]>>(2*g)&1<<4) * int32(x0[l])
				s1 += int32(q[l]>>4|h[l]>>(2*g+1)&1<<4) * int32(x1[l])
			}
		}
		sums[2*g], sums[2*g+1] = s0, s1
	}
	return k4Dot(blk, &sums, xd, xsum)
}

// k4Dot is a Q4_K / Q5_K block's dot with x from its sub-blocks' integer
// dots sums[j] = Σ_l q_j[l]·x_j[l] (dotK4, or the NEON kdot kernels): d·Σ_j
// sc_j·d_x[j]·sums[j] − dmin·Σ_j m_j·xsum[j]/8.
func k4Dot(blk []byte, sums *[8]int32, xd, xsum []float32) float32 {
	d, dmin := f16(blk), f16(blk[2:])
	sc := (*[12]byte)(blk[4:16])
	xd, xsum = xd[:8], xsum[:8]
	var s, sm float32
	for g := range 4 {
		c0, m0 := scaleMinK4(2*g, sc[:])
		c1, m1 := scaleMinK4(2*g+1, sc[:])
		s += float32(c0)*xd[2*g]*float32(sums[2*g]) + float32(c1)*xd[2*g+1]*float32(sums[2*g+1])
		sm += float32(m0)*xsum[2*g] + float32(m1)*xsum[2*g+1]
	}
	return d*s - dmin*(sm/8)
}

func dotQ4_K(blk []byte, qx []int8, xd, xsum []float32) float32 {
	return dotK4(blk, nil, blk[16:144], qx, xd, xsum)
}

func dotQ5_K(blk []byte, qx []int8, xd, xsum []float32) float32 {
	return dotK4(blk, blk[16:48], blk[48:176], qx, xd, xsum)
}

func dotQ6_K(blk []byte, qx []int8, xd, _ []float32) float32 {
	var sums [16]int32
	for h := range 2 {
		// Element 128h + 32k + l: x block 4h + k, scale 8h + 2k + l/16; its
		// low nibble in ql[64h + 32(k&1) + l] (k ≥ 2: the high one), its top
		// bits at 2k of qh[32h + l].
		ql := (*[64]byte)(blk[64*h:])
		qh := (*[32]byte)(blk[128+32*h:])
		for k := range 4 {
			x := (*[32]int8)(qx[64*(4*h+k):])
			lo := ql[32*(k&1):]
			shift, hs := uint(4*(k>>1)), uint(2*k)
			var s0, s1 int32
			for l := range 16 {
				s0 += (int32(lo[l]>>shift&15|qh[l]>>hs&3<<4) - 32) * int32(x[l])
			}
			for l := 16; l < 32; l++ {
				s1 += (int32(lo[l]>>shift&15|qh[l]>>hs&3<<4) - 32) * int32(x[l])
			}
			sums[2*(4*h+k)], sums[2*(4*h+k)+1] = s0, s1
		}
	}
	return q6Dot(blk, &sums, xd)
}

// q6Dot is a Q6_K block's dot with x from its 16 sub-blocks' integer dots
// sums[i] (x block i/2): d·Σ_i d_x[i/2]·sc_i·sums[i].
func q6Dot(blk []byte, sums *[16]int32, xd []float32) float32 {
	sc := (*[16]byte)(blk[192:208])
	xd = xd[:8]
	var s float32
	for b := range 8 {
		s += xd[b] * (float32(int8(sc[2*b]))*float32(sums[2*b]) + float32(int8(sc[2*b+1]))*float32(sums[2*b+1]))
	}
	return f16(blk[208:]) * s
}

// The K-quants' neuron-row accumulation (qaxpy4) and dequantization (qcvt):
// per super-block, the Go side unpacks each row's sub-block scales and
// minimums (kScales, q6Scales, rounded as format.Dequantize rounds them),
// and an inner kernel runs over the weight levels — kaccumK4Go /
// kaccumQ6Go here, their AVX2 forms (kaccumSIMD) where simd is set.

// kaxpy4 returns qaxpy4 for the K-quant of q table index q (Q4_K, Q5_K or
// Q6_K).
func kaxpy4(q int, simd bool) func(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
	bb, five, six := qBlockBytes[q], q == qIndex(format.Q5_K), q == qIndex(format.Q6_K)
	return func(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
		ws, as := [4]unsafe.Pointer{w0, w1, w2, w3}, [4]float32{a0, a1, a2, a3}
		var lv [4]unsafe.Pointer
		var sc [64]float32
		var off [32]float32
		for b := range nb {
			for r, w := range ws {
				lv[r] = kScalesOf(unsafe.Add(w, b*bb), r, &sc, &off, six)
			}
			kaccum((*float32)(unsafe.Add(unsafe.Pointer(dst), 4*256*b)), &lv, &sc, &off, &as, 4, five, six, simd)
		}
	}
}

// kcvt returns qcvt for the K-quant of q table index q: each block's weights
// into cleared dst, as format.Dequantize dequantizes them.
func kcvt(q int, simd bool) func(dst *float32, src unsafe.Pointer, nb int) {
	bb, five, six := qBlockBytes[q], q == qIndex(format.Q5_K), q == qIndex(format.Q6_K)
	return func(dst *float32, src unsafe.Pointer, nb int) {
		var lv [4]unsafe.Pointer
		var sc [64]float32
		var off [32]float32
		one := [4]float32{1}
		d := xs(dst, 256*nb)
		clear(d)
		for b := range nb {
			lv[0] = kScalesOf(unsafe.Add(src, b*bb), 0, &sc, &off, six)
			kaccum(&d[256*b], &lv, &sc, &off, &one, 1, five, six, simd)
		}
	}
}

// kScalesOf unpacks row r's scales of the block at blk into sc and off (Q6_K:
// 16 scales from sc[16r]; Q4_K, Q5_K: 8 scales and minimums from 8r) and
// returns where its levels begin.
func kScalesOf(blk unsafe.Pointer, r int, sc *[64]float32, off *[32]float32, six bool) unsafe.Pointer {
	if six {
		q6Scales((*[210]byte)(blk), sc[16*r:16*r+16])
		return blk
	}
	kScales((*[16]byte)(blk), sc[8*r:8*r+8], off[8*r:8*r+8])
	return unsafe.Add(blk, 16)
}

func kaccum(dst *float32, q *[4]unsafe.Pointer, sc *[64]float32, off *[32]float32, a *[4]float32, rows int, five, six, simd bool) {
	switch {
	case simd:
		kaccumSIMD(dst, q, sc, off, a, rows, five, six)
	case six:
		kaccumQ6Go(dst, q, sc, a, rows)
	default:
		kaccumK4Go(dst, q, (*[32]float32)(sc[:32]), off, a, rows, five)
	}
}

// kScales sets sc[j] = d·sc_j and off[j] = dmin·m_j for the eight
// sub-blocks of the Q4_K / Q5_K super-block whose first 16 bytes (d, dmin,
// the 6-bit scales and minimums) are blk, rounded as format.Dequantize
// rounds them.
func kScales(blk *[16]byte, sc, off []float32) {
	sc, off = sc[:8], off[:8]
	d, dmin := f16(blk[0:2]), f16(blk[2:4])
	// scaleMinK4 for all eight at once, four bytes to a word: the scales
	// and minimums of sub-blocks 0–3 are the low six bits of bytes 0–3 and
	// 4–7; those of 4–7 the low (scales) or high (minimums) nibbles of bytes
	// 8–11 with the top two bits of bytes 0–3 or 4–7 above them.
	u0 := binary.LittleEndian.Uint32(blk[4:])
	u1 := binary.LittleEndian.Uint32(blk[8:])
	u2 := binary.LittleEndian.Uint32(blk[12:])
	s := [2]uint32{u0 & 0x3f3f3f3f, u2&0x0f0f0f0f | u0>>6&0x03030303<<4}
	m := [2]uint32{u1 & 0x3f3f3f3f, u2>>4&0x0f0f0f0f | u1>>6&0x03030303<<4}
	for j := range 8 {
		sh := 8 * uint(j&3)
		sc[j] = d * float32(uint8(s[j>>2]>>sh))
		off[j] = dmin * float32(uint8(m[j>>2]>>sh))
	}
}

// q6Scales sets sc[j] = d·sc_j for the 16 sub-blocks of a Q6_K block,
// rounded as format.Dequantize rounds them.
func q6Scales(blk *[210]byte, sc []float32) {
	d := f16(blk[208:210])
	for j := range 16 {
		sc[j] = d * float32(int8(blk[192+j]))
	}
}

// kaccumK4Go: dst[e] += Σ_{r<rows} a[r]·(sc[8r + e/32]·q_r[e] − off[8r +
// e/32]) for e < 256, one Q4_K (five: Q5_K) super-block's levels of rows ≤ 4
// at q[r] (Q5_K: qh[32], then the nibbles), each weight rounded as
// format.Dequantize rounds it (the float32 conversions keep the product and
// the difference from fusing). The AVX2 form is kaccumQ4_KAVX2.
func kaccumK4Go(dst *float32, q *[4]unsafe.Pointer, sc, off *[32]float32, a *[4]float32, rows int, five bool) {
	d := (*[256]float32)(unsafe.Pointer(dst))
	for r := range rows {
		lv := q[r]
		var qh *[32]byte
		if five {
			qh, lv = (*[32]byte)(lv), unsafe.Add(lv, 32)
		}
		qs := (*[128]byte)(lv)
		for g := range 4 {
			s0, s1 := sc[8*r+2*g], sc[8*r+2*g+1]
			m0, m1 := off[8*r+2*g], off[8*r+2*g+1]
			lo, hi := d[64*g:64*g+32], d[64*g+32:64*g+64]
			for l, v := range qs[32*g : 32*g+32] {
				q0, q1 := v&15, v>>4
				if five {
					q0 |= qh[l] >> (2 * g) & 1 << 4
					q1 |= qh[l] >> (2*g + 1) & 1 << 4
				}
				lo[l] += a[r] * float32(float32(s0*float32(q0))-m0)
				hi[l] += a[r] * float32(float32(s1*float32(q1))-m1)
			}
		}
	}
}

// kaccumQ6Go: dst[e] += Σ_{r<rows} a[r]·sc[16r + e/16]·(q_r[e] − 32) for e
// < 256, one Q6_K super-block of rows ≤ 4 at q[r] (ql[128], then qh[64]),
// each weight rounded as format.Dequantize rounds it. The AVX2 form is
// kaccumQ6_KAVX2.
func kaccumQ6Go(dst *float32, q *[4]unsafe.Pointer, sc *[64]float32, a *[4]float32, rows int) {
	d := (*[256]float32)(unsafe.Pointer(dst))
	for r := range rows {
		ql, qh := (*[128]byte)(q[r]), (*[64]byte)(unsafe.Add(q[r], 128))
		for h := range 2 {
			for l := range 32 {
				x, y, hb := ql[64*h+l], ql[64*h+l+32], qh[32*h+l]
				lv := [4]int{int(x&15|hb&3<<4) - 32, int(y&15|hb>>2&3<<4) - 32, int(x>>4|hb>>4&3<<4) - 32, int(y>>4|hb>>6&3<<4) - 32}
				for k, v := range lv {
					e := 128*h + 32*k + l
					d[e] += a[r] * float32(sc[16*r+e/16]*float32(v))
				}
			}
		}
	}
}
