package main

import "fmt"

// Integer prefill of block-quantized rows (MatMul; runtime/kernels/qgemm.go).
// L rows' blocks (L = 8 for YMM and NEON, 16 for ZMM) are repacked once per
// call so that each 32-bit lane of a register is one row: per block b of 32
// elements of the L rows, 40·L bytes
//
//	[0, 4L)    d_w of rows 0..L−1, float32
//	[4L, 8L)   m_w of rows 0..L−1, float32
//	[8L, 40L)  for g < 8, rows 0..L−1: the levels of elements 4g..4g+3 as
//	           bytes u, unsigned on amd64 (weight d_w·u − 8·m_w)
//
// so that one VPDPBUSD of group g's 4L bytes with a token's four int8 x
// (broadcast) adds four products to each row's lane: a block is 8 of them,
// and the lanes need no horizontal sum. GGML's q4_0_8x8 repacking and
// llamafile's tinyBLAS interleave rows the same way. With a weight
// d_w·u − 8·m_w, Σ w·x = d_w·d_x·Σ u·q_x − m_w·(8·d_x·Σ q_x), the last factor
// quantizeX's xd[nb+b]: Q4_0 packs the nibble q with m_w = d_w (weight
// (q−8)·d), Q8_0 w+128 (its sign bit flipped) with m_w = 16·d_w, and Q5_0,
// Q5_1, Q4_K and Q5_K (qpack8Q5, qpackK8) their levels and minimums the same
// way.
const qpackStride = 320 // 40·L bytes, L = 8

// qpack8: the nb blocks of the eight rows at w, w+stride, …, w+7·stride
// (table index q: Q8_0 or Q4_0) repacked at dst, qpackStride bytes a block.
// With lanes 16 (qpackHalf16) it writes half of the sixteen-row layout of
// the ZMM kernel, 640 bytes a block; the eight rows it is given are rows 0–7
// of the group at dst, rows 8–15 at dst+32.
func qpack8(g *gen, q qtype, lanes int) {
	rows := qpackHead(g, q.name, lanes, "nb", 0)
	if q.name == "Q4_0" {
		g.i("VMOVDQU qShift4<>(SB), Y14")
		g.i("MOVL $0x0f0f0f0f, R13")
	} else {
		g.i("MOVL $0x80808080, R13")
	}
	g.i("VMOVD R13, X15")
	g.i("VPBROADCASTD X15, Y15")
	g.i("MOVL $0x41800000, R13") // 16.0: Q8_0's m_w = 16·d_w
	g.i("VMOVD R13, X13")
	g.i("XORQ AX, AX")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("loop:")
	for i, r := range rows { // the scales, through the F16 table
		g.i("MOVWLZX (%s)(AX*1), R13", r)
		if q.name == "Q4_0" {
			g.i("MOVL (R14)(R13*4), R13")
			g.i("MOVL R13, %d(DI)", 4*i)
			g.i("MOVL R13, %d(DI)", 4*lanes+4*i)
		} else {
			g.i("VMOVSS (R14)(R13*4), X12")
			g.i("VMOVSS X12, %d(DI)", 4*i)
			g.i("VMULSS X13, X12, X12")
			g.i("VMOVSS X12, %d(DI)", 4*lanes+4*i)
		}
	}
	// levels of row i in Y(base+i), element e in byte e
	levels := func(base int) {
		for i := 0; i < 4; i++ {
			y, r := base+i, rows[base+i]
			if q.name == "Q4_0" {
				g.i("VBROADCASTI128 2(%s)(AX*1), Y%d", r, y)
				g.i("VPSRLVD Y14, Y%d, Y%d", y, y)
				g.i("VPAND Y15, Y%d, Y%d", y, y)
			} else {
				g.i("VPXOR 2(%s)(AX*1), Y15, Y%d", r, y)
			}
		}
	}
	levels(0)
	levels(4)
	transposeStore(g, "DI", 8*lanes, 4*lanes)
	qpackTail(g, q.bb, 40*lanes)
}

// qpackHead emits the declaration and prologue of the AVX2 packer of dtype
// kind (qpack8<kind>AVX2, or qpackHalf16<kind>AVX2 with lanes 16) with a
// stack frame of frame bytes, its block count named cnt: DI dst, CX the
// count, R14 the F16 table, the eight rows in the registers it returns (R13
// is clobbered).
func qpackHead(g *gen, kind string, lanes int, cnt string, frame int) (rows []string) {
	name := "qpack8" + kind + "AVX2"
	if lanes == 16 {
		name = "qpackHalf16" + kind + "AVX2"
	}
	g.decl("//go:noescape\nfunc %s(dst *byte, w unsafe.Pointer, stride int, %s int)", name, cnt)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $%d-32", name, frame)
	g.i("MOVQ dst+0(FP), DI")
	g.i("MOVQ w+8(FP), R8")
	g.i("MOVQ stride+16(FP), R13")
	g.i("MOVQ %s+24(FP), CX", cnt)
	g.i("MOVQ ·f16Table(SB), R14")
	rows = []string{"R8", "R9", "R10", "R11", "R12", "BX", "DX", "SI"}
	for i := 1; i < 8; i++ {
		g.i("LEAQ (%s)(R13*1), %s", rows[i-1], rows[i])
	}
	return rows
}

// qpackTail ends a packer's loop: the rows advance by bb bytes and dst by
// out, then the epilogue.
func qpackTail(g *gen, bb, out int) {
	loopTail(g, fmt.Sprintf("ADDQ $%d, AX", bb), fmt.Sprintf("ADDQ $%d, DI", out))
}

// transposeStore stores the transpose of the 8×8 dwords in Y0..Y7 (row i
// in Y_i): dword i of the g-th 32 bytes is dword g of Y_i, the g-th 32 bytes
// at off + g·gstride(base). Y0–Y11 are clobbered.
func transposeStore(g *gen, base string, off, gstride int) {
	// four rows r..r+3 (dwords d0..d7) become u_k = [d_k of the four rows |
	// d_(k+4) of them] in place, through t..t+3
	transpose4 := func(r, t int) {
		g.i("VPUNPCKLDQ Y%d, Y%d, Y%d", r+1, r, t)
		g.i("VPUNPCKHDQ Y%d, Y%d, Y%d", r+1, r, t+1)
		g.i("VPUNPCKLDQ Y%d, Y%d, Y%d", r+3, r+2, t+2)
		g.i("VPUNPCKHDQ Y%d, Y%d, Y%d", r+3, r+2, t+3)
		g.i("VPUNPCKLQDQ Y%d, Y%d, Y%d", t+2, t, r)
		g.i("VPUNPCKHQDQ Y%d, Y%d, Y%d", t+2, t, r+1)
		g.i("VPUNPCKLQDQ Y%d, Y%d, Y%d", t+3, t+1, r+2)
		g.i("VPUNPCKHQDQ Y%d, Y%d, Y%d", t+3, t+1, r+3)
	}
	transpose4(0, 8)
	transpose4(4, 8)
	for k := 0; k < 4; k++ {
		g.i("VPERM2I128 $0x20, Y%d, Y%d, Y8", 4+k, k)
		g.i("VMOVDQU Y8, %d(%s)", off+gstride*k, base)
		g.i("VPERM2I128 $0x31, Y%d, Y%d, Y9", 4+k, k)
		g.i("VMOVDQU Y9, %d(%s)", off+gstride*(k+4), base)
	}
}

// qgemm8x4: for tokens j < 4 and rows i < 8 of the packed blocks at pw,
//
//	dst_j[i] = Σ_{b<nb} d_w[i][b]·d_x[j][b]·Σ_e u[i][b][e]·q_x[j][b][e] − m_w[i][b]·c[j][b]
//
// with token j's x as quantizeX leaves it at xq + j·xstride (64 bytes a
// block: 32 int8 q_x, then d_x eight times), its sums c = 8·d_x·Σ q_x at
// xc + j·cstride (float32, one a block: quantizeX's xd[nb:]) and its
// sums stored at dst + j·dstride. It prefetches the nb cache lines from pf
// on, a line a block: the caller's next rows to pack, so that qpack reads
// them from cache (streaming eight rows from memory, it ran at 10 GB/s on
// Zen 5, a third of a plain read). Each row-token pair's integer sum runs
// in two halves (groups g even and odd): eight independent chains of four
// products a block keep the multiplier busy.
//
// vnni selects the integer product as qdotRows does: "" VPMADDUBSW then
// VPMADDWD by ones (only for u·x pairs within int16: Q4_0's u ≤ 15), "AVXVNNI"
// the VEX VPDPBUSD, "AVX512VNNI" the EVEX one with x broadcast from memory.
// With lanes 16 (AVX512VNNI only) it is qgemm16x4: sixteen rows of the
// packed layout of qpackHalf16 in ZMM registers, 64 products an instruction.
//
// With vnni "Q8_0" (qgemm8x4Q8_0AVX2), the AVX2 form for Q8_0, whose
// levels w + 128 VPMADDUBSW cannot take (255·127·2 overflows int16): each
// group's levels get their sign bit back (w, signed), the token's four x are
// multiplied by sign(w) (VPSIGNB) and meet |w| (VPABSB, ≤ 128; |x| ≤ 127, so
// a pair is at most 32512), and the sums are Σ w·q_x with no m_w term. Four
// accumulators (one a token: VPADDD's latency is one cycle) leave Y4 for |w|.
func qgemm8x4(g *gen, vnni string, lanes int) {
	name := "qgemm8x4AVX2"
	q8 := vnni == "Q8_0"
	if q8 {
		name, vnni = "qgemm8x4Q8_0AVX2", ""
	} else if vnni != "" {
		name = "qgemm8x4" + vnni
	}
	v := "Y"
	if lanes == 16 {
		if vnni != "AVX512VNNI" {
			panic("qgemm16x4 is AVX512VNNI only")
		}
		name, v = "qgemm16x4"+vnni, "Z"
	}
	g.decl("//go:noescape\nfunc %s(pw *byte, xq *int8, xstride int, xc *float32, cstride int, nb int, dst *float32, dstride int, pf unsafe.Pointer)", name)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $0-72", name)
	g.i("MOVQ pw+0(FP), R8")
	g.i("MOVQ pf+64(FP), R13")
	g.i("MOVQ xq+8(FP), SI")
	g.i("MOVQ xstride+16(FP), R9")
	g.i("MOVQ xc+24(FP), DX")
	g.i("MOVQ cstride+32(FP), R11")
	g.i("MOVQ nb+40(FP), CX")
	g.i("LEAQ (R9)(R9*2), R10")
	g.i("LEAQ (R11)(R11*2), R12")
	xm := func(j, off int) string { // token j's x at offset off of the block
		return fmt.Sprintf("%d%s", off, []string{"(SI)", "(SI)(R9*1)", "(SI)(R9*2)", "(SI)(R10*1)"}[j])
	}
	cm := []string{"(DX)", "(DX)(R11*1)", "(DX)(R11*2)", "(DX)(R12*1)"}
	for j := 8; j < 12; j++ {
		g.i("VPXOR%[1]s %[2]s%[3]d, %[2]s%[3]d, %[2]s%[3]d", map[string]string{"Y": "", "Z": "D"}[v], v, j)
	}
	if vnni == "" {
		g.i("VPCMPEQW Y15, Y15, Y15")
		g.i("VPSRLW $15, Y15, Y15") // sixteen int16 ones
	}
	g.i("TESTQ CX, CX")
	g.i("JEQ store")
	g.p("loop:")
	g.i("PREFETCHT0 (R13)")
	g.i("ADDQ $64, R13")
	nacc := 8
	if q8 {
		nacc = 4
	}
	for k := 0; k < nacc; k++ {
		if v == "Z" {
			g.i("VPXORD Z%d, Z%d, Z%d", k, k, k)
		} else {
			g.i("VPXOR Y%d, Y%d, Y%d", k, k, k)
		}
	}
	for grp := 0; grp < 8; grp++ {
		if v == "Z" {
			g.i("VMOVDQU32 %d(R8), Z12", 4*lanes*(grp+2))
		} else {
			g.i("VMOVDQU %d(R8), Y12", 4*lanes*(grp+2))
		}
		if q8 {
			g.i("VPXOR qSign<>(SB), Y12, Y12") // w
			g.i("VPABSB Y12, Y4")              // |w|
		}
		for j := 0; j < 4; j++ {
			acc := j + 4*(grp&1)
			switch {
			case q8:
				g.i("VPBROADCASTD %s, Y13", xm(j, 4*grp))
				g.i("VPSIGNB Y12, Y13, Y13") // x·sign(w)
				g.i("VPMADDUBSW Y13, Y4, Y14")
				g.i("VPMADDWD Y15, Y14, Y14")
				g.i("VPADDD Y14, Y%d, Y%d", j, j)
			case vnni == "":
				g.i("VPBROADCASTD %s, Y13", xm(j, 4*grp))
				g.i("VPMADDUBSW Y13, Y12, Y14")
				g.i("VPMADDWD Y15, Y14, Y14")
				g.i("VPADDD Y14, Y%d, Y%d", acc, acc)
			case vnni == "AVXVNNI":
				g.i("VPBROADCASTD %s, Y13", xm(j, 4*grp))
				g.i(vpdpbusdVEX(acc, 12, 13))
			case vnni == "AVX512VNNI":
				g.i("VPDPBUSD.BCST %[1]s, %[2]s12, %[2]s%[3]d", xm(j, 4*grp), v, acc)
			default:
				panic("qgemm8x4: vnni " + vnni)
			}
		}
	}
	for j := 0; j < 4; j++ {
		if !q8 {
			g.i("VPADDD %[1]s%[2]d, %[1]s%[3]d, %[1]s%[3]d", v, 4+j, j)
		}
		g.i("VCVTDQ2PS %[1]s%[2]d, %[1]s%[2]d", v, j)
		if v == "Z" { // d_x from its first copy
			g.i("VMULPS.BCST %s, Z%d, Z%d", xm(j, 32), j, j)
		} else {
			g.i("VMULPS %s, Y%d, Y%d", xm(j, 32), j, j)
		}
		g.i("VFMADD231PS (R8), %[1]s%[2]d, %[1]s%[3]d", v, j, 8+j) // · d_w
		if !q8 {
			g.i("VBROADCASTSS %s, %s13", cm[j], v)
			g.i("VFNMADD231PS %d(R8), %[2]s13, %[2]s%[3]d", 4*lanes, v, 8+j) // − m_w·c
		}
	}
	g.i("ADDQ $%d, R8", 40*lanes)
	g.i("ADDQ $64, SI")
	g.i("ADDQ $4, DX")
	g.i("DECQ CX")
	g.i("JNE loop")
	g.p("store:")
	g.i("MOVQ dst+48(FP), DI")
	g.i("MOVQ dstride+56(FP), BX")
	g.i("LEAQ (BX)(BX*2), R13")
	for j, m := range []string{"(DI)", "(DI)(BX*1)", "(DI)(BX*2)", "(DI)(R13*1)"} {
		g.i("VMOVUPS %s%d, %s", v, 8+j, m)
	}
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}

// ---------------------------------------------------------------- arm64 ---

// The NEON forms pack Q8_0 and Q4_0 in the same layout with signed levels
// (Q4_0: q−8; Q8_0: w) and m_w = 0, since SDOT multiplies signed by signed;
// the kernel takes any packed block (the portable packers' unsigned levels
// fit SDOT's signed bytes: at most 63).

// trn is TRN1 (two false) or TRN2 Vd, Vn, Vm on 32-bit (d64 false) or
// 64-bit lanes: the even (TRN1) or odd (TRN2) lanes of Vn and Vm
// interleaved.
func trn(two, d64 bool, d, n, m int) string {
	enc, asm := 0x4E802800, "TRN1 V%d.4S, V%d.4S, V%d.4S"
	if d64 {
		enc, asm = 0x4EC02800, "TRN1 V%d.2D, V%d.2D, V%d.2D"
	}
	if two {
		enc |= 0x4000
		asm = "TRN2" + asm[4:]
	}
	return word(enc|m<<16|n<<5|d, asm, d, n, m)
}

// sdotLane is SDOT Vd.4S, Vn.16B, Vm.4B[i]: each int32 lane of Vd adds the
// four products of its bytes of Vn with bytes 4i..4i+3 of Vm.
func sdotLane(d, n, m, i int) string {
	return word(0x4F80E000|(i&1)<<21|m<<16|(i>>1)<<11|n<<5|d, "SDOT V%d.4S, V%d.16B, V%d.4B[%d]", d, n, m, i)
}

// neonQpack8 is qpack8 for NEON: rows in R4..R11, levels of row i in
// V(2i) (elements 0–15, groups 0–3) and V(2i+1) (16–31, groups 4–7); each
// quarter (four rows, four groups) transposed by TRN1/TRN2.
func neonQpack8(g *gen, q qtype) {
	name := "qpack8" + q.name + "NEON"
	neonText(g, name, 32, "(dst *byte, w unsafe.Pointer, stride int, nb int)")
	g.i("MOVD dst+0(FP), R0")
	g.i("MOVD w+8(FP), R4")
	g.i("MOVD stride+16(FP), R2")
	g.i("MOVD nb+24(FP), R3")
	neonQConsts(g) // R14 the F16 table, V30 bytes 0x0F, V29 bytes 8
	for i := 5; i < 12; i++ {
		g.i("ADD R2, R%d, R%d", i-1, i)
	}
	g.i("CBZ R3, done")
	g.p("blk:")
	for i := 0; i < 8; i++ {
		r := 4 + i
		g.i("MOVHU (R%d), R15", r)
		g.i("MOVWU (R14)(R15<<2), R16")
		g.i("MOVW R16, %d(R0)", 4*i)
		g.i("MOVW ZR, %d(R0)", 32+4*i) // m_w
		g.i("ADD $2, R%d, R15", r)
		if q.name == "Q8_0" {
			g.i("VLD1 (R15), [V%d.B16, V%d.B16]", 2*i, 2*i+1)
		} else {
			g.i("VLD1 (R15), [V%d.B16]", 2*i)
			g.i("VUSHR $4, V%d.B16, V%d.B16", 2*i, 2*i+1)
			g.i("VAND V30.B16, V%d.B16, V%d.B16", 2*i, 2*i)
			g.i("VSUB V29.B16, V%d.B16, V%d.B16", 2*i, 2*i)
			g.i("VSUB V29.B16, V%d.B16, V%d.B16", 2*i+1, 2*i+1)
		}
		g.i("ADD $%d, R%d, R%d", q.bb, r, r)
	}
	// quarter: rows r..r+3 (first 0 or 4), half h (groups 4h..4h+3):
	// row i's register is V(2i+h); the four outputs go to V16..V19
	// (through V20..V23), group 4h+k's rows r..r+3 in V(16+k).
	for _, h := range []int{0, 1} {
		for _, first := range []int{0, 4} {
			v := func(i int) int { return 2*(first+i) + h }
			g.i(trn(false, false, 20, v(0), v(1)))
			g.i(trn(true, false, 21, v(0), v(1)))
			g.i(trn(false, false, 22, v(2), v(3)))
			g.i(trn(true, false, 23, v(2), v(3)))
			g.i(trn(false, true, 16, 20, 22)) // group 4h
			g.i(trn(false, true, 17, 21, 23)) // 4h+1
			g.i(trn(true, true, 18, 20, 22))  // 4h+2
			g.i(trn(true, true, 19, 21, 23))  // 4h+3
			for k := 0; k < 4; k++ {
				g.i("FMOVQ F%d, %d(R0)", 16+k, 64+32*(4*h+k)+4*first)
			}
		}
	}
	g.i("ADD $%d, R0, R0", qpackStride)
	g.i("SUBS $1, R3, R3")
	g.i("BNE blk")
	g.p("done:")
	g.i("RET")
	g.p("")
}

// neonQgemm8x4 is qgemm8x4 by SDOT: token j's 32 x bytes in V(2j), V(2j+1),
// rows 0–3 and 4–7 of token j summed in V(8+2j), V(9+2j) (int32), then in
// float32 in V(16+2j), V(17+2j); a group's weights in V24, V25, the
// block's d_w in V26, V27 and m_w in V29, V30, d_x and c broadcast in V28
// and V31.
func neonQgemm8x4(g *gen) {
	name := "qgemm8x4DOTPROD"
	neonText(g, name, 72, "(pw *byte, xq *int8, xstride int, xc *float32, cstride int, nb int, dst *float32, dstride int, pf unsafe.Pointer)")
	g.i("MOVD pw+0(FP), R0")
	g.i("MOVD xq+8(FP), R1")
	g.i("MOVD xstride+16(FP), R9")
	g.i("MOVD nb+40(FP), R5")
	g.i("MOVD pf+64(FP), R6")
	g.i("MOVD xc+24(FP), R10")
	g.i("MOVD cstride+32(FP), R15")
	for j := 2; j < 5; j++ {
		g.i("ADD R9, R%d, R%d", j-1, j)
		g.i("ADD R15, R%d, R%d", 8+j, 9+j) // token j−1's c
	}
	zero(g, 16, 17, 18, 19, 20, 21, 22, 23)
	g.i("CBZ R5, store")
	g.p("blk:")
	g.i("PRFM (R6), PLDL1KEEP")
	g.i("ADD $64, R6, R6")
	for j := 0; j < 4; j++ {
		g.i("VLD1 (R%d), [V%d.B16, V%d.B16]", 1+j, 2*j, 2*j+1)
	}
	zero(g, 8, 9, 10, 11, 12, 13, 14, 15)
	g.i("VLD1.P 32(R0), [V26.S4, V27.S4]")
	g.i("VLD1.P 32(R0), [V29.S4, V30.S4]")
	for grp := 0; grp < 8; grp++ {
		g.i("VLD1.P 32(R0), [V24.B16, V25.B16]")
		for j := 0; j < 4; j++ {
			g.i(sdotLane(8+2*j, 24, 2*j+grp/4, grp%4))
			g.i(sdotLane(9+2*j, 25, 2*j+grp/4, grp%4))
		}
	}
	for j := 0; j < 4; j++ {
		g.i("FMOVS 32(R%d), F28", 1+j)
		g.i("VDUP V28.S[0], V28.S4")
		g.i(scvtfV(8+2*j, 8+2*j))
		g.i(scvtfV(9+2*j, 9+2*j))
		g.i(fmulV(8+2*j, 8+2*j, 28))
		g.i(fmulV(9+2*j, 9+2*j, 28))
		g.i("VFMLA V26.S4, V%d.S4, V%d.S4", 8+2*j, 16+2*j)
		g.i("VFMLA V27.S4, V%d.S4, V%d.S4", 9+2*j, 17+2*j)
		g.i("FMOVS.P 4(R%d), F31", 10+j)
		g.i("VDUP V31.S[0], V31.S4")
		g.i("VFMLS V29.S4, V31.S4, V%d.S4", 16+2*j)
		g.i("VFMLS V30.S4, V31.S4, V%d.S4", 17+2*j)
		g.i("ADD $64, R%d, R%d", 1+j, 1+j)
	}
	g.i("SUBS $1, R5, R5")
	g.i("BNE blk")
	g.p("store:")
	g.i("MOVD dst+48(FP), R7")
	g.i("MOVD dstride+56(FP), R8")
	for j := 0; j < 4; j++ {
		g.i("VST1 [V%d.S4, V%d.S4], (R7)", 16+2*j, 17+2*j)
		if j < 3 {
			g.i("ADD R8, R7, R7")
		}
	}
	g.i("RET")
	g.p("")
}

// qpackK8 is qpack8 for Q4_K (five false) or Q5_K super-blocks: nsb
// super-blocks of the eight rows, each eight packed blocks (its sub-blocks
// j): d_w = d·sc_j, m_w = dmin·m_j/8 (k4Scales, staged on the stack by row
// and transposed), the levels of sub-block j the low (j even) or high
// nibbles of qs[32·(j/2):], Q5_K's bit j of qh[l] on top as 16. With lanes
// 16 (qpackKHalf16) it writes half of the sixteen-row layout, as qpack8.
func qpackK8(g *gen, five bool, lanes int) {
	kind, bb, qs := "Q4_K", 144, 16
	if five {
		kind, bb, qs = "Q5_K", 176, 48
	}
	rows := qpackHead(g, kind, lanes, "nsb", 512)
	g.i("MOVL $0x0f0f0f0f, R13")
	g.i("VMOVD R13, X13")
	g.i("VPBROADCASTD X13, Y13") // bytes 0x0F
	g.i("VMOVDQU kqMask3f<>(SB), X15")
	if five {
		g.i("MOVL $0x01010101, R13")
		g.i("VMOVD R13, X14")
		g.i("VPBROADCASTD X14, Y14") // bytes 1
	}
	g.i("XORQ AX, AX")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("loop:")
	for i, r := range rows { // d·sc_j and dmin·m_j/8 of row i, at 64i(SP) and 64i+32(SP)
		k4Scales(g, r)
		g.i("MOVWLZX (%s)(AX*1), R13", r)
		g.i("VBROADCASTSS (R14)(R13*4), Y9")
		g.i("MOVWLZX 2(%s)(AX*1), R13", r)
		g.i("VBROADCASTSS (R14)(R13*4), Y10")
		g.i("MOVL $0x3e000000, R13") // 1/8
		g.i("VMOVD R13, X11")
		g.i("VBROADCASTSS X11, Y11")
		g.i("VMULPS Y11, Y10, Y10")
		g.i("VCVTDQ2PS Y7, Y7")
		g.i("VMULPS Y9, Y7, Y7")
		g.i("VMOVUPS Y7, %d(SP)", 64*i)
		g.i("VCVTDQ2PS Y8, Y8")
		g.i("VMULPS Y10, Y8, Y8")
		g.i("VMOVUPS Y8, %d(SP)", 64*i+32)
	}
	for h := 0; h < 2; h++ { // d_w, then m_w: sub-block j's at block j
		for i := 0; i < 8; i++ {
			g.i("VMOVUPS %d(SP), Y%d", 64*i+32*h, i)
		}
		transposeStore(g, "DI", 4*lanes*h, 40*lanes)
	}
	for j := 0; j < 8; j++ {
		for i, r := range rows {
			g.i("VMOVDQU %d(%s)(AX*1), Y%d", qs+32*(j/2), r, i)
			if j%2 == 1 {
				g.i("VPSRLW $4, Y%d, Y%d", i, i)
			}
			g.i("VPAND Y13, Y%d, Y%d", i, i)
			if five {
				g.i("VMOVDQU 16(%s)(AX*1), Y12", r)
				if j > 0 {
					g.i("VPSRLW $%d, Y12, Y12", j)
				}
				g.i("VPAND Y14, Y12, Y12")
				g.i("VPSLLW $4, Y12, Y12")
				g.i("VPOR Y12, Y%d, Y%d", i, i)
			}
		}
		transposeStore(g, "DI", 40*lanes*j+8*lanes, 4*lanes)
	}
	qpackTail(g, bb, 8*40*lanes)
}

// qpack8Q5 is qpack8 for Q5_0 (d, qh, nibbles; weight (q−16)·d: m_w = 2·d)
// and Q5_1 (d, m, qh, nibbles; weight q·d + m: m_w = −m/8): each row's
// levels, the nibbles with the fifth bits of qh as 16 (q5Bits' expansion,
// its constants from memory), staged on the stack, then transposed.
func qpack8Q5(g *gen, q qtype, lanes int) {
	rows := qpackHead(g, q.name, lanes, "nb", 256)
	g.i("VPCMPEQB Y12, Y12, Y12") // all ones
	g.i("MOVL $0x0f0f0f0f, R13")
	g.i("VMOVD R13, X13")
	g.i("VPBROADCASTD X13, Y13")
	g.i("VMOVDQU qShift4<>(SB), Y14")
	g.i("MOVL $0x10101010, R13")
	g.i("VMOVD R13, X15")
	g.i("VPBROADCASTD X15, Y15")
	g.i("XORQ AX, AX")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("loop:")
	for i, r := range rows {
		g.i("MOVWLZX (%s)(AX*1), R13", r)
		g.i("VMOVSS (R14)(R13*4), X8")
		g.i("VMOVSS X8, %d(DI)", 4*i)
		if q.min {
			g.i("MOVWLZX 2(%s)(AX*1), R13", r)
			g.i("VMOVSS (R14)(R13*4), X9")
			g.i("MOVL $0xbe000000, R13") // −1/8
			g.i("VMOVD R13, X10")
			g.i("VMULSS X10, X9, X9")
		} else {
			g.i("VADDSS X8, X8, X9")
		}
		g.i("VMOVSS X9, %d(DI)", 4*lanes+4*i)
		g.i("VBROADCASTI128 %d(%s)(AX*1), Y0", q.qs, r)
		g.i("VPSRLVD Y14, Y0, Y0")
		g.i("VPAND Y13, Y0, Y0")
		g.i("VPBROADCASTD %d(%s)(AX*1), Y1", q.qh, r)
		g.i("VPSHUFB q5Shuf<>(SB), Y1, Y1")
		g.i("VPOR q5Bits<>(SB), Y1, Y1")
		g.i("VPCMPEQB Y12, Y1, Y1")
		g.i("VPAND Y15, Y1, Y1")
		g.i("VPOR Y1, Y0, Y0")
		g.i("VMOVDQU Y0, %d(SP)", 32*i)
	}
	for i := 0; i < 8; i++ {
		g.i("VMOVDQU %d(SP), Y%d", 32*i, i)
	}
	transposeStore(g, "DI", 8*lanes, 4*lanes)
	qpackTail(g, q.bb, 40*lanes)
}
