package main

import "fmt"

// Block-quantized weights (spec/sinf.md §5.2): rows of nb blocks of 32
// weights, a block an F16 scale d then 32 int8 (Q8_0, 34 bytes) or 16 bytes
// of nibbles, elements 0–15 low and 16–31 high, offset by 8 (Q4_0, 18 bytes).
// The AVX2 kernels below serve the AVX-512 set too: at one block of 32
// weights per step, 256-bit registers already outrun memory.

type qtype struct {
	name string // Q8_0, Q4_0, Q5_0, Q5_1
	bb   int    // bytes per block
	qh   int    // offset of the 32 high bits (Q5_0, Q5_1; 0: none)
	qs   int    // offset of the levels (int8 or nibbles)
	min  bool   // an F16 minimum at offset 2, added to every weight (Q5_1)
}

var qtypes = []qtype{{name: "Q8_0", bb: 34, qs: 2}, {name: "Q4_0", bb: 18, qs: 2}}

// q5types are GGML's Q5_0 (d, qh, nibbles; weight (q−16)·d) and Q5_1 (d, m,
// qh, nibbles; weight q·d + m), q = nibble | bit·16 with bit e of the
// little-endian qh word element e's fifth bit (spec §5.2): llama-quantize's
// fallbacks of Q4_K and Q5_K for rows that are not whole super-blocks, which
// most matrices of a Q4_K_M SmolLM2-135M (hidden 576) take. amd64 only (the
// NEON set runs them portably).
var q5types = []qtype{{name: "Q5_0", bb: 22, qh: 2, qs: 6}, {name: "Q5_1", bb: 24, qh: 4, qs: 8, min: true}}

// q5Consts sets the registers q5Bits uses: Y15 the byte shuffle that puts
// byte i/8 of a broadcast dword in byte i (lane-local: the high lane's
// indices 2, 3), Y8 bytes with every bit but i mod 8 set, Y12 all ones and
// Y7 bytes 0x10 (tmp is clobbered).
func q5Consts(g *gen, tmp string) {
	g.i("VMOVDQU q5Shuf<>(SB), Y15")
	g.i("VMOVDQU q5Bits<>(SB), Y8")
	g.i("VPCMPEQB Y12, Y12, Y12")
	g.i("MOVL $0x10101010, %s", tmp)
	g.i("VMOVD %s, X7", tmp)
	g.i("VPBROADCASTD X7, Y7")
}

// q5Bits ORs the fifth bits of the block whose qh word is at mem into the
// 32 level bytes of Y<u> (element order), 0x10 where the bit is set; Y6 is
// clobbered. The bit-to-byte expansion of GGML's AVX2 bytes_from_bits_32.
func q5Bits(g *gen, mem string, u int) {
	g.i("VPBROADCASTD %s, Y6", mem)
	g.i("VPSHUFB Y15, Y6, Y6")
	g.i("VPOR Y8, Y6, Y6")
	g.i("VPCMPEQB Y12, Y6, Y6")
	g.i("VPAND Y7, Y6, Y6")
	g.i("VPOR Y6, Y%d, Y%d", u, u)
}

// q5Data is the constants of q5Consts.
func q5Data(g *gen) {
	for i := 0; i < 32; i++ {
		g.p("DATA q5Shuf<>+%d(SB)/1, $%d", i, i/8)
	}
	g.p("GLOBL q5Shuf<>(SB), RODATA|NOPTR, $32")
	for i := 0; i < 4; i++ {
		g.p("DATA q5Bits<>+%d(SB)/8, $0x7fbfdfeff7fbfdfe", 8*i)
	}
	g.p("GLOBL q5Bits<>(SB), RODATA|NOPTR, $32")
	for i := 0; i < 32; i++ { // qaxpy4's per-dword shift counts: element i's bit
		g.p("DATA q5Shifts<>+%d(SB)/4, $%d", 4*i, i)
	}
	g.p("GLOBL q5Shifts<>(SB), RODATA|NOPTR, $128")
	for i := 0; i < 8; i++ {
		g.p("DATA q5One<>+%d(SB)/4, $1", 4*i)
		g.p("DATA q5Nib<>+%d(SB)/4, $15", 4*i)
	}
	g.p("GLOBL q5One<>(SB), RODATA|NOPTR, $32")
	g.p("GLOBL q5Nib<>(SB), RODATA|NOPTR, $32")
}

// qConsts sets Y14 to sixteen int16 ones, then qMasks (with R13).
func qConsts(g *gen) {
	g.i("VPCMPEQW Y14, Y14, Y14")
	g.i("VPSRLW $15, Y14, Y14")
	qMasks(g, "R13")
}

// qMasks sets Y13 to bytes 0x0F and Y12 to bytes 8 (tmp is clobbered).
func qMasks(g *gen, tmp string) {
	g.i("MOVL $0x0f0f0f0f, %s", tmp)
	g.i("VMOVD %s, X13", tmp)
	g.i("VPBROADCASTD X13, Y13")
	g.i("MOVL $0x08080808, %s", tmp)
	g.i("VMOVD %s, X12", tmp)
	g.i("VPBROADCASTD X12, Y12")
}

// vpdpbusdVEX encodes the AVX-VNNI VPDPBUSD Ydst, Yu, Ys (Intel operand
// order: ymm1 += Σ of four u8(ymm2)·s8(ymm3) per dword, VEX.256.66.0F38.W0
// 50 /r) as bytes: Go's assembler knows only the EVEX form of AVX512-VNNI,
// which a CPU with AVX-VNNI but no AVX-512 (Alder Lake and later client
// Intel) cannot run. Registers Y0–Y15, register operands only.
func vpdpbusdVEX(dst, u, s int) string {
	if dst > 15 || u > 15 || s > 15 {
		panic("vpdpbusdVEX needs Y0..Y15")
	}
	b1 := (^dst>>3&1)<<7 | 1<<6 | (^s>>3&1)<<5 | 0x02 // R̄ X̄ B̄, map 0F38
	b2 := (^u&15)<<3 | 1<<2 | 0x01                    // W0, v̄v̄v̄v̄ = u, L 256, pp 66
	modrm := 0xC0 | (dst&7)<<3 | s&7
	return fmt.Sprintf("BYTE $0xc4; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x50; BYTE $0x%02x // VPDPBUSD Y%d, Y%d, Y%d (AVX-VNNI, Go operand order)",
		b1, b2, modrm, s, u, dst)
}

// qdotRows: dst[j] = Σ_{b<nb} d_w[b]·d_x[b]·Σ_{e<32} q_w[b][e]·q_x[b][e] for
// j < m, rows r as in dotRows (idx, stride; contiguous rows prefetched pf
// bytes ahead, gathered ones a row ahead). x comes as quantizeX leaves it:
// 64 bytes a block at xq (32 int8 q_x, then d_x eight times as float32) and
// at xd[nb+b] the Q4_0 correction 8·d_x·Σ_e q_x[b][e]. The scales d_w are
// read from the F16 table f16Table (a load, not a conversion). Q8_0: the
// int8 products go through VPMADDUBSW on |w| and x·sign(w) (|w| ≤ 128,
// |x| ≤ 127: no saturation), then VPMADDWD to int32, as GGML's AVX2 dot
// products do. Q4_0 multiplies the unsigned nibbles q (0..15) by x directly
// and subtracts d_w times the correction: Σ (q−8)·x = Σ q·x − 8·Σ x. Q5_0
// and Q5_1 multiply their 5-bit q (0..31, q5Bits) the same way: Q5_0
// subtracts twice the Q4_0 correction (16·Σ x), Q5_1 adds m_w times an
// eighth of it (m·Σ x).
//
// vnni selects the integer dot product: "" the AVX2 pair of multiplies,
// "AVXVNNI" the VEX VPDPBUSD of AVX-VNNI, "AVX512VNNI" the EVEX VPDPBUSD of
// AVX512-VNNI (on 256-bit registers, AVX512VL). Either takes unsigned bytes
// times signed bytes, four products summed into each int32 lane, in place of
// VPMADDUBSW and VPMADDWD: Q8_0 multiplies |w| by x·sign(w) as above, Q4_0
// the nibbles by x.
func (x x86) qdotRows(g *gen, q qtype, vnni string) {
	suffix := x.name
	if vnni != "" {
		suffix = vnni
	}
	name := "qdotRows" + q.name + suffix
	x.text(g, name, 72, "(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int)")
	g.i("MOVQ w+0(FP), R8")
	g.i("MOVQ stride+8(FP), R9")
	g.i("MOVQ idx+16(FP), R12")
	g.i("MOVQ nb+40(FP), CX")
	g.i("MOVQ m+48(FP), BX")
	g.i("MOVQ dst+56(FP), DI")
	g.i("MOVQ pf+64(FP), R10")
	g.i("MOVQ ·f16Table(SB), R14")
	qConsts(g)
	g.i("VMOVDQU qShift4<>(SB), Y11")
	if q.qh > 0 {
		q5Consts(g, "R13")
	}
	g.i("TESTQ BX, BX")
	g.i("JEQ done")
	x86RowStart(g, "pf+64(FP)")
	g.i("MOVQ xq+24(FP), SI")
	g.i("MOVQ xd+32(FP), DX")
	g.i("MOVQ CX, R13")
	g.i("NEGQ R13") // R13 counts blocks up from −nb (MOVWLZX needs R13 free: R15 counts)
	g.i("MOVQ R13, R15")
	g.i("XORQ AX, AX")
	g.i("VXORPS Y0, Y0, Y0")
	g.i("VXORPS Y1, Y1, Y1")
	g.i("VXORPS X9, X9, X9")
	g.i("VXORPS X10, X10, X10")
	block := func(k, acc int) {
		mem := func(off int) string { return fmt.Sprintf("%d(R8)(AX*1)", k*q.bb+off) }
		// u: the unsigned bytes, s: the signed ones (a register; ""
		// where the AVX2 form reads x from memory).
		u, sx := 4, 3
		if q.name == "Q8_0" {
			g.i("VMOVDQU %s, Y2", mem(2))
			g.i("VMOVDQU %d(SI), Y3", 64*k)
			g.i("VPSIGNB Y2, Y2, Y4")
			g.i("VPSIGNB Y2, Y3, Y3")
		} else {
			// The 16 bytes in both halves, the high half's dwords shifted
			// right by 4 (Y11), then masked: low nibbles below, high
			// nibbles above. Two ALU operations where VPSRLW, VINSERTI128
			// and VPAND took three: 30% of the block's time on Zen 3.
			g.i("VBROADCASTI128 %s, Y2", mem(q.qs))
			g.i("VPSRLVD Y11, Y2, Y2")
			g.i("VPAND Y13, Y2, Y2")
			if q.qh > 0 {
				q5Bits(g, mem(q.qh), 2)
			}
			u = 2
			if vnni == "AVXVNNI" {
				g.i("VMOVDQU %d(SI), Y3", 64*k)
			}
		}
		switch vnni {
		case "":
			if q.name == "Q8_0" {
				g.i("VPMADDUBSW Y3, Y4, Y4")
			} else {
				g.i("VPMADDUBSW %d(SI), Y2, Y4", 64*k)
			}
			g.i("VPMADDWD Y14, Y4, Y4")
			g.i("VCVTDQ2PS Y4, Y4")
		case "AVXVNNI":
			g.i("VPXOR Y6, Y6, Y6")
			g.i(vpdpbusdVEX(6, u, sx))
			g.i("VCVTDQ2PS Y6, Y4")
		case "AVX512VNNI":
			g.i("VPXOR Y6, Y6, Y6")
			if q.name == "Q8_0" {
				g.i("VPDPBUSD Y%d, Y%d, Y6", sx, u)
			} else {
				g.i("VPDPBUSD %d(SI), Y%d, Y6", 64*k, u)
			}
			g.i("VCVTDQ2PS Y6, Y4")
		default:
			panic("qdotRows: vnni " + vnni)
		}
		g.i("MOVWLZX %s, R13", mem(0))
		g.i("VBROADCASTSS (R14)(R13*4), Y5") // d_w
		if q.name == "Q4_0" || q.name == "Q5_0" {
			g.i("VFMADD231SS %d(DX)(CX*4), X5, X%d", 4*k, 9+k)
		}
		g.i("VMULPS Y5, Y4, Y4")
		g.i("VFMADD231PS %d(SI), Y4, Y%d", 64*k+32, acc) // · d_x
		if q.min {
			g.i("MOVWLZX %s, R13", mem(2))
			g.i("VMOVSS (R14)(R13*4), X6") // m_w
			g.i("VFMADD231SS %d(DX)(CX*4), X6, X%d", 4*k, 9+k)
		}
	}
	g.i("CMPQ R15, $-2")
	g.i("JG one")
	g.p("pair:")
	for off := 0; off < 2*q.bb; off += 64 {
		g.i("PREFETCHT0 %d(R11)(AX*1)", off)
	}
	block(0, 0)
	block(1, 1)
	g.i("ADDQ $%d, AX", 2*q.bb)
	g.i("ADDQ $128, SI")
	g.i("ADDQ $8, DX")
	g.i("ADDQ $2, R15")
	g.i("CMPQ R15, $-2")
	g.i("JLE pair")
	g.p("one:")
	g.i("TESTQ R15, R15")
	g.i("JEQ sum")
	g.i("PREFETCHT0 (R11)(AX*1)")
	block(0, 0)
	g.p("sum:")
	g.i("VADDPS Y1, Y0, Y0")
	g.i("VEXTRACTF128 $1, Y0, X1")
	g.i("VADDPS X1, X0, X0")
	g.i("VHADDPS X0, X0, X0")
	g.i("VHADDPS X0, X0, X0")
	switch {
	case q.name == "Q4_0":
		g.i("VADDSS X10, X9, X9")
		g.i("VSUBSS X9, X0, X0")
	case q.name == "Q5_0":
		g.i("VADDSS X10, X9, X9")
		g.i("VADDSS X9, X9, X9")
		g.i("VSUBSS X9, X0, X0")
	case q.min:
		g.i("VADDSS X10, X9, X9")
		g.i("MOVL $0x3e000000, R13") // 1/8
		g.i("VMOVD R13, X10")
		g.i("VFMADD231SS X10, X9, X0")
	}
	g.i("VMOVSS X0, (DI)")
	x86RowEnd(g)
}

// qDequant leaves the 32 weights q of the block at (R8)(AX*1) as float32 in
// Y0..Y3 (elements 0–7, 8–15, 16–23, 24–31) and its scale d (from the F16
// table at R14; R13 is clobbered) in Y5; for Q5_1 its minimum in Y6 (Q5_0 and
// Q5_1 need qShift4 in Y11 and q5Consts).
func qDequant(g *gen, q qtype) {
	g.i("MOVWLZX (R8)(AX*1), R13")
	g.i("VBROADCASTSS (R14)(R13*4), Y5")
	if q.qh > 0 {
		g.i("VBROADCASTI128 %d(R8)(AX*1), Y4", q.qs)
		g.i("VPSRLVD Y11, Y4, Y4")
		g.i("VPAND Y13, Y4, Y4")
		q5Bits(g, fmt.Sprintf("%d(R8)(AX*1)", q.qh), 4)
		ext := "VPMOVZXBD"
		if !q.min {
			g.i("VPSUBB Y7, Y4, Y4") // q − 16, signed
			ext = "VPMOVSXBD"
		}
		g.i("%s X4, Y0", ext)
		g.i("VPSRLDQ $8, X4, X6")
		g.i("%s X6, Y1", ext)
		g.i("VEXTRACTI128 $1, Y4, X4")
		g.i("%s X4, Y2", ext)
		g.i("VPSRLDQ $8, X4, X6")
		g.i("%s X6, Y3", ext)
		if q.min {
			g.i("MOVWLZX 2(R8)(AX*1), R13")
			g.i("VBROADCASTSS (R14)(R13*4), Y6")
		}
	} else if q.name == "Q8_0" {
		for k := 0; k < 4; k++ {
			g.i("VPMOVSXBD %d(R8)(AX*1), Y%d", 2+8*k, k)
		}
	} else {
		g.i("VMOVDQU 2(R8)(AX*1), X6")
		g.i("VPAND X13, X6, X7")
		g.i("VPSUBB X12, X7, X7")
		g.i("VPSRLW $4, X6, X6")
		g.i("VPAND X13, X6, X6")
		g.i("VPSUBB X12, X6, X6")
		g.i("VPMOVSXBD X7, Y0")
		g.i("VPSRLDQ $8, X7, X7")
		g.i("VPMOVSXBD X7, Y1")
		g.i("VPMOVSXBD X6, Y2")
		g.i("VPSRLDQ $8, X6, X6")
		g.i("VPMOVSXBD X6, Y3")
	}
	for k := 0; k < 4; k++ {
		g.i("VCVTDQ2PS Y%d, Y%d", k, k)
	}
}

// qcvt: dst[e] = w[e] for e < 32·nb, the nb blocks at src dequantized.
func (x x86) qcvt(g *gen, q qtype) {
	name := "qcvt" + q.name + x.name
	x.text(g, name, 24, "(dst *float32, src unsafe.Pointer, nb int)")
	g.i("MOVQ dst+0(FP), DI")
	g.i("MOVQ src+8(FP), R8")
	g.i("MOVQ nb+16(FP), CX")
	g.i("MOVQ ·f16Table(SB), R14")
	qMasks(g, "R13")
	if q.qh > 0 {
		g.i("VMOVDQU qShift4<>(SB), Y11")
		q5Consts(g, "R13")
	}
	g.i("XORQ AX, AX")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("blk:")
	qDequant(g, q)
	for k := 0; k < 4; k++ {
		g.i("VMULPS Y5, Y%d, Y%d", k, k) // q·d, then + m: format.Dequantize's roundings
		if q.min {
			g.i("VADDPS Y6, Y%d, Y%d", k, k)
		}
		g.i("VMOVUPS Y%d, %d(DI)", k, 32*k)
	}
	g.i("ADDQ $%d, AX", q.bb)
	g.i("ADDQ $128, DI")
	g.i("DECQ CX")
	g.i("JNE blk")
	g.p("done:")
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}

// quantizeX: for b < nb, the 32 float32 at x + 128b become int8 at xq + 64b,
// with one scale per group of g consecutive blocks (nb a multiple of g; g 1
// for quantizeX, 8 for the K-quants' quantizeXK): d = max|x| over the group
// /127, id = 1/d (0 when d = 0), q = x·id rounded to nearest even
// (VCVTPS2DQ under the default rounding mode), followed by d eight times;
// xd[b] = d and xd[nb+b] = (8·Σ q)·d.
// The same arithmetic as the portable quantizeXGroups, so the results are
// equal.
func quantizeXAVX2(g *gen) {
	for l, v := range []int{0, 4, 1, 5, 2, 6, 3, 7} { // VPERMD order after the two packs
		g.p("DATA qPackPerm<>+%d(SB)/4, $%d", 4*l, v)
	}
	g.p("GLOBL qPackPerm<>(SB), RODATA|NOPTR, $32")
	for l := 0; l < 8; l++ { // qdotRows' Q4_0 unpacking: shift the high half's dwords by 4
		g.p("DATA qShift4<>+%d(SB)/4, $%d", 4*l, 4*(l/4))
	}
	g.p("GLOBL qShift4<>(SB), RODATA|NOPTR, $32")
	for l := 0; l < 4; l++ { // qgemm8x4Q8_0AVX2: the sign bits of packed Q8_0 levels
		g.p("DATA qSign<>+%d(SB)/8, $0x8080808080808080", 8*l)
	}
	g.p("GLOBL qSign<>(SB), RODATA|NOPTR, $32")
	q5Data(g)
	g.p("")
	name := "quantizeXAVX2"
	g.decl("//go:noescape\nfunc %s(xq *int8, xd *float32, x *float32, nb, group int)", name)
	g.decl("")
	g.p("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	g.i("MOVQ xq+0(FP), DI")
	g.i("MOVQ xd+8(FP), DX")
	g.i("MOVQ x+16(FP), SI")
	g.i("MOVQ nb+24(FP), CX")
	g.i("MOVQ group+32(FP), R10")
	g.i("LEAQ (DX)(CX*4), R9") // the sums
	g.i("MOVL $0x7fffffff, R13")
	g.i("VMOVD R13, X15")
	g.i("VPBROADCASTD X15, Y15")
	g.i("MOVL $0x42fe0000, R13") // 127.0
	g.i("VMOVD R13, X14")
	g.i("MOVL $0x3f800000, R13") // 1.0
	g.i("VMOVD R13, X13")
	g.i("VXORPS X12, X12, X12")
	g.i("VMOVDQU qPackPerm<>(SB), Y11")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("group:")
	// max|x| over the group's g blocks into Y4
	g.i("MOVQ SI, R11")
	g.i("MOVQ R10, R12")
	g.i("VXORPS Y4, Y4, Y4")
	g.p("amax:")
	for k := 0; k < 4; k++ {
		g.i("VANDPS %d(R11), Y15, Y%d", 32*k, k)
	}
	g.i("VMAXPS Y1, Y0, Y0")
	g.i("VMAXPS Y3, Y2, Y2")
	g.i("VMAXPS Y2, Y0, Y0")
	g.i("VMAXPS Y0, Y4, Y4")
	g.i("ADDQ $128, R11")
	g.i("DECQ R12")
	g.i("JNE amax")
	g.i("VEXTRACTF128 $1, Y4, X5")
	g.i("VMAXPS X5, X4, X4")
	g.i("VPERMILPS $0x4e, X4, X5")
	g.i("VMAXPS X5, X4, X4")
	g.i("VPERMILPS $0xb1, X4, X5")
	g.i("VMAXPS X5, X4, X4")
	g.i("VDIVSS X14, X4, X6")     // d = amax / 127
	g.i("VDIVSS X6, X13, X7")     // 1/d
	g.i("VCMPSS $4, X12, X6, X8") // d ≠ 0
	g.i("VANDPS X8, X7, X7")
	g.i("VBROADCASTSS X7, Y7")
	g.i("VBROADCASTSS X6, Y10")
	g.i("MOVQ R10, R12")
	g.p("blk:")
	for k := 0; k < 4; k++ {
		g.i("VMULPS %d(SI), Y7, Y%d", 32*k, k)
		g.i("VCVTPS2DQ Y%d, Y%d", k, k)
	}
	g.i("VMOVSS X6, (DX)")
	g.i("VPADDD Y1, Y0, Y8")
	g.i("VPADDD Y3, Y2, Y9")
	g.i("VPADDD Y9, Y8, Y8")
	g.i("VEXTRACTI128 $1, Y8, X9")
	g.i("VPADDD X9, X8, X8")
	g.i("VPSHUFD $0x4e, X8, X9")
	g.i("VPADDD X9, X8, X8")
	g.i("VPSHUFD $0xb1, X8, X9")
	g.i("VPADDD X9, X8, X8")
	g.i("VPSLLD $3, X8, X8")
	g.i("VCVTDQ2PS X8, X8")
	g.i("VMULSS X6, X8, X8")
	g.i("VMOVSS X8, (R9)")
	g.i("VMOVUPS Y10, 32(DI)")
	g.i("VPACKSSDW Y1, Y0, Y0")
	g.i("VPACKSSDW Y3, Y2, Y2")
	g.i("VPACKSSWB Y2, Y0, Y0")
	g.i("VPERMD Y0, Y11, Y0")
	g.i("VMOVDQU Y0, (DI)")
	g.i("ADDQ $128, SI")
	g.i("ADDQ $64, DI")
	g.i("ADDQ $4, DX")
	g.i("ADDQ $4, R9")
	g.i("DECQ CX")
	g.i("DECQ R12")
	g.i("JNE blk")
	g.i("TESTQ CX, CX")
	g.i("JNE group")
	g.p("done:")
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}

// ---------------------------------------------------------------- arm64 ---

// NEON forms of the block-quantized kernels, baseline ARMv8.0 (SMULL/SMLAL2
// and pairwise adds, no SDOT): one block of 32 weights a step.

func smull(d, n, m int) string {
	return word(0x0E20C000|m<<16|n<<5|d, "SMULL V%d.8H, V%d.8B, V%d.8B", d, n, m)
}
func smlal2(d, n, m int) string {
	return word(0x4E208000|m<<16|n<<5|d, "SMLAL2 V%d.8H, V%d.16B, V%d.16B", d, n, m)
}
func saddlp(d, n int) string { return word(0x4E602800|n<<5|d, "SADDLP V%d.4S, V%d.8H", d, n) }
func sadalp(d, n int) string { return word(0x4E606800|n<<5|d, "SADALP V%d.4S, V%d.8H", d, n) }
func scvtfV(d, n int) string { return vop2("SCVTF", 0x4E21D800, d, n) }

// sxtl widens signed lanes: bytes to halfwords (h false) or halfwords to
// words (h true), of the low (hi false) or high half of Vn (SSHLL{2} #0).
func sxtl(d, n int, h, hi bool) string {
	enc, asm := 0x0F08A400, "SSHLL V%d.8H, V%d.8B, #0"
	if h {
		enc, asm = 0x0F10A400, "SSHLL V%d.4S, V%d.4H, #0"
	}
	if hi {
		enc |= 1 << 30
		asm = map[bool]string{false: "SSHLL2 V%d.8H, V%d.16B, #0", true: "SSHLL2 V%d.4S, V%d.8H, #0"}[h]
	}
	return word(enc|n<<5|d, asm, d, n)
}

// neonQWeights loads the 32 weights of the block at R9 as signed bytes:
// elements 0–15 in V0, 16–31 in V1 (Q4_0: V30 holds bytes 0x0F, V29 bytes 8).
// Q5_0 and Q5_1 take their fifth bits through the constants c5 of
// neonQ5Consts (V29 bytes 16, V2–V4 clobbered): Q5_0's bytes are q − 16,
// Q5_1's q (0..31).
func neonQWeights(g *gen, q qtype, c5 [3]int) {
	g.i("ADD $%d, R9, R15", q.qs)
	if q.name == "Q8_0" {
		g.i("VLD1 (R15), [V0.B16, V1.B16]")
		return
	}
	g.i("VLD1 (R15), [V0.B16]")
	g.i("VUSHR $4, V0.B16, V1.B16")
	g.i("VAND V30.B16, V0.B16, V0.B16")
	if q.qh > 0 {
		// Byte e of V3:V4 gets qh's byte e/8 (TBL), all ones where its
		// bit e mod 8 is set (CMTST), then 16 there (AND).
		g.i("MOVWU %d(R9), R15", q.qh)
		g.i("VMOV R15, V2.S[0]")
		g.i(tbl(3, 2, c5[0]))
		g.i(tbl(4, 2, c5[1]))
		g.i(cmtst(3, 3, c5[2]))
		g.i(cmtst(4, 4, c5[2]))
		g.i("VAND V29.B16, V3.B16, V3.B16")
		g.i("VAND V29.B16, V4.B16, V4.B16")
		g.i("VORR V3.B16, V0.B16, V0.B16")
		g.i("VORR V4.B16, V1.B16, V1.B16")
		if q.min {
			return
		}
	}
	g.i("VSUB V29.B16, V0.B16, V0.B16")
	g.i("VSUB V29.B16, V1.B16, V1.B16")
}

// tbl is TBL Vd.16B, {Vn.16B}, Vm.16B: byte i of Vd is byte Vm[i] of Vn (0
// for an index above 15).
func tbl(d, n, m int) string {
	return word(0x4E000000|m<<16|n<<5|d, "TBL V%d.16B, [V%d.16B], V%d.16B", d, n, m)
}

// cmtst is CMTST Vd.16B, Vn.16B, Vm.16B: byte i all ones where Vn[i] & Vm[i]
// is not 0, else 0.
func cmtst(d, n, m int) string {
	return word(0x4E208C00|m<<16|n<<5|d, "CMTST V%d.16B, V%d.16B, V%d.16B", d, n, m)
}

// neonQ5Consts sets what neonQWeights needs for Q5_0/Q5_1 (R15 clobbered):
// V29 bytes 16, and in c5 the TBL indices of elements 0–15 (qh bytes 0, 1,
// eight times each) and 16–31 (bytes 2, 3) and the bit of each byte (1, 2,
// …, 128, twice). Nothing for the other dtypes.
func neonQ5Consts(g *gen, q qtype, c5 [3]int) {
	if q.qh == 0 {
		return
	}
	g.i("VMOVI $16, V29.B16")
	for i, half := range [][2]uint64{{0, 0x0101010101010101}, {0x0202020202020202, 0x0303030303030303}} {
		for l, v := range half {
			g.i("MOVD $0x%016x, R15", v)
			g.i("VMOV R15, V%d.D[%d]", c5[i], l)
		}
	}
	g.i("MOVD $0x8040201008040201, R15")
	g.i("VDUP R15, V%d.D2", c5[2])
}

// neonQScale sets V20 to the block at R9's scale d_w (from the F16 table at
// R14) times F<by>, in every lane (R15, R16 clobbered).
func neonQScale(g *gen, by int) { neonQScaleAt(g, by, 0) }

// neonQScaleAt is neonQScale for the F16 at R9 + off (Q5_1's minimum at 2).
func neonQScaleAt(g *gen, by, off int) {
	if off == 0 {
		g.i("MOVHU (R9), R15")
	} else {
		g.i("MOVHU %d(R9), R15", off)
	}
	g.i("MOVWU (R14)(R15<<2), R16")
	g.i("FMOVS R16, F20")
	g.i("FMULS F%d, F20, F20", by)
	g.i("VDUP V20.S[0], V20.S4")
}

func neonQConsts(g *gen) {
	g.i("MOVD ·f16Table(SB), R14")
	g.i("VMOVI $15, V30.B16")
	g.i("VMOVI $8, V29.B16")
}

// neonQDequant leaves the block at R9's 32 weights as float32 in V8..V15
// (four each, in element order), unscaled.
func neonQDequant(g *gen, q qtype, c5 [3]int) {
	neonQWeights(g, q, c5)
	g.i(sxtl(2, 0, false, false))
	g.i(sxtl(3, 0, false, true))
	g.i(sxtl(4, 1, false, false))
	g.i(sxtl(5, 1, false, true))
	for k := 0; k < 4; k++ {
		g.i(sxtl(8+2*k, 2+k, true, false))
		g.i(sxtl(9+2*k, 2+k, true, true))
	}
	for k := 8; k < 16; k++ {
		g.i(scvtfV(k, k))
	}
}

// sdot is SDOT Vd.4S, Vn.16B, Vm.16B (FEAT_DotProd): each int32 lane of Vd
// adds the four products of the signed bytes in its lane of Vn and Vm.
func sdot(d, n, m int) string {
	return word(0x4E809400|m<<16|n<<5|d, "SDOT V%d.4S, V%d.16B, V%d.16B", d, n, m)
}

// neonQDotRows is qdotRows (x86's) for NEON: per block, SMULL/SMLAL2 pair
// the int8 products into int16 (|sum| ≤ 2·128·127), SADDLP/SADALP add them
// into int32, SCVTF and a multiply-add by d_w·d_x (d_x at +32 in the 64-byte
// x block) accumulate. With dotprod (the "DOTPROD" form, ARMv8.2's
// FEAT_DotProd: Cortex-A55/A75 and later, the Orin's A78AE), two SDOT into a
// zeroed register take the place of those six instructions.
func neonQDotRows(g *gen, q qtype, dotprod bool) {
	name := "qdotRows" + q.name + "NEON"
	if dotprod {
		name = "qdotRows" + q.name + "DOTPROD"
	}
	neonText(g, name, 72, "(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int)")
	g.i("MOVD w+0(FP), R0")
	g.i("MOVD stride+8(FP), R1")
	g.i("MOVD idx+16(FP), R11")
	g.i("MOVD xq+24(FP), R2")
	g.i("MOVD nb+40(FP), R3")
	g.i("MOVD m+48(FP), R6")
	g.i("MOVD dst+56(FP), R7")
	g.i("MOVD pf+64(FP), R8")
	neonQConsts(g)
	c5 := [3]int{25, 26, 27}
	neonQ5Consts(g, q, c5)
	if q.min {
		g.i("MOVD xd+32(FP), R19")
		g.i("ADD R3<<2, R19, R19") // the x block sums 8·d_x·Σq
	}
	g.i("CBZ R6, done")
	g.i("CBZ R3, zeros")
	neonRowStart(g)
	g.i("MOVD R2, R4")
	g.i("MOVD R3, R5")
	zero(g, 16, 17)
	if q.min {
		g.i("MOVD R19, R20")
		zero(g, 23)
	}
	g.p("blk:")
	g.i("PRFM (R10), PLDL1KEEP")
	g.i("ADD $%d, R10, R10", q.bb)
	g.i("FMOVS 32(R4), F21")
	neonQScale(g, 21)
	neonQWeights(g, q, c5)
	g.i("VLD1.P 64(R4), [V2.B16, V3.B16, V4.B16, V5.B16]")
	neonIntDot32(g, 0, 2, 1, 3, dotprod)
	g.i(scvtfV(6, 6))
	g.i("VFMLA V20.S4, V6.S4, V16.S4")
	if q.min { // + m_w·(8·d_x·Σq), an eighth of it below
		g.i("MOVHU 2(R9), R15")
		g.i("MOVWU (R14)(R15<<2), R16")
		g.i("FMOVS R16, F22")
		g.i("FMOVS.P 4(R20), F24")
		g.i("FMADDS F22, F23, F24, F23")
	}
	g.i("ADD $%d, R9, R9", q.bb)
	g.i("SUBS $1, R5, R5")
	g.i("BNE blk")
	g.i(faddpV(16, 16, 16))
	g.i(faddpS(16, 16))
	if q.min {
		g.i("FMOVS $0.125, F24")
		g.i("FMADDS F24, F16, F23, F16")
	}
	g.i("FMOVS F16, (R7)")
	g.i("ADD $4, R7, R7")
	neonRowNext(g)
	g.i("B done")
	g.p("zeros:") // nb = 0: every row's sum is 0
	g.i("MOVW ZR, (R7)")
	g.i("ADD $4, R7, R7")
	g.i("SUBS $1, R6, R6")
	g.i("BNE zeros")
	g.p("done:")
	g.i("RET")
	g.p("")
}

// neonIntDot32 sets V6.4S to lane sums of the products of the signed bytes
// of V<w0> with V<x0> and V<w1> with V<x1> (32 pairs): two SDOT into a
// zeroed V6 with dotprod, else SMULL, SMLAL2 (int16 pairs), SADDLP, SADALP
// (V7 clobbered).
func neonIntDot32(g *gen, w0, x0, w1, x1 int, dotprod bool) {
	if dotprod {
		g.i("VEOR V6.B16, V6.B16, V6.B16")
		g.i(sdot(6, w0, x0))
		g.i(sdot(6, w1, x1))
		return
	}
	g.i(smull(6, w0, x0))
	g.i(smlal2(6, w0, x0))
	g.i(smull(7, w1, x1))
	g.i(smlal2(7, w1, x1))
	g.i(saddlp(6, 6))
	g.i(sadalp(6, 7))
}

// neonQAxpyRows is qaxpyRows for NEON.
func neonQAxpyRows(g *gen, q qtype) {
	name := "qaxpyRows" + q.name + "NEON"
	neonText(g, name, 64, "(dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, nb, m int, pf int)")
	g.i("MOVD dst+0(FP), R7")
	g.i("MOVD w+8(FP), R0")
	g.i("MOVD stride+16(FP), R1")
	g.i("MOVD idx+24(FP), R11")
	g.i("MOVD a+32(FP), R2")
	g.i("MOVD nb+40(FP), R3")
	g.i("MOVD m+48(FP), R6")
	g.i("MOVD pf+56(FP), R8")
	neonQConsts(g)
	g.i("CBZ R3, done")
	g.i("CBZ R6, done")
	neonRowStart(g)
	g.i("FMOVS (R2), F24")
	g.i("ADD $4, R2, R2")
	g.i("FCMPS $(0.0), F24")
	g.i("BEQ skip")
	g.i("MOVD R7, R4")
	g.i("MOVD R3, R5")
	g.p("blk:")
	g.i("PRFM (R10), PLDL1KEEP")
	g.i("ADD $%d, R10, R10", q.bb)
	neonQScale(g, 24)
	neonQDequant(g, q, [3]int{})
	for h := 0; h < 2; h++ {
		g.i("VLD1 (R4), [V16.S4, V17.S4, V18.S4, V19.S4]")
		for k := 0; k < 4; k++ {
			g.i("VFMLA V20.S4, V%d.S4, V%d.S4", 8+4*h+k, 16+k)
		}
		g.i("VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R4)")
	}
	g.i("ADD $%d, R9, R9", q.bb)
	g.i("SUBS $1, R5, R5")
	g.i("BNE blk")
	g.p("skip:")
	neonRowNext(g)
	g.p("done:")
	g.i("RET")
	g.p("")
}

// neonQAxpy4 is qaxpy4 for NEON: dst[e] += Σ_{r<4} a_r·w_r[e], each block
// of dst (32 floats, V16–V19 and V24–V27) loaded and stored once per four
// rows, the rows' blocks dequantized in registers; p0..p3 prefetched at the
// same pace. The accumulation of down_proj.weight_t's neuron rows (AddRows).
func neonQAxpy4(g *gen, q qtype) {
	name := "qaxpy4" + q.name + "NEON"
	neonText(g, name, 96, "(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int)")
	g.i("MOVD dst+0(FP), R4")
	for r := 0; r < 4; r++ {
		g.i("MOVD w%d+%d(FP), R%d", r, 8+8*r, r)
		g.i("MOVD p%d+%d(FP), R%d", r, 40+8*r, 10+r)
	}
	aregs := []int{21, 22, 23, 28}
	for r, f := range aregs {
		g.i("FMOVS a%d+%d(FP), F%d", r, 72+4*r, f)
	}
	g.i("MOVD nb+88(FP), R5")
	neonQConsts(g)
	c5 := [3]int{6, 7, 31}
	neonQ5Consts(g, q, c5)
	g.i("CBZ R5, done")
	g.p("blk:")
	g.i("VLD1.P 64(R4), [V16.S4, V17.S4, V18.S4, V19.S4]")
	g.i("VLD1 (R4), [V24.S4, V25.S4, V26.S4, V27.S4]")
	g.i("SUB $64, R4, R4")
	for r := 0; r < 4; r++ {
		g.i("PRFM (R%d), PLDL1KEEP", 10+r)
		g.i("ADD $%d, R%d, R%d", q.bb, 10+r, 10+r)
		g.i("MOVD R%d, R9", r)
		neonQScale(g, aregs[r])
		neonQDequant(g, q, c5)
		for k := 0; k < 8; k++ {
			acc := 16 + k
			if k >= 4 {
				acc = 24 + k - 4
			}
			g.i("VFMLA V20.S4, V%d.S4, V%d.S4", 8+k, acc)
		}
		if q.min { // + a_r·m_r to every element
			neonQScaleAt(g, aregs[r], 2)
			for k := 0; k < 8; k++ {
				acc := 16 + k
				if k >= 4 {
					acc = 24 + k - 4
				}
				g.i(faddV(acc, acc, 20))
			}
		}
		g.i("ADD $%d, R%d, R%d", q.bb, r, r)
	}
	g.i("VST1.P [V16.S4, V17.S4, V18.S4, V19.S4], 64(R4)")
	g.i("VST1.P [V24.S4, V25.S4, V26.S4, V27.S4], 64(R4)")
	g.i("SUBS $1, R5, R5")
	g.i("BNE blk")
	g.p("done:")
	g.i("RET")
	g.p("")
}

// neonQCvt is qcvt for NEON.
func neonQCvt(g *gen, q qtype) {
	name := "qcvt" + q.name + "NEON"
	neonText(g, name, 24, "(dst *float32, src unsafe.Pointer, nb int)")
	g.i("MOVD dst+0(FP), R4")
	g.i("MOVD src+8(FP), R9")
	g.i("MOVD nb+16(FP), R5")
	neonQConsts(g)
	c5 := [3]int{22, 23, 25}
	neonQ5Consts(g, q, c5)
	g.i("FMOVS $1.0, F24")
	g.i("CBZ R5, done")
	g.p("blk:")
	neonQScale(g, 24)
	neonQDequant(g, q, c5)
	for k := 8; k < 16; k++ {
		g.i(fmulV(k, k, 20)) // q·d, then + m: format.Dequantize's roundings
	}
	if q.min {
		neonQScaleAt(g, 24, 2)
		for k := 8; k < 16; k++ {
			g.i(faddV(k, k, 20))
		}
	}
	g.i("VST1.P [V8.S4, V9.S4, V10.S4, V11.S4], 64(R4)")
	g.i("VST1.P [V12.S4, V13.S4, V14.S4, V15.S4], 64(R4)")
	g.i("ADD $%d, R9, R9", q.bb)
	g.i("SUBS $1, R5, R5")
	g.i("BNE blk")
	g.p("done:")
	g.i("RET")
	g.p("")
}

// qaxpy4: dst[e] += Σ_{r<4} a_r·w_r[e] for e < 32·nb, the four block rows
// w0..w3 dequantized in registers; the rows p0..p3 (the caller's next ones)
// are prefetched at the same pace. dst is loaded and stored once per four
// rows, not once per row: four rows' weights share each
// block of dst.
//
// Q5_0 and Q5_1 take the nibbles as Q4_0 does and OR in the fifth bits per
// dword (qh shifted right by the element's index, masked, shifted to bit 4;
// the masks and shift counts from memory, as all sixteen registers are in
// use); Q5_0 subtracts 16·Σ_r s_r, Q5_1 adds Σ_r a_r·m_r.
func (x x86) qaxpy4(g *gen, q qtype) {
	if x.r == "Z" && q.qh > 0 {
		panic("qaxpy4: the Q5 forms are AVX2 only (their masks and shift tables are 32 bytes)")
	}
	v := x.v
	n := 32 / x.vw // registers of a block's 32 weights (and of dst's 32 floats)
	rows, pre := x.axpy4Head(g, "qaxpy4"+q.name+x.name, "nb", 8)
	g.i("MOVQ ·f16Table(SB), R14")
	g.i("MOVL $0x0f, R15") // dword nibble mask
	g.i("VMOVD R15, X13")
	g.i("VPBROADCASTD X13, %s", v(13))
	if q.qh == 0 {
		g.i("MOVL $0xc1000000, R15") // −8.0
		g.i("VMOVD R15, X5")
		g.i("VBROADCASTSS X5, %s", v(5))
	}
	g.i("XORQ AX, AX")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("loop:")
	for _, p := range pre {
		for off := 0; off < q.bb; off += 64 {
			g.i("PREFETCHT0 %d(%s)(AX*1)", off, p)
		}
	}
	for k := 0; k < n; k++ {
		g.i("VMOVUPS %d(DI), %s", 4*x.vw*k, v(k))
	}
	// the block's weights: elements 0–7, 8–15, 16–23, 24–31 (AVX2) or
	// 0–15, 16–31 (AVX-512)
	wr := []int{6, 7, 14, 15}[:n]
	for r, base := range rows {
		mem := func(off int) string { return fmt.Sprintf("%d(%s)(AX*1)", off, base) }
		g.i("MOVWLZX %s, R15", mem(0))
		g.i("VBROADCASTSS (R14)(R15*4), %s", v(4))
		g.i("VMULPS %s, %s, %s", v(8+r), v(4), v(4))
		if q.name == "Q8_0" {
			for k, w := range wr {
				g.i("VPMOVSXBD %s, %s", mem(2+x.vw*k), v(w))
			}
		} else {
			// The first 16 bytes widened to dwords: the low nibble is
			// element j, the high one (a shift, no mask) element 16+j. The
			// offset 8 is subtracted once per block below, as −8·Σ_r s_r.
			nib := v(13)
			if q.qh > 0 {
				nib = "q5Nib<>(SB)"
			}
			lo, hi := wr[:n/2], wr[n/2:]
			for k, w := range lo {
				g.i("VPMOVZXBD %s, %s", mem(q.qs+x.vw*k), v(w))
			}
			for k, w := range lo {
				g.i("VPSRLD $4, %s, %s", v(w), v(hi[k]))
			}
			for _, w := range lo {
				g.i("%s %s, %s, %s", x.and(), nib, v(w), v(w))
			}
			if q.qh > 0 {
				g.i("VPBROADCASTD %s, Y5", mem(q.qh))
				for k, w := range wr {
					g.i("VPSRLVD q5Shifts<>+%d(SB), Y5, Y13", 32*k)
					g.i("VPAND q5One<>(SB), Y13, Y13")
					g.i("VPSLLD $4, Y13, Y13")
					g.i("VPOR Y13, Y%d, Y%d", w, w)
				}
			}
			c := 4 // what the block adds to every element: s_r (Q4_0, Q5_0) or a_r·m_r
			if q.min {
				g.i("MOVWLZX %s, R15", mem(2))
				g.i("VBROADCASTSS (R14)(R15*4), Y13")
				g.i("VMULPS Y%d, Y13, Y13", 8+r)
				c = 13
			}
			if r == 0 {
				g.i("VMOVAPS %s, %s", v(c), v(12))
			} else {
				g.i("VADDPS %s, %s, %s", v(c), v(12), v(12))
			}
		}
		for k, w := range wr {
			g.i("VCVTDQ2PS %s, %s", v(w), v(w))
			g.i("VFMADD231PS %s, %s, %s", v(4), v(w), v(k))
		}
	}
	switch q.name {
	case "Q4_0":
		g.i("VMULPS %s, %s, %s", v(5), v(12), v(12)) // −8·Σ_r s_r
	case "Q5_0":
		g.i("MOVL $0xc1800000, R15") // −16.0
		g.i("VMOVD R15, X13")
		g.i("VBROADCASTSS X13, Y13")
		g.i("VMULPS Y13, Y12, Y12") // −16·Σ_r s_r
	}
	if q.name != "Q8_0" {
		for k := 0; k < n; k++ {
			g.i("VADDPS %s, %s, %s", v(12), v(k), v(k))
		}
	}
	for k := 0; k < n; k++ {
		g.i("VMOVUPS %s, %d(DI)", v(k), 4*x.vw*k)
	}
	loopTail(g, fmt.Sprintf("ADDQ $%d, AX", q.bb), "ADDQ $128, DI")
}
