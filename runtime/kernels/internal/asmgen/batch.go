package main

import "fmt"

// Multi-token decode kernels (kernels/batch.go, MatVecBatch): the next token
// of T sequences through one pass over the weight rows, each weight loaded
// and converted or unpacked once for all T. Each token's result is bit for
// bit the single-token kernel's: it keeps that kernel's accumulators, lane
// for lane, and the order in which they are summed.

// combineTokens leaves [s_0, …, s_{T−1}] in X0 from the four-float partial
// sums in X0..X{T−1}: each s_t = (p_t[0]+p_t[1]) + (p_t[2]+p_t[3]), the two
// VHADDPS of the single-token kernels' last step, three VHADDPS for all T
// tokens (X4, X5 clobbered).
func combineTokens(g *gen, T int) {
	r := func(t int) int { return min(t, T-1) }
	g.i("VHADDPS X%d, X%d, X4", r(1), r(0))
	g.i("VHADDPS X%d, X%d, X5", r(3), r(2))
	g.i("VHADDPS X5, X4, X0")
}

// storeTokens stores lane t of X0 at DI + t·R13 bytes, t < T (R11 clobbered).
func storeTokens(g *gen, T int) {
	g.i("VMOVSS X0, (DI)")
	if T > 1 {
		g.i("VEXTRACTPS $1, X0, (DI)(R13*1)")
	}
	if T > 2 {
		g.i("VEXTRACTPS $2, X0, (DI)(R13*2)")
	}
	if T > 3 {
		g.i("LEAQ (DI)(R13*2), R11")
		g.i("VEXTRACTPS $3, X0, (R11)(R13*1)")
	}
}

// nextRow ends a row of the multi-token dots (DI the next results, R8 the
// next row, BX rows left: loop to row:) and the kernel.
func nextRow(g *gen) {
	g.i("ADDQ $4, DI")
	g.i("ADDQ R9, R8")
	g.i("DECQ BX")
	g.i("JNE row")
	g.p("done:")
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}

// dotRowsBatch: for t < T and j < m, the float32 at dst + t·dstride bytes +
// 4j = Σ_{e<n} w_j[e]·x_t[e], rows contiguous at w + j·stride, x_t at x +
// t·xstride bytes; n a multiple of 2·vw. Token t keeps dotRow's four
// accumulators (registers 4t..4t+3) and its sum, so its results are
// dotRows' bit for bit; the rows are prefetched pf bytes ahead as there.
// AVX-512: T ≤ 4 (16 accumulators, the weights in Z16..Z19); AVX2: T ≤ 2
// here, and T 3 and 4 in dotRowsBatchHalves.
func (x x86) dotRowsBatch(g *gen, d dtype, T int) {
	if x.r == "Y" && T > 2 {
		x.dotRowsBatchHalves(g, d, T)
		return
	}
	xr := x.dotRowsBatchHead(g, fmt.Sprintf("dotRowsT%d%s%s", T, d.name, x.name), T)
	w := 16 // the four weight vectors
	if x.r == "Y" {
		w = 4 * T
	}
	g.i("LEAQ (R8)(R10*1), R11")
	acc := func(t, k int) int { return 4*t + k }
	for t := range T {
		for k := range 4 {
			x.zero(g, acc(t, k))
		}
	}
	g.i("XORQ AX, AX")
	g.i("TESTQ DX, DX")
	g.i("JEQ tail")
	g.p("loop:")
	for off := 0; off < 4*x.vw*d.size; off += 64 {
		g.i("PREFETCHT0 %d(R11)(AX*%d)", off, d.size)
	}
	for k := range 4 {
		x.loadW(g, d, fmt.Sprintf("%d(R8)(AX*%d)", k*x.vw*d.size, d.size), x.v(w+k))
	}
	for t := range T {
		for k := range 4 {
			g.i("VFMADD231PS %d(%s)(AX*4), %s, %s", k*4*x.vw, xr[t], x.v(w+k), x.v(acc(t, k)))
		}
	}
	g.i("ADDQ $%d, AX", 4*x.vw)
	g.i("CMPQ AX, DX")
	g.i("JB loop")
	g.p("tail:")
	x.dotRowsBatchTail(g, d, xr, w, acc, "sum")
	// dotRow's sum per token, into X_t (its accumulators 4t..4t+3 are
	// free once summed; token 0's X0 is its own first accumulator).
	for t := range T {
		a := acc(t, 0)
		g.i("VADDPS %s, %s, %s", x.v(a+3), x.v(a+2), x.v(a+2))
		g.i("VADDPS %s, %s, %s", x.v(a+1), x.v(a), x.v(a))
		g.i("VADDPS %s, %s, %s", x.v(a+2), x.v(a), x.v(a))
		x.toY(g, a, a+1)
		g.i("VEXTRACTF128 $1, Y%d, X%d", a, a+1)
		g.i("VADDPS X%d, X%d, X%d", a+1, a, a)
	}
	for t := 1; t < T; t++ {
		g.i("VMOVAPS X%d, X%d", acc(t, 0), t)
	}
	combineTokens(g, T)
	storeTokens(g, T)
	nextRow(g)
}

// qBatchRecord is the bytes one token's x takes per pair of blocks in the
// layout qdotRowsBatch reads (kernels.qBatchLayout): 32 q_x of block 2p, 32
// of block 2p+1, d_x eight times for each (64), and for Q8_0 the lanes'
// −128·Σ q_x (sixteen int32). Q4_0's pair record ends, after the T tokens',
// with its two blocks' corrections 8·d_x·Σq_x, four floats each (lane t:
// token t).
func qBatchRecord(q qtype) int {
	if q.name == "Q8_0" {
		return 192
	}
	return 128
}

// qdotRowsBatch: qdotRows (Q8_0, Q4_0; contiguous rows) of T tokens on ZMM
// registers, two blocks a step: for t < T and j < m, the float32 at dst +
// t·dstride bytes + 4j, over x in qBatchRecord's layout at xb (pair p, token
// t at p·S + t·R, S the pair stride). Each token's accumulator holds the
// single-token kernel's even-block accumulator in its low eight lanes and the
// odd-block one in its high eight, the Q4_0 corrections go to even and odd
// sums with the tokens as lanes, and the last block of an odd count goes to
// the even lanes (masked): the same products, in the same order, as the YMM
// kernel's Y0, Y1, X9 and X10, so the results are qdotRows' bit for bit.
// Q8_0 multiplies w+128 (unsigned) by x and starts each lane from −128·Σx (the
// layout's), the same int32 as the single kernel's |w|·sign(w)·x. EVEX
// VPDPBUSD on ZMM (AVX512-VNNI).
func qdotRowsBatch(g *gen, q qtype, T int) {
	name := fmt.Sprintf("qdotRowsT%d%sAVX512VNNI", T, q.name)
	g.decl("//go:noescape\nfunc %s(w unsafe.Pointer, stride int, xb *byte, nb, m int, dst *float32, dstride int, pf int)", name)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $0-64", name)
	R := qBatchRecord(q)
	S := T * R
	q4 := q.name == "Q4_0"
	if q4 {
		S += 32
	}
	g.i("MOVQ w+0(FP), R8")
	g.i("MOVQ stride+8(FP), R9")
	g.i("MOVQ xb+16(FP), R12")
	g.i("MOVQ nb+24(FP), CX")
	g.i("MOVQ m+32(FP), BX")
	g.i("MOVQ dst+40(FP), DI")
	g.i("MOVQ dstride+48(FP), R13")
	g.i("MOVQ pf+56(FP), R10")
	g.i("MOVQ ·f16Table(SB), R14")
	g.i("MOVL $0xff, SI")
	g.i("KMOVW SI, K1") // the low eight lanes: the even blocks
	g.i("MOVL $0xff00, SI")
	g.i("KMOVW SI, K2")
	if q4 {
		g.i("VBROADCASTI64X4 qShift4<>(SB), Z22")
		g.i("MOVL $0x0f0f0f0f, SI")
		g.i("VPBROADCASTD SI, Z23")
	} else {
		g.i("MOVL $0x80808080, SI")
		g.i("VPBROADCASTD SI, Z24")
	}
	g.i("TESTQ BX, BX")
	g.i("JEQ done")
	g.p("row:")
	g.i("LEAQ (R8)(R10*1), R11")
	for t := range T {
		g.i("VPXORD Z%d, Z%d, Z%d", 16+t, 16+t, 16+t)
	}
	if q4 {
		g.i("VXORPS X14, X14, X14")
		g.i("VXORPS X15, X15, X15")
	}
	g.i("XORQ AX, AX")
	g.i("XORQ DX, DX")
	g.i("MOVQ CX, R15")
	g.i("CMPQ R15, $2")
	g.i("JL one")
	g.p("pair:")
	for off := 0; off < 2*q.bb; off += 64 {
		g.i("PREFETCHT0 %d(R11)(AX*1)", off)
	}
	// The weights of both blocks in Z8, as x's pair record holds x.
	if q4 {
		g.i("VMOVDQU %d(R8)(AX*1), X8", q.qs)
		g.i("VINSERTI128 $1, %d(R8)(AX*1), Y8, Y8", q.bb+q.qs)
		g.i("VSHUFI64X2 $0x50, Z8, Z8, Z8") // 128-bit lanes [b0, b0, b1, b1]
		g.i("VPSRLVD Z22, Z8, Z8")
		g.i("VPANDD Z23, Z8, Z8")
	} else {
		g.i("VMOVDQU %d(R8)(AX*1), Y8", q.qs)
		g.i("VINSERTI64X4 $1, %d(R8)(AX*1), Z8, Z8", q.bb+q.qs)
		g.i("VPXORD Z24, Z8, Z8")
	}
	// d_w of block 0 in every lane of Z20, then block 1's in the high eight.
	g.i("MOVWLZX (R8)(AX*1), SI")
	g.i("VBROADCASTSS (R14)(SI*4), Z20")
	g.i("MOVWLZX %d(R8)(AX*1), SI", q.bb)
	g.i("VBROADCASTSS (R14)(SI*4), X21")
	if q4 {
		g.i("VFMADD231PS %d(R12)(DX*1), X20, X14", T*R)
		g.i("VFMADD231PS %d(R12)(DX*1), X21, X15", T*R+16)
	}
	g.i("VBROADCASTSS X21, K2, Z20")
	qBatchProducts(g, q4, T, R, "Z", "")
	g.i("ADDQ $%d, AX", 2*q.bb)
	g.i("ADDQ $%d, DX", S)
	g.i("SUBQ $2, R15")
	g.i("CMPQ R15, $2")
	g.i("JGE pair")
	g.p("one:")
	g.i("TESTQ R15, R15")
	g.i("JEQ sum")
	g.i("PREFETCHT0 (R11)(AX*1)")
	if q4 {
		g.i("VBROADCASTI128 %d(R8)(AX*1), Y8", q.qs)
		g.i("VPSRLVD Y22, Y8, Y8")
		g.i("VPANDD Y23, Y8, Y8")
	} else {
		g.i("VMOVDQU %d(R8)(AX*1), Y8", q.qs)
		g.i("VPXORD Y24, Y8, Y8")
	}
	g.i("MOVWLZX (R8)(AX*1), SI")
	g.i("VBROADCASTSS (R14)(SI*4), Y20")
	if q4 {
		g.i("VFMADD231PS %d(R12)(DX*1), X20, X14", T*R)
	}
	qBatchProducts(g, q4, T, R, "Y", "K1, ") // the even lanes only
	g.p("sum:")
	for t := range T {
		g.i("VEXTRACTF64X4 $1, Z%d, Y%d", 16+t, 4+t)
		g.i("VADDPS Y%d, Y%d, Y%d", 4+t, 16+t, t) // even + odd
		g.i("VEXTRACTF128 $1, Y%d, X%d", t, 4+t)
		g.i("VADDPS X%d, X%d, X%d", 4+t, t, t)
	}
	combineTokens(g, T)
	if q4 {
		g.i("VADDPS X15, X14, X14")
		g.i("VSUBPS X14, X0, X0")
	}
	storeTokens(g, T)
	nextRow(g)
}

// qBatchProducts emits each token's products of a step of qdotRowsBatch:
// the unsigned weights in Z8 (v "Z": two blocks) or Y8 ("Y": one) by the
// token's q_x, from zero (Q4_0) or −128·Σx (Q8_0), converted, times d_w (Z20)
// and added times d_x into its accumulator Z16+t, under mask ("" or "K1, ").
func qBatchProducts(g *gen, q4 bool, T, R int, v, mask string) {
	for t := range T {
		tmp := 10 + t
		if q4 {
			g.i("VPXORD %s%d, %[1]s%[2]d, %[1]s%[2]d", v, tmp)
		} else {
			g.i("VMOVDQU32 %d(R12)(DX*1), %s%d", t*R+128, v, tmp)
		}
		g.i("VPDPBUSD %d(R12)(DX*1), %s8, %s%d", t*R, v, v, tmp)
		g.i("VCVTDQ2PS %s%d, %[1]s%[2]d", v, tmp)
		g.i("VMULPS %s20, %[1]s%[2]d, %[1]s%[2]d", v, tmp)
		g.i("VFMADD231PS %d(R12)(DX*1), Z%d, %sZ%d", t*R+64, tmp, mask, 16+t)
	}
}

// qaxpy4Batch: qaxpy4 (Q8_0, Q4_0; ZMM) of T ≤ 4 tokens at once: for t < T,
// the 32·nb floats at d_t += Σ_{r<4} a_t[r]·w_r, a_t[r] the float32 at a +
// t·astride + 4r. Each block's four rows are unpacked and converted once;
// each token then runs qaxpy4's arithmetic on its own dst in qaxpy4's order
// (the scale s_r = d_r·a_t[r], the products by rows 0 to 3, Q4_0's −8·Σ_r s_r
// last), so its results are qaxpy4's bit for bit. No prefetching (the
// rows come from the block the caller keeps in cache).
func qaxpy4Batch(g *gen, q qtype) {
	name := "qaxpy4B" + q.name + "AVX512"
	g.decl("//go:noescape\nfunc %s(d0, d1, d2, d3 unsafe.Pointer, T int, w0, w1, w2, w3 unsafe.Pointer, a *float32, astride int, nb int)", name)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $0-96", name)
	rows := []string{"R8", "R9", "R10", "R11"}
	g.i("LEAQ d0+0(FP), R12") // dst_t is the argument t
	g.i("MOVQ T+32(FP), BX")
	for i, r := range rows {
		g.i("MOVQ w%d+%d(FP), %s", i, 40+8*i, r)
	}
	g.i("MOVQ astride+80(FP), R13")
	g.i("MOVQ nb+88(FP), CX")
	g.i("MOVQ ·f16Table(SB), R14")
	if q.name == "Q4_0" {
		g.i("MOVL $0x0f, R15")
		g.i("VPBROADCASTD R15, Z13")
		g.i("MOVL $0xc1000000, R15") // −8.0
		g.i("VPBROADCASTD R15, Z5")
	}
	g.i("XORQ AX, AX")
	g.i("XORQ DI, DI")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.i("TESTQ BX, BX")
	g.i("JEQ done")
	g.p("loop:")
	// Row r: d_r in Z16+r, its 32 weights as float32 in Z20+2r, Z21+2r.
	for r, base := range rows {
		mem := func(off int) string { return fmt.Sprintf("%d(%s)(AX*1)", off, base) }
		lo, hi := 20+2*r, 21+2*r
		g.i("MOVWLZX %s, R15", mem(0))
		g.i("VBROADCASTSS (R14)(R15*4), Z%d", 16+r)
		if q.name == "Q8_0" {
			g.i("VPMOVSXBD %s, Z%d", mem(2), lo)
			g.i("VPMOVSXBD %s, Z%d", mem(18), hi)
		} else {
			g.i("VPMOVZXBD %s, Z%d", mem(q.qs), lo)
			g.i("VPSRLD $4, Z%d, Z%d", lo, hi)
			g.i("VPANDD Z13, Z%d, Z%d", lo, lo)
		}
		g.i("VCVTDQ2PS Z%d, Z%d", lo, lo)
		g.i("VCVTDQ2PS Z%d, Z%d", hi, hi)
	}
	g.i("XORQ DX, DX")
	g.i("MOVQ a+72(FP), SI")
	g.p("token:")
	g.i("MOVQ (R12)(DX*8), R15")
	g.i("VMOVUPS (R15)(DI*1), Z0")
	g.i("VMOVUPS 64(R15)(DI*1), Z1")
	for r := range rows {
		g.i("VMULPS.BCST %d(SI), Z%d, Z4", 4*r, 16+r) // s_r = d_r·a_t[r]
		g.i("VFMADD231PS Z4, Z%d, Z0", 20+2*r)
		g.i("VFMADD231PS Z4, Z%d, Z1", 21+2*r)
		if q.name == "Q4_0" {
			if r == 0 {
				g.i("VMOVAPS Z4, Z12")
			} else {
				g.i("VADDPS Z4, Z12, Z12")
			}
		}
	}
	if q.name == "Q4_0" {
		g.i("VMULPS Z5, Z12, Z12") // −8·Σ_r s_r
		g.i("VADDPS Z12, Z0, Z0")
		g.i("VADDPS Z12, Z1, Z1")
	}
	g.i("VMOVUPS Z0, (R15)(DI*1)")
	g.i("VMOVUPS Z1, 64(R15)(DI*1)")
	g.i("ADDQ R13, SI")
	g.i("INCQ DX")
	g.i("CMPQ DX, BX")
	g.i("JB token")
	loopTail(g, fmt.Sprintf("ADDQ $%d, AX", q.bb), "ADDQ $128, DI")
}

// dotRowsBatchHead emits the TEXT line (name) and argument loads of a
// multi-token dot (dotRowsBatch's registers: R8 the row, R9 the stride,
// token t's x in the returned register, CX n, DX n rounded down to 4·vw,
// BX rows, DI dst, R13 dstride, R10 pf) up to the row: label, and returns
// the x registers.
func (x x86) dotRowsBatchHead(g *gen, name string, T int) []string {
	x.text(g, name, 72, "(w unsafe.Pointer, stride int, x *float32, xstride int, n, m int, dst *float32, dstride int, pf int)")
	xr := []string{"SI", "R12", "R14", "R15"}[:T] // token t's x
	g.i("MOVQ w+0(FP), R8")
	g.i("MOVQ stride+8(FP), R9")
	g.i("MOVQ x+16(FP), SI")
	g.i("MOVQ xstride+24(FP), R13")
	for t := 1; t < T; t++ {
		g.i("LEAQ (%s)(R13*1), %s", xr[t-1], xr[t])
	}
	g.i("MOVQ n+32(FP), CX")
	g.i("MOVQ m+40(FP), BX")
	g.i("MOVQ dst+48(FP), DI")
	g.i("MOVQ dstride+56(FP), R13")
	g.i("MOVQ pf+64(FP), R10")
	g.i("MOVQ CX, DX")
	g.i("ANDQ $-%d, DX", 4*x.vw)
	g.i("TESTQ BX, BX")
	g.i("JEQ done")
	g.p("row:")
	return xr
}

// dotRowsBatchHalves is dotRowsBatch on AVX2 for T of 3 or 4 tokens, whose
// 4·T accumulators do not fit sixteen YMM registers with the weights: each
// row is run twice, first through dotRow's accumulators 0 and 1 (the first
// two vectors of each step, and the tail), whose sum each token keeps
// (Y10..Y13), then through 2 and 3. The second pass reads the row from L1
// (these rows are under seqRowBytes, 2 KiB), so memory still sees each
// weight once; dotRow's sum (a0+a1)+(a2+a3) is unchanged, so the results
// are dotRows' bit for bit.
func (x x86) dotRowsBatchHalves(g *gen, d dtype, T int) {
	xr := x.dotRowsBatchHead(g, fmt.Sprintf("dotRowsT%d%s%s", T, d.name, x.name), T)
	acc := func(t, k int) int { return 2*t + k } // Y0..Y7
	const w, keep = 8, 10                        // weights Y8, Y9; token t's a0+a1 in Y(10+t)
	g.i("LEAQ (R8)(R10*1), R11")
	for half := range 2 {
		for t := range T {
			x.zero(g, acc(t, 0))
			x.zero(g, acc(t, 1))
		}
		g.i("XORQ AX, AX")
		g.i("TESTQ DX, DX")
		g.i("JEQ tail%d", half)
		g.p("loop%d:", half)
		if half == 0 {
			for off := 0; off < 4*x.vw*d.size; off += 64 {
				g.i("PREFETCHT0 %d(R11)(AX*%d)", off, d.size)
			}
		}
		for k := range 2 {
			x.loadW(g, d, fmt.Sprintf("%d(R8)(AX*%d)", (2*half+k)*x.vw*d.size, d.size), x.v(w+k))
		}
		for t := range T {
			for k := range 2 {
				g.i("VFMADD231PS %d(%s)(AX*4), %s, %s", (2*half+k)*4*x.vw, xr[t], x.v(w+k), x.v(acc(t, k)))
			}
		}
		g.i("ADDQ $%d, AX", 4*x.vw)
		g.i("CMPQ AX, DX")
		g.i("JB loop%d", half)
		g.p("tail%d:", half)
		if half == 0 {
			x.dotRowsBatchTail(g, d, xr, w, acc, "sum0")
			for t := range T {
				g.i("VADDPS Y%d, Y%d, Y%d", acc(t, 1), acc(t, 0), keep+t)
			}
		}
	}
	// (a2+a3), then (a0+a1)+(a2+a3), then the halves of the register, into X_t.
	for t := range T {
		g.i("VADDPS Y%d, Y%d, Y%d", acc(t, 1), acc(t, 0), acc(t, 0))
		g.i("VADDPS Y%d, Y%d, Y%d", acc(t, 0), keep+t, keep+t)
	}
	for t := range T {
		g.i("VEXTRACTF128 $1, Y%d, X%d", keep+t, w)
		g.i("VADDPS X%d, X%d, X%d", w, keep+t, t)
	}
	combineTokens(g, T)
	storeTokens(g, T)
	nextRow(g)
}

// dot4RowsBatch: dotRowsBatch's contract for rows of seqRowBytes or more,
// which a single-token MatVec reads four at a time with dot4: each token
// keeps dot4's two accumulators per row (Y2t, Y2t+1), the step of 2·vw
// elements (n a multiple of it) and dot4's sum of each row, which depends
// on that row alone, so its results are dot4's bit for bit. One row at a
// time, prefetched pf bytes ahead. AVX2, T ≤ 4.
func (x x86) dot4RowsBatch(g *gen, d dtype, T int) {
	xr := x.dotRowsBatchHead(g, fmt.Sprintf("dot4RowsT%d%s%s", T, d.name, x.name), T)
	g.i("LEAQ (R8)(R10*1), R11")
	for i := range 2 * T {
		x.zero(g, i)
	}
	g.i("XORQ AX, AX")
	g.i("TESTQ CX, CX")
	g.i("JEQ sum")
	g.p("loop:")
	for off := 0; off < 2*x.vw*d.size; off += 64 {
		g.i("PREFETCHT0 %d(R11)(AX*%d)", off, d.size)
	}
	x.loadW(g, d, fmt.Sprintf("(R8)(AX*%d)", d.size), x.v(8))
	x.loadW(g, d, fmt.Sprintf("%d(R8)(AX*%d)", x.vw*d.size, d.size), x.v(9))
	for t := range T {
		g.i("VFMADD231PS (%s)(AX*4), %s, %s", xr[t], x.v(8), x.v(2*t))
		g.i("VFMADD231PS %d(%s)(AX*4), %s, %s", 4*x.vw, xr[t], x.v(9), x.v(2*t+1))
	}
	g.i("ADDQ $%d, AX", 2*x.vw)
	g.i("CMPQ AX, CX")
	g.i("JB loop")
	g.p("sum:")
	for t := range T {
		g.i("VADDPS %s, %s, %s", x.v(2*t+1), x.v(2*t), x.v(2*t))
	}
	r := func(t int) int { return 2 * min(t, T-1) }
	hsum4(g, r(0), r(1), r(2), r(3)) // dot4's, the tokens in the rows' lanes
	storeTokens(g, T)
	nextRow(g)
}

// dotRowsBatchTail emits dotRow's tail for every token (xr) of a
// multi-token dot: where AX < CX, two vectors more (weights into w and
// w+1, prefetched pf ahead) into each token's accumulators acc(t, 0) and
// acc(t, 1); then the label sum.
func (x x86) dotRowsBatchTail(g *gen, d dtype, xr []string, w int, acc func(t, k int) int, sum string) {
	g.i("CMPQ AX, CX")
	g.i("JAE %s", sum)
	for off := 0; off < 2*x.vw*d.size; off += 64 {
		g.i("PREFETCHT0 %d(R11)(AX*%d)", off, d.size)
	}
	x.loadW(g, d, fmt.Sprintf("(R8)(AX*%d)", d.size), x.v(w))
	x.loadW(g, d, fmt.Sprintf("%d(R8)(AX*%d)", x.vw*d.size, d.size), x.v(w+1))
	for t := range xr {
		g.i("VFMADD231PS (%s)(AX*4), %s, %s", xr[t], x.v(w), x.v(acc(t, 0)))
		g.i("VFMADD231PS %d(%s)(AX*4), %s, %s", 4*x.vw, xr[t], x.v(w+1), x.v(acc(t, 1)))
	}
	g.p("%s:", sum)
}
