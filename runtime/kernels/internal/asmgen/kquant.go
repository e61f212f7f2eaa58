package main

import "fmt"

// K-quant kernels (spec/sinf.md §5.3), generated into their own files
// (kquant_amd64.s, decl_kquant_amd64.go) beside the Q8_0/Q4_0 ones.

func kquantAMD64(g *gen) {
	g.p("DATA kqMask3f<>+0(SB)/8, $0x3f3f3f3f3f3f3f3f")
	g.p("DATA kqMask3f<>+8(SB)/8, $0x3f3f3f3f3f3f3f3f")
	g.p("GLOBL kqMask3f<>(SB), RODATA|NOPTR, $16")
	g.p("DATA kqMask03<>+0(SB)/8, $0x0303030303030303")
	g.p("DATA kqMask03<>+8(SB)/8, $0x0303030303030303")
	g.p("GLOBL kqMask03<>(SB), RODATA|NOPTR, $16")
	// kqBcastW: for j < 8, 32 bytes at 32j that make VPSHUFB copy int16 j of
	// each 128-bit lane into all eight of its words.
	for j := 0; j < 8; j++ {
		w := uint64(2*j) | uint64(2*j+1)<<8
		w |= w << 16
		w |= w << 32
		for k := 0; k < 4; k++ {
			g.p("DATA kqBcastW<>+%d(SB)/8, $0x%016x", 32*j+8*k, w)
		}
	}
	g.p("GLOBL kqBcastW<>(SB), RODATA|NOPTR, $256")
	// kqBcastB: for j < 8, 32 bytes at 32j that make VPSHUFB copy byte
	// kqScaleByte(j) of each 128-bit lane, zero-extended, into all eight of
	// its words (k4ScalesGPR's scale bytes); kqMins: the VPSHUFB control
	// that gathers its eight minimum bytes into bytes 0–7.
	for j := 0; j < 8; j++ {
		w := uint64(kqScaleByte(j)) | 0x80<<8
		w *= 0x0001000100010001
		for k := 0; k < 4; k++ {
			g.p("DATA kqBcastB<>+%d(SB)/8, $0x%016x", 32*j+8*k, w)
		}
	}
	g.p("GLOBL kqBcastB<>(SB), RODATA|NOPTR, $256")
	// kqBcastZ: for xb < 8 with xb&2 == 0 (sub-blocks xb and xb + 2 of
	// qdotRowsQ5KAVX512's halves), 64 bytes at 64xb that make VPSHUFB copy
	// byte kqScaleByte(xb) of lanes 0–1 and kqScaleByte(xb+2) of lanes 2–3,
	// zero-extended, into all their words.
	for xb := 0; xb < 8; xb++ {
		if xb&2 != 0 {
			continue
		}
		for lane := 0; lane < 4; lane++ {
			w := uint64(kqScaleByte(xb+lane/2*2)) | 0x80<<8
			w *= 0x0001000100010001
			for k := 0; k < 2; k++ {
				g.p("DATA kqBcastZ<>+%d(SB)/8, $0x%016x", 64*xb+16*lane+8*k, w)
			}
		}
	}
	g.p("GLOBL kqBcastZ<>(SB), RODATA|NOPTR, $384")
	var mins uint64
	for j := 0; j < 8; j++ {
		mins |= uint64(kqScaleByte(j)+4) << (8 * j)
	}
	g.p("DATA kqMins<>+0(SB)/8, $0x%016x", mins)
	g.p("DATA kqMins<>+8(SB)/8, $0x%016x", uint64(0x8080808080808080))
	g.p("GLOBL kqMins<>(SB), RODATA|NOPTR, $16")
	g.p("DATA kqMask0f<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f")
	g.p("GLOBL kqMask0f<>(SB), RODATA|NOPTR, $8")
	// kq6High: for k < 4, bytes 0x03 << 2k (32 of them at 32k): bits 2k, 2k+1
	// of Q6_K's qh. kq6Scale: for k < 4, the VPSHUFB control that copies
	// int16 2k of the low lane and 2k + 1 of the high lane across the lane.
	for k := 0; k < 4; k++ {
		m := uint64(0x03<<(2*k)) * 0x0101010101010101
		lo := uint64(4*k) | uint64(4*k+1)<<8
		hi := lo + 0x0202
		lo, hi = lo*0x0001000100010001, hi*0x0001000100010001
		for q, v := range []uint64{m, m, m, m} {
			g.p("DATA kq6High<>+%d(SB)/8, $0x%016x", 32*k+8*q, v)
		}
		for q, v := range []uint64{lo, lo, hi, hi} {
			g.p("DATA kq6Scale<>+%d(SB)/8, $0x%016x", 32*k+8*q, v)
		}
	}
	g.p("GLOBL kq6High<>(SB), RODATA|NOPTR, $128")
	g.p("GLOBL kq6Scale<>(SB), RODATA|NOPTR, $128")
	g.p("")
	qdotRowsK4AVX2(g, false)
	qdotRowsK4AVX2(g, true)
	qdotRowsQ5KAVX512(g, false)
	qdotRowsQ5KAVX512(g, true)
	qdotRowsQ6KAVX2(g)
	for T := 2; T <= maxBatchT; T++ {
		qdotRowsBQ6KAVX2(g, T)
	}
	for _, x := range []x86{{name: "AVX2", vw: 8, r: "Y"}, {name: "AVX512", vw: 16, r: "Z"}} {
		qaxpy4Q4KAVX2(g, x, false)
		qaxpy4Q4KAVX2(g, x, true)
		qaxpy4Q6KAVX2(g, x)
	}
	kaccumK4AVX2(g, false)
	kaccumK4AVX2(g, true)
	kaccumQ6KAVX2(g)
	for _, five := range []bool{false, true} {
		qpackK8(g, five, 8)
		qpackK8(g, five, 16)
	}
}

// qdotRowsQ4KAVX2: dst[j] = the dot of row r (nb Q4_K super-blocks of 144
// bytes: F16 d, F16 dmin, 12 bytes of 6-bit scales and minimums, 128 bytes
// of nibbles) with x as quantizeXK leaves it (64 bytes per x block of 32: the
// int8 levels, then d_x eight times, one d_x for the eight blocks of a
// super-block; at xd[8nb + b] the block sum 8·d_x·Σq), rows as in qdotRows.
// Per super-block, the scales and minimums are unpacked in general registers
// (k4ScalesGPR: the vector ports are what the dot waits on; unpacking them in
// vector registers as k4Scales does took 18 vector instructions a super-block
// where this takes 6: a 1024 × 2048 MatVec from L2/L3, 1 thread, AMD EPYC
// Zen 3, 12.5–13.8 → 17.1–19.4 GB/s with quantizeXK's AVX2 form), the scale
// bytes held in both lanes of a register and copied across it per sub-block
// as int16 by VPSHUFB (kqBcastB; broadcasting each from a copy on the stack
// was a store-forwarded load per 32 weights: BenchmarkRawSets' Q4_K dot 11.8
// → 9.5 µs, AMD EPYC Zen 3), and the minimum term
// Σ_j dmin·m_j·xsum_j goes into its own accumulator; per group of 64 weights
// the low nibbles meet x block 2g and the high ones 2g+1 through VPMADDUBSW,
// then VPMADDWD by sc_j sums each pair into int32 lanes times the
// sub-block's scale, so the super-block's products are summed in integers
// (exactly) and converted once, times d·d_x, as GGML's vec_dot_q4_K_q8_K
// does. dst = Σ − (minimum term)/8. With five, the Q5_K form (176-byte
// blocks: qh[32] after the scales, then the nibbles): bit 2g of qh[l] is
// bit 4 of the low nibble's weight l of group g, bit 2g+1 the high one's.
func qdotRowsK4AVX2(g *gen, five bool) {
	name, bb, qs := "qdotRowsQ4_KAVX2", 144, 16
	if five {
		name, bb, qs = "qdotRowsQ5_KAVX2", 176, 48
	}
	k4DotOpen(g, name, bb, func() {
		qMasks(g, "R13") // Y13: bytes 0x0F
		if five {
			g.i("MOVL $0x01010101, R13")
			g.i("VMOVD R13, X12")
			g.i("VPBROADCASTD X12, Y12") // bytes 1
		}
	})
	g.i("VPXOR Y14, Y14, Y14") // Σ_j sc_j·Σ q·x, int32 lanes
	if five {
		g.i("VMOVDQU 16(R8)(AX*1), Y10") // qh
	}
	for gr := 0; gr < 4; gr++ {
		g.i("VMOVDQU %d(R8)(AX*1), Y2", qs+32*gr)
		g.i("VPAND Y13, Y2, Y3")
		g.i("VPSRLW $4, Y2, Y4")
		g.i("VPAND Y13, Y4, Y4")
		if five {
			for h, y := range []int{3, 4} {
				if sh := 2*gr + h; sh > 0 {
					g.i("VPSRLW $%d, Y10, Y11", sh)
					g.i("VPAND Y12, Y11, Y11")
				} else {
					g.i("VPAND Y12, Y10, Y11")
				}
				g.i("VPSLLW $4, Y11, Y11")
				g.i("VPOR Y11, Y%d, Y%d", y, y)
			}
		}
		for h, y := range []int{3, 4} {
			xb := 2*gr + h
			g.i("VPMADDUBSW %d(SI), Y%d, Y%d", 64*xb, y, y)
			g.i("VPSHUFB kqBcastB<>+%d(SB), Y7, Y9", 32*xb)
			g.i("VPMADDWD Y9, Y%d, Y%d", y, y) // · sc_j
			g.i("VPADDD Y%d, Y14, Y14", y)
		}
	}
	k4DotClose(g, bb)
}

// qdotRowsQ5KAVX512 is qdotRowsK4AVX2's Q5_K form on 512-bit registers: per
// pair p of 64-weight groups one load of the super-block's 64 nibble bytes at
// 48 + 64p gives sub-blocks 4p and 4p + 2 (low nibbles, the two 256-bit
// halves) and 4p + 1, 4p + 3 (high ones), each half meeting its own x block
// (two 32-byte loads, the second inserted as the upper half) and each half's
// int16 pair sums multiplied by its own scale (kqBcastZ copies the scale byte
// of the low half to the words of lanes 0–1 and the other's to lanes 2–3).
// The fifth bits (qh) are put in once per super-block as [qh | qh >> 2], so
// that one shift and one VPTERNLOGD set bit 4 of every weight of a half.
// vnni: VPDPWSSD multiplies by the scales and adds in one instruction
// (AVX512-VNNI), else VPMADDWD and VPADDD. The int32 sums are folded to 256
// bits once per super-block and scaled as qdotRowsK4AVX2 does (the same
// integers, so the result differs from it by the order of float32 additions
// only).
//
// Measured against the AVX2 form on 128 rows of 2048 in L2
// (BenchmarkRawSets, 2-vCPU Intel Xeon with AVX512-VNNI, 4 runs each):
// Q5_K 9.1–9.5 → 8.0–8.3 µs (VNNI), 8.4–8.7 (without). Q4_K keeps the AVX2
// form in the AVX-512 sets: the same 512-bit form took 6.6–7.5 µs against
// 6.8–6.9 (without its fifth bits the two x inserts and the per-super-block
// scale and row work weigh more than the halved multiplies; with x laid out
// so that no insert is needed it measured 5.9–6.3, a relayout of the
// K-quants' x not made for that).
func qdotRowsQ5KAVX512(g *gen, vnni bool) {
	const bb, qs = 176, 48
	name := "qdotRowsQ5_KAVX512"
	if vnni {
		name += "VNNI"
	}
	k4DotOpen(g, name, bb, func() {
		g.i("MOVL $0x0f0f0f0f, R13")
		g.i("VPBROADCASTD R13, Z13") // bytes 0x0F
		g.i("MOVL $0x10101010, R13")
		g.i("VPBROADCASTD R13, Z12") // bytes 0x10
	})
	g.i("VSHUFI32X4 $0, Z7, Z7, Z7") // the scale bytes in all four lanes
	g.i("VPXORQ Z14, Z14, Z14")      // Σ_j sc_j·Σ q·x, int32 lanes
	g.i("VMOVDQU 16(R8)(AX*1), Y10") // qh
	g.i("VPSRLW $2, Y10, Y11")
	g.i("VINSERTI64X4 $1, Y11, Z10, Z10") // [qh | qh >> 2]
	for p := 0; p < 2; p++ {
		g.i("VMOVDQU64 %d(R8)(AX*1), Z2", qs+64*p)
		g.i("VPANDQ Z13, Z2, Z3")
		g.i("VPSRLW $4, Z2, Z4")
		g.i("VPANDQ Z13, Z4, Z4")
		for h, z := range []int{3, 4} {
			// bit 4p + h of qh (low half; 4p + 2 + h of the high half, two
			// places down in [qh | qh >> 2]) to bit 4
			switch s := 4*p + h; {
			case s < 4:
				g.i("VPSLLW $%d, Z10, Z11", 4-s)
			case s > 4:
				g.i("VPSRLW $%d, Z10, Z11", s-4)
			default:
				g.i("VMOVDQA64 Z10, Z11")
			}
			g.i("VPTERNLOGD $0xf8, Z12, Z11, Z%d", z) // z | (t & 0x10)
			xb := 4*p + h                             // x blocks xb (low half) and xb + 2 (high half)
			g.i("VMOVDQU %d(SI), Y9", 64*xb)
			g.i("VINSERTI64X4 $1, %d(SI), Z9, Z9", 64*(xb+2))
			g.i("VPMADDUBSW Z9, Z%d, Z%d", z, z)
			g.i("VPSHUFB kqBcastZ<>+%d(SB), Z7, Z9", 64*xb)
			if vnni {
				g.i("VPDPWSSD Z9, Z%d, Z14", z) // · sc_j, summed
			} else {
				g.i("VPMADDWD Z9, Z%d, Z%d", z, z) // · sc_j
				g.i("VPADDD Z%d, Z14, Z14", z)
			}
		}
	}
	g.i("VEXTRACTI64X4 $1, Z14, Y15")
	g.i("VPADDD Y15, Y14, Y14")
	k4DotClose(g, bb)
}

// kDotHead emits the declaration and prologue of a K-quant row dot with
// qdotRows' arguments, up to its first row (x86RowStart): R8 w, R9 stride,
// R12 idx, BX m, DI dst, R10 pf, R14 the F16 table; masks sets the kernel's
// constant registers.
func kDotHead(g *gen, name string, masks func()) {
	g.decl("//go:noescape\nfunc %s(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int)", name)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $0-72", name)
	g.i("MOVQ w+0(FP), R8")
	g.i("MOVQ stride+8(FP), R9")
	g.i("MOVQ idx+16(FP), R12")
	g.i("MOVQ m+48(FP), BX")
	g.i("MOVQ dst+56(FP), DI")
	g.i("MOVQ pf+64(FP), R10")
	g.i("MOVQ ·f16Table(SB), R14")
	masks()
	g.i("TESTQ BX, BX")
	g.i("JEQ done")
	x86RowStart(g, "pf+64(FP)")
}

// k4DotOpen emits the declaration and prologue of a Q4_K / Q5_K row dot
// (qdotRows' arguments; masks sets the kernel's constant registers) and the
// head of its super-block loop (bb bytes a block): the prefetch, d in Y5,
// the scales (k4ScalesGPR) and the minimum term added to Y1. Registers as
// qdotRowsK4AVX2 documents; Y0 and Y1 are the row's sums.
func k4DotOpen(g *gen, name string, bb int, masks func()) {
	kDotHead(g, name, masks)
	g.i("MOVQ xq+24(FP), SI")
	g.i("MOVQ xd+32(FP), R15")
	g.i("MOVQ nb+40(FP), CX")
	g.i("MOVQ CX, R13")
	g.i("SHLQ $5, R13")
	g.i("ADDQ R13, R15") // R15: the x block sums, 8 per super-block
	g.i("XORQ AX, AX")
	g.i("VXORPS Y0, Y0, Y0")
	g.i("VXORPS Y1, Y1, Y1")
	g.i("TESTQ CX, CX")
	g.i("JEQ sum")
	g.p("block:")
	for off := 0; off < bb; off += 64 {
		g.i("PREFETCHT0 %d(R11)(AX*1)", off)
	}
	g.i("MOVWLZX (R8)(AX*1), R13")
	g.i("VBROADCASTSS (R14)(R13*4), Y5") // d
	g.i("MOVWLZX 2(R8)(AX*1), R13")
	g.i("VBROADCASTSS (R14)(R13*4), Y6") // dmin
	k4ScalesGPR(g, "R8")
	g.i("VCVTDQ2PS Y8, Y8")
	g.i("VMULPS (R15), Y8, Y8")   // m_j·xsum_j
	g.i("VFMADD231PS Y8, Y6, Y1") // += dmin·m_j·xsum_j
}

// k4DotClose ends a super-block of a Q4_K / Q5_K row dot whose int32 sums
// are in Y14 (scaled by d·d_x into Y0), closes the loop and stores the row's
// result, Y0 less an eighth of Y1 summed across lanes.
func k4DotClose(g *gen, bb int) {
	g.i("VCVTDQ2PS Y14, Y14")
	g.i("VMULPS 32(SI), Y5, Y9") // d·d_x: the super-block's x blocks share d_x (quantizeXK)
	g.i("VFMADD231PS Y9, Y14, Y0")
	g.i("ADDQ $%d, AX", bb)
	g.i("ADDQ $512, SI")
	g.i("ADDQ $32, R15")
	g.i("DECQ CX")
	g.i("JNE block")
	g.p("sum:")
	g.i("MOVL $0x3e000000, R13") // 0.125
	g.i("VMOVD R13, X9")
	g.i("VBROADCASTSS X9, Y9")
	g.i("VMULPS Y9, Y1, Y1")
	g.i("VSUBPS Y1, Y0, Y0")
	g.i("VEXTRACTF128 $1, Y0, X1")
	g.i("VADDPS X1, X0, X0")
	g.i("VHADDPS X0, X0, X0")
	g.i("VHADDPS X0, X0, X0")
	g.i("VMOVSS X0, (DI)")
	x86RowEnd(g)
}

// k4Scales unpacks the eight 6-bit scales and minimums of the Q4_K / Q5_K
// super-block at (base)(AX*1) into int32 lanes: Y7 = sc0–7, Y8 = m0–7 (X15:
// bytes 0x3F, X13: bytes 0x0F; X9–X11 clobbered). The scales and minimums of
// sub-blocks 0–3 are bytes 0–3 and 4–7 & 63; those of 4–7 the low (sc) or
// high (m) nibbles of bytes 8–11 with bits 6–7 of bytes 0–3 (sc) or 4–7 (m)
// on top.
func k4Scales(g *gen, base string) {
	// Scales and minimums: X7 = bytes 0–7, X8 = bytes 8–11.
	g.i("VMOVQ 4(%s)(AX*1), X7", base)
	g.i("VMOVD 12(%s)(AX*1), X8", base)
	g.i("VPAND X15, X7, X9")       // dword 0: sc0–3, dword 1: m0–3
	g.i("VPSRLD $4, X8, X10")      // u2 >> 4
	g.i("VPUNPCKLDQ X10, X8, X10") // [u2, u2>>4]
	g.i("VPAND X13, X10, X10")     // low nibbles (sc4–7), high nibbles (m4–7)
	g.i("VPSRLD $6, X7, X11")      // bits 6–7 of bytes 0–7, at 0–1
	g.i("VPAND kqMask03<>(SB), X11, X11")
	g.i("VPSLLD $4, X11, X11")
	g.i("VPOR X11, X10, X10")     // dword 0: sc4–7, dword 1: m4–7
	g.i("VPUNPCKLDQ X10, X9, X9") // bytes 0–7: sc0–7, 8–15: m0–7
	g.i("VPMOVZXBD X9, Y7")
	g.i("VPSRLDQ $8, X9, X9")
	g.i("VPMOVZXBD X9, Y8")
}

// kqScaleByte is the byte of k4ScalesGPR's X7 that holds scale j (j < 8);
// minimum j is 4 bytes on.
func kqScaleByte(j int) int { return j + j/4*4 }

// k4ScalesGPR unpacks the scales and minimums of the Q4_K / Q5_K super-block
// at (base)(AX*1) as k4Scales does, but in general registers (R13, DX
// clobbered; A read twice rather than held in a third), so that most of the work leaves the vector ports to the dot
// products: X7 (both lanes of Y7) = bytes sc0–3, m0–3, sc4–7, m4–7
// (kqScaleByte), Y8 = m0–7 as int32. With A = bytes 4–11 and u = bytes 12–15,
// the low dword of A & 0x3F… holds sc0–3 and its high one m0–3; sc4–7 and
// m4–7 are the low and high nibbles of u, ((u | u<<28) & 0x0F…) puts them in
// the low and high dword, and bits 6–7 of A's bytes go on top, each dword to
// its own.
func k4ScalesGPR(g *gen, base string) {
	g.i("MOVL 12(%s)(AX*1), DX", base) // u
	g.i("MOVQ DX, R13")
	g.i("SHLQ $28, R13")
	g.i("ORQ R13, DX")
	g.i("ANDQ kqMask0f<>(SB), DX")
	g.i("MOVQ 4(%s)(AX*1), R13", base) // A
	g.i("SHRQ $6, R13")
	g.i("ANDQ kqMask03<>(SB), R13")
	g.i("SHLQ $4, R13")
	g.i("ORQ R13, DX") // sc4–7, m4–7
	g.i("MOVQ 4(%s)(AX*1), R13", base)
	g.i("ANDQ kqMask3f<>(SB), R13") // sc0–3, m0–3
	g.i("VMOVQ R13, X7")
	g.i("VPINSRQ $1, DX, X7, X7")
	g.i("VPSHUFB kqMins<>(SB), X7, X8")
	g.i("VINSERTI128 $1, X7, Y7, Y7")
	g.i("VPMOVZXBD X8, Y8")
}

// kaxpy4Head emits the declaration and prologue of a K-quant qaxpy4 with a
// stack frame of frame bytes: DI dst, the rows and the rows to prefetch in
// the registers it returns, CX nb.
func kaxpy4Head(g *gen, name string, frame int) (rows, pre []string) {
	g.decl("//go:noescape\nfunc %s(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int)", name)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $%d-96", name, frame)
	g.i("MOVQ dst+0(FP), DI")
	rows = []string{"R8", "R9", "R10", "R11"}
	pre = []string{"R12", "R13", "BX", "DX"}
	for i, r := range rows {
		g.i("MOVQ w%d+%d(FP), %s", i, 8+8*i, r)
	}
	for i, r := range pre {
		g.i("MOVQ p%d+%d(FP), %s", i, 40+8*i, r)
	}
	g.i("MOVQ nb+88(FP), CX")
	return rows, pre
}

// kaxpy4Tail closes a K-quant qaxpy4's super-block loop (bb bytes a block,
// 256 floats of dst) and returns.
func kaxpy4Tail(g *gen, bb int) {
	g.i("ADDQ $%d, AX", bb)
	g.i("ADDQ $1024, DI")
	g.i("DECQ CX")
	g.i("JNE block")
	g.p("done:")
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}

// qaxpy4Q4KAVX2: dst[e] += Σ_{r<4} a_r·w_r[e] for e < 256·nb, the rows w0..w3
// of nb Q4_K super-blocks (the neuron-row accumulation of
// down_proj.weight_t, AddRows), p0..p3 prefetched at the same pace. Per
// super-block each row's scales are unpacked here (k4Scales) into the
// coefficients a_r·d·sc_j (on the stack, 32 bytes a row) and the offsets
// Σ_r a_r·dmin·m_j (at 128(SP)); then for each group of 64 weights (sub-blocks
// 2g, 2g+1: the low and high nibbles of the same 32 bytes) dst's 64 floats
// stay in Y0–Y7 while the four rows add coefficient × level (VPMOVZXBD,
// VPAND / VPSRLD, VCVTDQ2PS, VFMADD231PS: the cost per weight of Q4_0's
// qaxpy4), and the offsets are subtracted once per group. Against the
// portable-scaled form (kaccumQ4_KAVX2 called per super-block, the scales
// unpacked in Go) the minimum is no longer subtracted per weight, so a
// weight's product is rounded as a_r·d·sc·q − a_r·dmin·m rather than as
// a_r·float32(d·sc·q − dmin·m) (the dot kernels' rounding).
//
// With five, the Q5_K form (176-byte blocks: qh[32] after the scales, then
// the nibbles): bits 2g and 2g+1 of qh[l] go to bit 4 of the group's low and
// high weight l (dwords 1 in Y14, Y12 a temporary).
func qaxpy4Q4KAVX2(g *gen, x x86, five bool) {
	name, bb, qs := "qaxpy4Q4_K"+x.name, 144, 16
	if five {
		name, bb, qs = "qaxpy4Q5_K"+x.name, 176, 48
	}
	v, n := x.v, 32/x.vw // registers of a sub-block's 32 floats
	rows, pre := kaxpy4Head(g, name, 160)
	g.i("MOVQ ·f16Table(SB), R14")
	g.i("MOVL $0x0f0f0f0f, R15")
	g.i("VMOVD R15, X13")
	g.i("VPBROADCASTD X13, %s", v(13)) // bytes 0x0F
	g.i("VMOVDQU kqMask3f<>(SB), X15")
	if five {
		g.i("MOVL $1, R15")
		g.i("VMOVD R15, X14")
		g.i("VPBROADCASTD X14, %s", v(14)) // dwords 1
	}
	g.i("XORQ AX, AX")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("block:")
	for _, p := range pre {
		for off := 0; off < bb; off += 64 {
			g.i("PREFETCHT0 %d(%s)(AX*1)", off, p)
		}
	}
	for r, base := range rows {
		g.i("VBROADCASTSS a%d+%d(FP), Y6", r, 72+4*r)
		g.i("MOVWLZX (%s)(AX*1), R15", base)
		g.i("VBROADCASTSS (R14)(R15*4), Y5")
		g.i("VMULPS Y6, Y5, Y5") // a·d
		g.i("MOVWLZX 2(%s)(AX*1), R15", base)
		g.i("VBROADCASTSS (R14)(R15*4), Y4")
		g.i("VMULPS Y6, Y4, Y4") // a·dmin
		k4Scales(g, base)
		g.i("VCVTDQ2PS Y7, Y7")
		g.i("VMULPS Y5, Y7, Y7")
		g.i("VMOVUPS Y7, %d(SP)", 32*r) // a·d·sc_j
		g.i("VCVTDQ2PS Y8, Y8")
		if r == 0 {
			g.i("VMULPS Y4, Y8, Y12")
		} else {
			g.i("VFMADD231PS Y4, Y8, Y12") // Σ_r a·dmin·m_j
		}
	}
	g.i("VMOVUPS Y12, 128(SP)")
	for gr := 0; gr < 4; gr++ {
		for k := 0; k < 2*n; k++ {
			g.i("VMOVUPS %d(DI), %s", 256*gr+4*x.vw*k, v(k))
		}
		for r, base := range rows {
			g.i("VBROADCASTSS %d(SP), %s", 32*r+4*(2*gr), v(8))
			g.i("VBROADCASTSS %d(SP), %s", 32*r+4*(2*gr+1), v(9))
			for k := 0; k < n; k++ {
				g.i("VPMOVZXBD %d(%s)(AX*1), %s", qs+32*gr+x.vw*k, base, v(10))
				g.i("VPSRLD $4, %s, %s", v(10), v(11))             // high nibbles: sub-block 2g+1
				g.i("%s %s, %s, %s", x.and(), v(13), v(10), v(10)) // low nibbles: sub-block 2g
				if five {
					for h, y := range []int{10, 11} {
						g.i("VPMOVZXBD %d(%s)(AX*1), %s", 16+x.vw*k, base, v(12))
						if sh := 2*gr + h; sh > 0 {
							g.i("VPSRLD $%d, %s, %s", sh, v(12), v(12))
						}
						g.i("%s %s, %s, %s", x.and(), v(14), v(12), v(12))
						g.i("VPSLLD $4, %s, %s", v(12), v(12))
						g.i("%s %s, %s, %s", x.or(), v(12), v(y), v(y))
					}
				}
				g.i("VCVTDQ2PS %s, %s", v(10), v(10))
				g.i("VCVTDQ2PS %s, %s", v(11), v(11))
				g.i("VFMADD231PS %s, %s, %s", v(8), v(10), v(k))
				g.i("VFMADD231PS %s, %s, %s", v(9), v(11), v(n+k))
			}
		}
		g.i("VBROADCASTSS %d(SP), %s", 128+4*(2*gr), v(8))
		g.i("VBROADCASTSS %d(SP), %s", 128+4*(2*gr+1), v(9))
		for k := 0; k < n; k++ {
			g.i("VSUBPS %s, %s, %s", v(8), v(k), v(k))
			g.i("VSUBPS %s, %s, %s", v(9), v(n+k), v(n+k))
		}
		for k := 0; k < 2*n; k++ {
			g.i("VMOVUPS %s, %d(DI)", v(k), 256*gr+4*x.vw*k)
		}
	}
	kaxpy4Tail(g, bb)
}

// qaxpy4Q6KAVX2 is qaxpy4Q4KAVX2 for Q6_K super-blocks (ql[128], qh[64], 16
// int8 scales, F16 d): the coefficients a_r·d·sc_j (16 a row, 64 bytes on the
// stack) and 32·Σ_r a_r·d·sc_j (at 256(SP)), which is subtracted once per
// eight columns of each quarter for the levels' offset 32. Per half h and
// eight l, one load of ql[64h + l], ql[64h + 32 + l] and qh[32h + l] gives the
// weights of the four quarters k at column 128h + 32k + l (GGML's order:
// nibble k/2 of ql[64h + 32(k&1) + l], bits 2k, 2k+1 of qh[32h + l] above it),
// each with the scale 8h + 2k + l/16.
func qaxpy4Q6KAVX2(g *gen, x x86) {
	name := "qaxpy4Q6_K" + x.name
	v := x.v
	rows, pre := kaxpy4Head(g, name, 320)
	g.i("MOVQ ·f16Table(SB), R14")
	g.i("MOVL $0x0f, R15")
	g.i("VMOVD R15, X13")
	g.i("VPBROADCASTD X13, %s", v(13)) // dwords 0x0F
	g.i("MOVL $0x30, R15")
	g.i("VMOVD R15, X14")
	g.i("VPBROADCASTD X14, %s", v(14)) // dwords 0x30
	g.i("XORQ AX, AX")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("block:")
	for _, p := range pre {
		for off := 0; off < 210; off += 64 {
			g.i("PREFETCHT0 %d(%s)(AX*1)", off, p)
		}
	}
	for r, base := range rows {
		g.i("VBROADCASTSS a%d+%d(FP), Y6", r, 72+4*r)
		g.i("MOVWLZX 208(%s)(AX*1), R15", base)
		g.i("VBROADCASTSS (R14)(R15*4), Y5")
		g.i("VMULPS Y6, Y5, Y5") // a·d
		g.i("VPMOVSXBD 192(%s)(AX*1), Y7", base)
		g.i("VPMOVSXBD 200(%s)(AX*1), Y8", base)
		g.i("VCVTDQ2PS Y7, Y7")
		g.i("VCVTDQ2PS Y8, Y8")
		g.i("VMULPS Y5, Y7, Y7")
		g.i("VMULPS Y5, Y8, Y8")
		g.i("VMOVUPS Y7, %d(SP)", 64*r)
		g.i("VMOVUPS Y8, %d(SP)", 64*r+32)
		if r == 0 {
			g.i("VMOVAPS Y7, Y11")
			g.i("VMOVAPS Y8, Y12")
		} else {
			g.i("VADDPS Y7, Y11, Y11")
			g.i("VADDPS Y8, Y12, Y12")
		}
	}
	g.i("MOVL $0x42000000, R15") // 32.0
	g.i("VMOVD R15, X15")
	g.i("VBROADCASTSS X15, Y15")
	g.i("VMULPS Y15, Y11, Y11")
	g.i("VMULPS Y15, Y12, Y12")
	g.i("VMOVUPS Y11, 256(SP)")
	g.i("VMOVUPS Y12, 288(SP)")
	for h := 0; h < 2; h++ {
		for l0 := 0; l0 < 32; l0 += x.vw { // 16 columns share a scale
			col := func(k int) int { return 4 * (128*h + 32*k + l0) }
			sc := func(k int) int { return 8*h + 2*k + l0/16 }
			for k := 0; k < 4; k++ {
				g.i("VMOVUPS %d(DI), %s", col(k), v(k))
			}
			for r, base := range rows {
				for k := 0; k < 4; k++ {
					g.i("VBROADCASTSS %d(SP), %s", 64*r+4*sc(k), v(4+k))
				}
				g.i("VPMOVZXBD %d(%s)(AX*1), %s", 64*h+l0, base, v(8))
				g.i("VPMOVZXBD %d(%s)(AX*1), %s", 64*h+32+l0, base, v(9))
				g.i("VPMOVZXBD %d(%s)(AX*1), %s", 128+32*h+l0, base, v(10))
				for k := 0; k < 4; k++ {
					src := v(8 + k&1)
					if k < 2 {
						g.i("%s %s, %s, %s", x.and(), v(13), src, v(11))
					} else {
						g.i("VPSRLD $4, %s, %s", src, v(11))
					}
					switch k { // bits 2k, 2k+1 of qh to bits 4, 5
					case 0:
						g.i("VPSLLD $4, %s, %s", v(10), v(12))
					case 1:
						g.i("VPSLLD $2, %s, %s", v(10), v(12))
					case 3:
						g.i("VPSRLD $2, %s, %s", v(10), v(12))
					}
					if k == 2 {
						g.i("%s %s, %s, %s", x.and(), v(14), v(10), v(12))
					} else {
						g.i("%s %s, %s, %s", x.and(), v(14), v(12), v(12))
					}
					g.i("%s %s, %s, %s", x.or(), v(12), v(11), v(11))
					g.i("VCVTDQ2PS %s, %s", v(11), v(11))
					g.i("VFMADD231PS %s, %s, %s", v(4+k), v(11), v(k))
				}
			}
			for k := 0; k < 4; k++ {
				g.i("VBROADCASTSS %d(SP), %s", 256+4*sc(k), v(4+k))
				g.i("VSUBPS %s, %s, %s", v(4+k), v(k), v(k))
				g.i("VMOVUPS %s, %d(DI)", v(k), col(k))
			}
		}
	}
	kaxpy4Tail(g, 210)
}

// qdotRowsQ6KAVX2 is qdotRowsQ4KAVX2 for Q6_K super-blocks (210 bytes:
// ql[128], qh[64], 16 int8 scales, F16 d). For h < 2 and k < 4, x block
// 4h + k meets q = the low (k < 2) or high nibbles of ql[64h + 32(k&1):]
// with bits 2k, 2k+1 of qh[32h:] on top (0..63, unsigned for VPMADDUBSW;
// the two bits masked in place and shifted to bits 4–5). VPMADDWD by the
// scales (int16: elements 0–15 of the block have scale 8h + 2k, 16–31 scale
// 8h + 2k + 1, copied across each lane by VPSHUFB from the scales held in a
// register) sums the pairs into int32 lanes. The −32 of every weight is
// taken once per super-block: the accumulator starts at −32·Σ_i sc_i·S_i,
// with S_i the sum of x's levels over elements 16i..16i+15, which
// quantizeXK leaves in the super-block's x (int16, bytes 96–127 of its
// 512). So the super-block is summed in integers, Σ_i sc_i·Σ (q − 32)·x
// exactly, and converted once, times d·d_x, as GGML's vec_dot_q6_K_q8_K
// does. Against the form that subtracted VPMADDUBSW of 32 per x block and
// broadcast each scale from the stack (one multiply and four other
// operations less per 32 weights), Q6_K dots of 128 rows of 2048 in L2
// (BenchmarkRawSets, AMD EPYC Zen 3, AVX2): 12.5 → 9.2–9.6 µs; decode of a
// Llama-3.2-1B-shape Q4_K_M file at 2 threads 24.2 → 26.2 tok/s (with the
// Q4_K change, medians of 3 alternated runs), unchanged at 1 thread.
func qdotRowsQ6KAVX2(g *gen) {
	kDotHead(g, "qdotRowsQ6_KAVX2", func() { qMasks(g, "R13") }) // Y13: bytes 0x0F
	g.i("MOVQ xq+24(FP), SI")
	g.i("MOVQ nb+40(FP), CX")
	g.i("XORQ AX, AX")
	g.i("VXORPS Y0, Y0, Y0")
	g.i("TESTQ CX, CX")
	g.i("JEQ sum")
	g.p("block:")
	for off := 0; off < 210; off += 64 {
		g.i("PREFETCHT0 %d(R11)(AX*1)", off)
	}
	g.i("MOVWLZX 208(R8)(AX*1), R13")
	g.i("VBROADCASTSS (R14)(R13*4), Y5") // d
	g.i("VPMOVSXBW 192(R8)(AX*1), Y7")   // the 16 scales as int16: lane h holds 8h..8h+7
	g.i("VPMADDWD 96(SI), Y7, Y8")       // Σ sc_i·S_i in pairs
	g.i("VPSLLD $5, Y8, Y8")
	g.i("VPXOR Y6, Y6, Y6")
	g.i("VPSUBD Y8, Y6, Y8") // −32·Σ sc_i·S_i: Y8 sums Σ_i sc_i·Σ (q − 32)·x in int32 lanes
	for h := 0; h < 2; h++ {
		g.i("VPERMQ $%#x, Y7, Y6", []int{0x44, 0xee}[h]) // scales 8h..8h+7 in both lanes
		g.i("VMOVDQU %d(R8)(AX*1), Y2", 128+32*h)        // qh
		for k := 0; k < 4; k++ {
			xb := 4*h + k
			q6Unpack(g, h, k, 3, 2, 4)
			g.i("VPMADDUBSW %d(SI), Y3, Y3", 64*xb)
			g.i("VPSHUFB kq6Scale<>+%d(SB), Y6, Y9", 32*k) // elements 0–15: sc[8h+2k], 16–31: sc[8h+2k+1]
			g.i("VPMADDWD Y9, Y3, Y3")
			g.i("VPADDD Y3, Y8, Y8")
		}
	}
	g.i("VCVTDQ2PS Y8, Y8")
	g.i("VMULPS 32(SI), Y5, Y9") // d·d_x (quantizeXK: one d_x per super-block)
	g.i("VFMADD231PS Y9, Y8, Y0")
	g.i("ADDQ $210, AX")
	g.i("ADDQ $512, SI")
	g.i("DECQ CX")
	g.i("JNE block")
	g.p("sum:")
	g.i("VEXTRACTF128 $1, Y0, X1")
	g.i("VADDPS X1, X0, X0")
	g.i("VHADDPS X0, X0, X0")
	g.i("VHADDPS X0, X0, X0")
	g.i("VMOVSS X0, (DI)")
	x86RowEnd(g)
}

// q6Unpack leaves in Y<q> the levels (0..63, one per byte) of the 32
// weights of a Q6_K super-block's x block 4h + k at (R8)(AX*1): the low
// (k < 2) or high nibbles of ql[64h + 32(k&1):], with bits 2k, 2k+1 of qh
// (already in Y<qh>) on top, shifted to bits 4–5 through Y<tmp>. Y13 holds
// the nibble mask.
func q6Unpack(g *gen, h, k, q, qh, tmp int) {
	g.i("VMOVDQU %d(R8)(AX*1), Y%d", 64*h+32*(k&1), q)
	if k >= 2 {
		g.i("VPSRLW $4, Y%d, Y%d", q, q)
	}
	g.i("VPAND Y13, Y%d, Y%d", q, q)
	g.i("VPAND kq6High<>+%d(SB), Y%d, Y%d", 32*k, qh, tmp) // bits 2k, 2k+1
	switch k {
	case 0:
		g.i("VPSLLW $4, Y%d, Y%d", tmp, tmp)
	case 1:
		g.i("VPSLLW $2, Y%d, Y%d", tmp, tmp)
	case 3:
		g.i("VPSRLW $2, Y%d, Y%d", tmp, tmp)
	}
	g.i("VPOR Y%d, Y%d, Y%d", tmp, q, q) // q, 0..63
}

// qdotRowsBQ6KAVX2 is qdotRowsQ6KAVX2 over m contiguous rows for T ≤ 4
// tokens at once (MatVecBatch): token t's x as quantizeXWith leaves it for Q6_K at
// xq + t·xstride bytes, its sums at dst + t·dstride bytes. Each super-block's
// levels and scales are unpacked once for all T; each token keeps the
// single-token kernel's integer sums (exact) and float steps in its order,
// so its results are qdotRowsQ6KAVX2's bit for bit. Registers: Y0–Y3 the
// tokens' float sums, Y8–Y11 their int32 sums, Y13 the nibble mask, Y7/Y6
// the scales, Y12 qh, Y14 q, Y5 the scales copied across lanes, Y4 and Y15
// temporaries (Y4 holds d at the end of a super-block).
func qdotRowsBQ6KAVX2(g *gen, T int) {
	name := fmt.Sprintf("qdotRowsBT%dQ6_KAVX2", T)
	g.decl("//go:noescape\nfunc %s(w unsafe.Pointer, stride int, xq *int8, xstride int, nb, m int, dst *float32, dstride int, pf int)", name)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $0-72", name)
	g.i("MOVQ w+0(FP), R8")
	g.i("MOVQ stride+8(FP), R9")
	g.i("XORQ R12, R12") // contiguous rows
	g.i("MOVQ m+40(FP), BX")
	g.i("MOVQ dst+48(FP), DI")
	g.i("MOVQ pf+64(FP), R10")
	g.i("MOVQ ·f16Table(SB), R14")
	g.i("MOVQ xstride+24(FP), DX")
	if T == 4 {
		g.i("LEAQ (DX)(DX*2), R15") // token 3's offset
	}
	qMasks(g, "R13") // Y13: bytes 0x0F (Y12 is set again below)
	// x of token t relative to SI
	xt := func(t, off int) string {
		return fmt.Sprintf("%d%s", off, []string{"(SI)", "(SI)(DX*1)", "(SI)(DX*2)", "(SI)(R15*1)"}[t])
	}
	g.i("TESTQ BX, BX")
	g.i("JEQ done")
	x86RowStart(g, "pf+64(FP)")
	g.i("MOVQ xq+16(FP), SI")
	g.i("MOVQ nb+32(FP), CX")
	g.i("XORQ AX, AX")
	for t := 0; t < T; t++ {
		g.i("VXORPS Y%d, Y%d, Y%d", t, t, t)
	}
	g.i("TESTQ CX, CX")
	g.i("JEQ sum")
	g.p("block:")
	for off := 0; off < 210; off += 64 {
		g.i("PREFETCHT0 %d(R11)(AX*1)", off)
	}
	g.i("VPMOVSXBW 192(R8)(AX*1), Y7") // the 16 scales as int16: lane h holds 8h..8h+7
	g.i("VPXOR Y15, Y15, Y15")
	for t := 0; t < T; t++ {
		g.i("VPMADDWD %s, Y7, Y%d", xt(t, 96), 8+t) // Σ sc_i·S_i in pairs
		g.i("VPSLLD $5, Y%d, Y%d", 8+t, 8+t)
		g.i("VPSUBD Y%d, Y15, Y%d", 8+t, 8+t) // −32·Σ sc_i·S_i
	}
	for h := 0; h < 2; h++ {
		g.i("VPERMQ $%#x, Y7, Y6", []int{0x44, 0xee}[h]) // scales 8h..8h+7 in both lanes
		g.i("VMOVDQU %d(R8)(AX*1), Y12", 128+32*h)       // qh
		for k := 0; k < 4; k++ {
			xb := 4*h + k
			q6Unpack(g, h, k, 14, 12, 4)
			g.i("VPSHUFB kq6Scale<>+%d(SB), Y6, Y5", 32*k) // elements 0–15: sc[8h+2k], 16–31: sc[8h+2k+1]
			for t := 0; t < T; t++ {
				g.i("VPMADDUBSW %s, Y14, Y15", xt(t, 64*xb))
				g.i("VPMADDWD Y5, Y15, Y15")
				g.i("VPADDD Y15, Y%d, Y%d", 8+t, 8+t)
			}
		}
	}
	g.i("MOVWLZX 208(R8)(AX*1), R13")
	g.i("VBROADCASTSS (R14)(R13*4), Y4") // d
	for t := 0; t < T; t++ {
		g.i("VCVTDQ2PS Y%d, Y%d", 8+t, 8+t)
		g.i("VMULPS %s, Y4, Y15", xt(t, 32)) // d·d_x
		g.i("VFMADD231PS Y15, Y%d, Y%d", 8+t, t)
	}
	g.i("ADDQ $210, AX")
	g.i("ADDQ $512, SI")
	g.i("DECQ CX")
	g.i("JNE block")
	g.p("sum:")
	g.i("MOVQ dstride+56(FP), R13")
	for t := 0; t < T; t++ {
		g.i("VEXTRACTF128 $1, Y%d, X15", t)
		g.i("VADDPS X15, X%d, X%d", t, t)
		g.i("VHADDPS X%d, X%d, X%d", t, t, t)
		g.i("VHADDPS X%d, X%d, X%d", t, t, t)
		switch t {
		case 0:
			g.i("VMOVSS X0, (DI)")
		case 1:
			g.i("VMOVSS X1, (DI)(R13*1)")
		case 2:
			g.i("VMOVSS X2, (DI)(R13*2)")
		case 3:
			g.i("LEAQ (R13)(R13*2), R13")
			g.i("VMOVSS X3, (DI)(R13*1)")
		}
	}
	x86RowEnd(g)
}

// kaccumK4AVX2: dst[e] += Σ_{r<rows} a[r]·(sc[8r + e/32]·q_r[e] − off[8r +
// e/32]) for e < 256: one super-block of Q4_K (or, with five, Q5_K) weight
// levels q_r[e] (0..15, or 0..31) of rows ≤ 4, sc and off each row's
// sub-block scale d·sc_j and minimum dmin·m_j as kquant.go's Go caller
// unpacks them from the 6-bit fields. Each weight is rounded as
// format.Dequantize rounds it (the product, then the minimum subtracted), so
// a weight that is a small difference of two large terms is the same value
// there and here; then it is multiplied by a[r] and added. q holds each
// row's level bytes: for Q4_K its 128 nibble bytes, for Q5_K its qh[32] then
// the 128 nibble bytes. Per sub-block j = 2g+h, bytes 32g..32g+31 hold its
// weights in their low (h = 0) or high (h = 1) nibbles (spec §5.3), widened
// to dwords (VPMOVZXBD); Q5_K's fifth bit of weight l is bit j of qh[l].
func kaccumK4AVX2(g *gen, five bool) {
	name, nib := "kaccumQ4_KAVX2", 0
	if five {
		name, nib = "kaccumQ5_KAVX2", 32
	}
	g.decl("//go:noescape\nfunc %s(dst *float32, q *[4]unsafe.Pointer, sc, off *[32]float32, a *[4]float32, rows int)", name)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $0-48", name)
	g.i("MOVQ dst+0(FP), DI")
	g.i("MOVQ q+8(FP), SI")
	g.i("MOVQ sc+16(FP), DX")
	g.i("MOVQ off+24(FP), BX")
	g.i("MOVQ a+32(FP), R10")
	g.i("MOVQ rows+40(FP), CX")
	g.i("MOVL $0x0f, R15")
	g.i("VMOVD R15, X8")
	g.i("VPBROADCASTD X8, Y8") // dword nibble mask
	if five {
		g.i("MOVL $0x10, R15")
		g.i("VMOVD R15, X15")
		g.i("VPBROADCASTD X15, Y15") // dword bit 4
	}
	for j := 0; j < 8; j++ {
		grp, half := j/2, j%2
		for k := 0; k < 4; k++ {
			g.i("VMOVUPS %d(DI), Y%d", 4*(32*j+8*k), k)
		}
		g.i("XORQ AX, AX")
		g.p("rows%d:", j)
		g.i("MOVQ (SI)(AX*8), R8")
		g.i("MOVQ AX, R9")
		g.i("SHLQ $5, R9") // 8 floats a row
		g.i("VBROADCASTSS %d(DX)(R9*1), Y9", 4*j)
		g.i("VBROADCASTSS %d(BX)(R9*1), Y10", 4*j)
		g.i("VBROADCASTSS (R10)(AX*4), Y11")
		for k := 0; k < 4; k++ {
			g.i("VPMOVZXBD %d(R8), Y12", nib+32*grp+8*k)
			if half == 0 {
				g.i("VPAND Y8, Y12, Y12")
			} else {
				g.i("VPSRLD $4, Y12, Y12")
			}
			if five {
				g.i("VPMOVZXBD %d(R8), Y13", 8*k) // qh bytes of weights 8k..8k+7
				switch {
				case j < 4:
					g.i("VPSLLD $%d, Y13, Y13", 4-j)
				case j > 4:
					g.i("VPSRLD $%d, Y13, Y13", j-4)
				}
				g.i("VPAND Y15, Y13, Y13")
				g.i("VPOR Y13, Y12, Y12")
			}
			g.i("VCVTDQ2PS Y12, Y12")
			g.i("VMULPS Y9, Y12, Y12")
			g.i("VSUBPS Y10, Y12, Y12")
			g.i("VFMADD231PS Y11, Y12, Y%d", k)
		}
		g.i("INCQ AX")
		g.i("CMPQ AX, CX")
		g.i("JB rows%d", j)
		for k := 0; k < 4; k++ {
			g.i("VMOVUPS Y%d, %d(DI)", k, 4*(32*j+8*k))
		}
	}
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}

// kaccumQ6KAVX2: dst[e] += Σ_{r<rows} a[r]·sc[16r + e/16]·(q_r[e] − 32)
// for e < 256: one super-block of Q6_K weights of rows ≤ 4 (q[r] the
// block: ql[128], then qh[64]), sc each row's sub-block scale d·sc_j as
// format.Dequantize rounds it, so each weight is the same value there and
// here before a[r] multiplies it. Weight 128h + 32k + l (l < 32) has its
// low four bits in the low (k = 0, 1) or high (k = 2, 3) nibble of
// ql[64h + 32(k mod 2) + l] and its top two in bits 2k, 2k+1 of
// qh[32h + l] (spec §5.3).
func kaccumQ6KAVX2(g *gen) {
	name := "kaccumQ6_KAVX2"
	g.decl("//go:noescape\nfunc %s(dst *float32, q *[4]unsafe.Pointer, sc *[64]float32, a *[4]float32, rows int)", name)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	g.i("MOVQ dst+0(FP), DI")
	g.i("MOVQ q+8(FP), SI")
	g.i("MOVQ sc+16(FP), DX")
	g.i("MOVQ a+24(FP), R10")
	g.i("MOVQ rows+32(FP), CX")
	for _, c := range []struct {
		v   int
		reg int
	}{{0x0f, 8}, {0x30, 14}, {32, 15}} {
		g.i("MOVL $%#x, R15", c.v)
		g.i("VMOVD R15, X%d", c.reg)
		g.i("VPBROADCASTD X%d, Y%d", c.reg, c.reg)
	}
	for h := 0; h < 2; h++ {
		for k := 0; k < 4; k++ {
			e0, j0 := 128*h+32*k, 8*h+2*k
			for i := 0; i < 4; i++ {
				g.i("VMOVUPS %d(DI), Y%d", 4*(e0+8*i), i)
			}
			lbl := fmt.Sprintf("rows%d%d", h, k)
			g.i("XORQ AX, AX")
			g.p("%s:", lbl)
			g.i("MOVQ (SI)(AX*8), R8")
			g.i("MOVQ AX, R9")
			g.i("SHLQ $6, R9") // 16 floats a row
			g.i("VBROADCASTSS %d(DX)(R9*1), Y9", 4*j0)
			g.i("VBROADCASTSS %d(DX)(R9*1), Y10", 4*(j0+1))
			g.i("VBROADCASTSS (R10)(AX*4), Y11")
			for i := 0; i < 4; i++ {
				g.i("VPMOVZXBD %d(R8), Y12", 64*h+32*(k%2)+8*i)
				if k < 2 {
					g.i("VPAND Y8, Y12, Y12")
				} else {
					g.i("VPSRLD $4, Y12, Y12")
				}
				g.i("VPMOVZXBD %d(R8), Y13", 128+32*h+8*i)
				switch {
				case 2*k < 4:
					g.i("VPSLLD $%d, Y13, Y13", 4-2*k)
				case 2*k > 4:
					g.i("VPSRLD $%d, Y13, Y13", 2*k-4)
				}
				g.i("VPAND Y14, Y13, Y13")
				g.i("VPOR Y13, Y12, Y12")
				g.i("VPSUBD Y15, Y12, Y12")
				g.i("VCVTDQ2PS Y12, Y12")
				s := 9
				if i >= 2 {
					s = 10
				}
				g.i("VMULPS Y%d, Y12, Y12", s)
				g.i("VFMADD231PS Y11, Y12, Y%d", i)
			}
			g.i("INCQ AX")
			g.i("CMPQ AX, CX")
			g.i("JB %s", lbl)
			for i := 0; i < 4; i++ {
				g.i("VMOVUPS Y%d, %d(DI)", i, 4*(e0+8*i))
			}
		}
	}
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}

// neonKLevels leaves 32 levels of a K-quant sub-block as float32 in
// V8..V15 (elements 0–3, 4–7, …), from the signed bytes in V2 (0–15) and V3
// (16–31); V4..V7 are clobbered.
func neonKLevels(g *gen) {
	g.i(sxtl(4, 2, false, false))
	g.i(sxtl(5, 2, false, true))
	g.i(sxtl(6, 3, false, false))
	g.i(sxtl(7, 3, false, true))
	for k := 0; k < 4; k++ {
		g.i(sxtl(8+2*k, 4+k, true, false))
		g.i(sxtl(9+2*k, 4+k, true, true))
	}
	for k := 8; k < 16; k++ {
		g.i(scvtfV(k, k))
	}
}

// neonKRowHead loads row R6's level pointer into R9 and broadcasts its
// coefficient a[R6] to V29 and, from the float32 table at R2 (stride per
// row: 1<<shift bytes), its scale at offset off into V27 (R7 clobbered).
func neonKRowHead(g *gen, shift, off int) {
	g.i("MOVD (R1)(R6<<3), R9")
	g.i("ADD R6<<2, R4, R7")
	g.i("FMOVS (R7), F29")
	g.i("VDUP V29.S[0], V29.S4")
	g.i("ADD R6<<%d, R2, R7", shift)
	g.i("FMOVS %d(R7), F27", off)
	g.i("VDUP V27.S[0], V27.S4")
}

// neonKAccum adds a·v for the levels in V8..V15 (v = level·V27, then − V28
// where minus) into the sums V16..V23.
func neonKAccum(g *gen, minus bool) {
	for k := 0; k < 8; k++ {
		g.i(fmulV(8+k, 8+k, 27))
		if minus {
			g.i(fsubV(8+k, 8+k, 28))
		}
		g.i("VFMLA V29.S4, V%d.S4, V%d.S4", 8+k, 16+k)
	}
}

// neonKLoadStore loads (store false) or stores the 32 sums of dst + byte
// offset off in V16..V23 (R10 clobbered).
func neonKLoadStore(g *gen, off int, store bool) {
	g.i("ADD $%d, R0, R10", off)
	op, a, b := "VLD1", "(R10), ", ""
	if store {
		op, a, b = "VST1", "", ", (R10)"
	}
	g.i("%s %s[V16.S4, V17.S4, V18.S4, V19.S4]%s", op, a, b)
	g.i("ADD $%d, R0, R10", off+64)
	g.i("%s %s[V20.S4, V21.S4, V22.S4, V23.S4]%s", op, a, b)
}

// neonKaccumK4 is kaccumK4AVX2 for NEON (kaccumQ4_KNEON, kaccumQ5_KNEON):
// per sub-block j = 2g+h, for each row the 32 level bytes at 32g (after
// Q5_K's qh[32]) masked (h = 0) or shifted (h = 1), with Q5_K's bit j of
// qh[l] moved to bit 4, widened to float32, each weight rounded as
// format.Dequantize rounds it (FMUL by d·sc_j, FSUB dmin·m_j), then FMLA by
// the row's coefficient into the sub-block's 32 sums.
func neonKaccumK4(g *gen, five bool) {
	name, nib := "kaccumQ4_KNEON", 0
	if five {
		name, nib = "kaccumQ5_KNEON", 32
	}
	neonText(g, name, 48, "(dst *float32, q *[4]unsafe.Pointer, sc, off *[32]float32, a *[4]float32, rows int)")
	g.i("MOVD dst+0(FP), R0")
	g.i("MOVD q+8(FP), R1")
	g.i("MOVD sc+16(FP), R2")
	g.i("MOVD off+24(FP), R3")
	g.i("MOVD a+32(FP), R4")
	g.i("MOVD rows+40(FP), R8")
	g.i("VMOVI $15, V30.B16")
	g.i("VMOVI $16, V31.B16")
	for j := 0; j < 8; j++ {
		grp, half := j/2, j%2
		neonKLoadStore(g, 128*j, false)
		g.i("MOVD $0, R6")
		g.p("rows%d:", j)
		neonKRowHead(g, 5, 4*j)
		g.i("ADD R6<<5, R3, R7")
		g.i("FMOVS %d(R7), F28", 4*j)
		g.i("VDUP V28.S[0], V28.S4")
		g.i("ADD $%d, R9, R7", nib+32*grp)
		g.i("VLD1 (R7), [V0.B16, V1.B16]")
		for v := 0; v < 2; v++ {
			if half == 0 {
				g.i("VAND V30.B16, V%d.B16, V%d.B16", v, 2+v)
			} else {
				g.i("VUSHR $4, V%d.B16, V%d.B16", v, 2+v)
			}
		}
		if five {
			g.i("VLD1 (R9), [V24.B16, V25.B16]") // qh
			for v := 0; v < 2; v++ {
				switch {
				case j < 4:
					g.i("VSHL $%d, V%d.B16, V%d.B16", 4-j, 24+v, 26)
				case j > 4:
					g.i("VUSHR $%d, V%d.B16, V%d.B16", j-4, 24+v, 26)
				default:
					g.i("VORR V%d.B16, V%d.B16, V26.B16", 24+v, 24+v)
				}
				g.i("VAND V31.B16, V26.B16, V26.B16")
				g.i("VORR V26.B16, V%d.B16, V%d.B16", 2+v, 2+v)
			}
		}
		neonKLevels(g)
		neonKAccum(g, true)
		g.i("ADD $1, R6, R6")
		g.i("CMP R8, R6")
		g.i("BLT rows%d", j)
		neonKLoadStore(g, 128*j, true)
	}
	g.i("RET")
	g.p("")
}

// neonKaccumQ6 is kaccumQ6KAVX2 for NEON (kaccumQ6_KNEON): per 32 weights
// 128h + 32k + l, the low (k < 2) or high nibbles of ql[64h + 32(k mod 2)..],
// bits 2k, 2k+1 of qh[32h..] moved to bits 4–5, 32 subtracted (signed
// bytes), widened to float32, FMUL by the scale of the 16-weight sub-block
// (d·sc_j, V27 for the first 16, V28 the next), FMLA by the coefficient.
func neonKaccumQ6(g *gen) {
	neonText(g, "kaccumQ6_KNEON", 40, "(dst *float32, q *[4]unsafe.Pointer, sc *[64]float32, a *[4]float32, rows int)")
	g.i("MOVD dst+0(FP), R0")
	g.i("MOVD q+8(FP), R1")
	g.i("MOVD sc+16(FP), R2")
	g.i("MOVD a+24(FP), R4")
	g.i("MOVD rows+32(FP), R8")
	g.i("VMOVI $15, V30.B16")
	g.i("VMOVI $48, V31.B16")
	g.i("VMOVI $32, V26.B16")
	for h := 0; h < 2; h++ {
		for k := 0; k < 4; k++ {
			e0, j0 := 128*h+32*k, 8*h+2*k
			neonKLoadStore(g, 4*e0, false)
			lbl := fmt.Sprintf("rows%d%d", h, k)
			g.i("MOVD $0, R6")
			g.p("%s:", lbl)
			neonKRowHead(g, 6, 4*j0)
			g.i("FMOVS %d(R7), F28", 4*(j0+1))
			g.i("VDUP V28.S[0], V28.S4")
			g.i("ADD $%d, R9, R7", 64*h+32*(k%2))
			g.i("VLD1 (R7), [V0.B16, V1.B16]")
			g.i("ADD $%d, R9, R7", 128+32*h)
			g.i("VLD1 (R7), [V24.B16, V25.B16]")
			for v := 0; v < 2; v++ {
				if k < 2 {
					g.i("VAND V30.B16, V%d.B16, V%d.B16", v, 2+v)
				} else {
					g.i("VUSHR $4, V%d.B16, V%d.B16", v, 2+v)
				}
				switch {
				case 2*k < 4:
					g.i("VSHL $%d, V%d.B16, V%d.B16", 4-2*k, 24+v, 24+v)
				case 2*k > 4:
					g.i("VUSHR $%d, V%d.B16, V%d.B16", 2*k-4, 24+v, 24+v)
				}
				g.i("VAND V31.B16, V%d.B16, V%d.B16", 24+v, 24+v)
				g.i("VORR V%d.B16, V%d.B16, V%d.B16", 24+v, 2+v, 2+v)
				g.i("VSUB V26.B16, V%d.B16, V%d.B16", 2+v, 2+v)
			}
			neonKLevels(g)
			for i := 0; i < 8; i++ {
				s := 27
				if i >= 4 {
					s = 28
				}
				g.i(fmulV(8+i, 8+i, s))
				g.i("VFMLA V29.S4, V%d.S4, V%d.S4", 8+i, 16+i)
			}
			g.i("ADD $1, R6, R6")
			g.i("CMP R8, R6")
			g.i("BLT %s", lbl)
			neonKLoadStore(g, 4*e0, true)
		}
	}
	g.i("RET")
	g.p("")
}

// addv is ADDV Sd, Vn.4S: the sum of Vn's four int32 lanes.
func addv(d, n int) string { return word(0x4EB1B800|n<<5|d, "ADDV S%d, V%d.4S", d, n) }

// neonKIntDot sets V<acc>.4S to lane sums of the products of the signed
// bytes of V<w> and V<x> (16 each): two SDOT with dotprod, else SMULL,
// SMLAL2 (int16: |sum| ≤ 2·32·127) and SADDLP (V7 clobbered).
func neonKIntDot(g *gen, acc, w, x int, dotprod bool) {
	if dotprod {
		g.i("VEOR V%d.B16, V%d.B16, V%d.B16", acc, acc, acc)
		g.i(sdot(acc, w, x))
		return
	}
	g.i(smull(7, w, x))
	g.i(smlal2(7, w, x))
	g.i(saddlp(acc, 7))
}

// neonKDot writes the integer dots of one K-quant super-block's levels with
// x as quantizeX leaves it (64 bytes per x block of 32, the int8 levels
// first): Q4_K / Q5_K (lv: the block after its 16 bytes of scales, Q5_K's
// qh[32] first) sums[j] = Σ_l q[32j + l]·x_j[l] for the eight sub-blocks,
// the levels unpacked as kaccumK4AVX2 does; Q6_K (lv: the block) sums[i] for
// its 16 sub-blocks of 16, x block i/2, the levels as kaccumQ6KAVX2's. The
// Go side (k4Dot, q6Dot) applies the scales, as for the portable dots.
func neonKDot(g *gen, kind string, dotprod bool) {
	suffix := "NEON"
	if dotprod {
		suffix = "DOTPROD"
	}
	name, n := "kdot"+kind+suffix, 8
	if kind == "Q6_K" {
		n = 16
	}
	neonText(g, name, 24, fmt.Sprintf("(lv unsafe.Pointer, xq *int8, sums *[%d]int32)", n))
	g.i("MOVD lv+0(FP), R0")
	g.i("MOVD xq+8(FP), R1")
	g.i("MOVD sums+16(FP), R2")
	g.i("VMOVI $15, V30.B16")
	switch kind {
	case "Q5_K":
		g.i("VMOVI $16, V31.B16")
		g.i("VLD1 (R0), [V24.B16, V25.B16]") // qh
	case "Q6_K":
		g.i("VMOVI $48, V31.B16")
		g.i("VMOVI $32, V26.B16")
	}
	for j := 0; j < 8; j++ {
		var lvOff int
		k := j % 4 // Q6_K
		switch kind {
		case "Q4_K":
			lvOff = 32 * (j / 2)
		case "Q5_K":
			lvOff = 32 + 32*(j/2)
		case "Q6_K":
			lvOff = 64*(j/4) + 32*(k%2)
		}
		g.i("ADD $%d, R0, R7", lvOff)
		g.i("VLD1 (R7), [V0.B16, V1.B16]")
		low := j%2 == 0
		if kind == "Q6_K" {
			low = k < 2
			g.i("ADD $%d, R0, R7", 128+32*(j/4))
			g.i("VLD1 (R7), [V24.B16, V25.B16]")
		}
		for v := 0; v < 2; v++ {
			if low {
				g.i("VAND V30.B16, V%d.B16, V%d.B16", v, 2+v)
			} else {
				g.i("VUSHR $4, V%d.B16, V%d.B16", v, 2+v)
			}
			switch kind {
			case "Q5_K":
				switch {
				case j < 4:
					g.i("VSHL $%d, V%d.B16, V27.B16", 4-j, 24+v)
				case j > 4:
					g.i("VUSHR $%d, V%d.B16, V27.B16", j-4, 24+v)
				default:
					g.i("VORR V%d.B16, V%d.B16, V27.B16", 24+v, 24+v)
				}
				g.i("VAND V31.B16, V27.B16, V27.B16")
				g.i("VORR V27.B16, V%d.B16, V%d.B16", 2+v, 2+v)
			case "Q6_K":
				switch {
				case 2*k < 4:
					g.i("VSHL $%d, V%d.B16, V27.B16", 4-2*k, 24+v)
				case 2*k > 4:
					g.i("VUSHR $%d, V%d.B16, V27.B16", 2*k-4, 24+v)
				default:
					g.i("VORR V%d.B16, V%d.B16, V27.B16", 24+v, 24+v)
				}
				g.i("VAND V31.B16, V27.B16, V27.B16")
				g.i("VORR V27.B16, V%d.B16, V%d.B16", 2+v, 2+v)
				g.i("VSUB V26.B16, V%d.B16, V%d.B16", 2+v, 2+v)
			}
		}
		g.i("ADD $%d, R1, R7", 64*j)
		g.i("VLD1 (R7), [V4.B16, V5.B16]")
		if kind == "Q6_K" {
			neonKIntDot(g, 6, 2, 4, dotprod)
			neonKIntDot(g, 8, 3, 5, dotprod)
			g.i(addv(6, 6))
			g.i(addv(8, 8))
			g.i("FMOVS F6, %d(R2)", 8*j)
			g.i("FMOVS F8, %d(R2)", 8*j+4)
			continue
		}
		neonKIntDot(g, 6, 2, 4, dotprod)
		if dotprod {
			g.i(sdot(6, 3, 5))
		} else {
			g.i(smull(7, 3, 5))
			g.i(smlal2(7, 3, 5))
			g.i(sadalp(6, 7))
		}
		g.i(addv(6, 6))
		g.i("FMOVS F6, %d(R2)", 4*j)
	}
	g.i("RET")
	g.p("")
}
