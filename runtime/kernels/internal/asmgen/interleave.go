package main

// Kernels for the interleaved-rows dtypes Q8_0X16 and Q4_0X16 (spec/sinf.md
// §5.4; kernels/interleave.go). A group of sixteen rows is stored block
// column by block column: per block of 32 elements, the sixteen F16 scales
// (32 bytes), then 64-byte chunks whose byte 4i+m belongs to row i, so a ZMM
// load holds four elements of each row, one row per 32-bit lane. Q8_0X16's
// chunk k holds elements 4k..4k+3 (int8); Q4_0X16's chunk j holds elements
// 8j..8j+3 in its low nibbles and 8j+4..8j+7 in its high ones.

// xgroupBytes is the bytes of one block column of a group: sixteen blocks.
func xgroupBytes(q qtype) int { return 16 * q.bb }

// qdotX16: for g < ng and i < 16, the float32 at dst + 64g + 4i is
// Σ_b d_w·d_x·Σ_e w_e·q_x,e over the nb blocks of row i of group g, groups
// contiguous at w (16·bb·nb bytes each), x as quantizeX leaves it (xq 64
// bytes a block, xd[b] = d_x, xd[nb+b] = 8·d_x·Σq_x). One VPDPBUSD of a
// chunk (unsigned weights: Q4_0's levels, Q8_0's values with the sign bit
// flipped) by four x broadcast adds four products to every row's lane; the
// offsets (Q4_0's −8, Q8_0's +128) come off per block as multiples of
// xd[nb+b]. The rows need no horizontal sum.
func qdotX16(g *gen, q qtype) {
	x := x86{name: "AVX512", r: "Z"}
	name := "qdotX16" + q.name + "AVX512VNNI"
	x.text(g, name, 48, "(w unsafe.Pointer, nb int, xq *int8, xd *float32, ng int, dst *float32)")
	g.i("MOVQ w+0(FP), SI")
	g.i("MOVQ nb+8(FP), R9")
	g.i("MOVQ ng+32(FP), BX")
	g.i("MOVQ dst+40(FP), DI")
	g.i("TESTQ R9, R9")
	g.i("JEQ zero")
	if q.name == "Q4_0" {
		g.i("MOVL $0x0f0f0f0f, AX")
	} else {
		g.i("MOVL $0x80808080, AX")
		g.i("MOVL $0x41800000, DX") // 16.0
		g.i("VPBROADCASTD DX, Z14")
	}
	g.i("VPBROADCASTD AX, Z15")
	g.p("group:")
	g.i("MOVQ xq+16(FP), R8")
	g.i("MOVQ xd+24(FP), R11")
	g.i("LEAQ (R11)(R9*4), R10") // xd[nb+b]
	g.i("MOVQ R9, CX")
	g.i("VPXORD Z0, Z0, Z0")
	acc := []int{1, 2, 10, 11}
	g.p("block:")
	for _, a := range acc {
		g.i("VPXORD Z%d, Z%d, Z%d", a, a, a)
	}
	if q.name == "Q4_0" {
		for j := 0; j < 4; j++ {
			g.i("VMOVDQU64 %d(SI), Z3", 32+64*j)
			g.i("VPSRLW $4, Z3, Z5")
			g.i("VPANDD Z3, Z15, Z4")
			g.i("VPANDD Z5, Z15, Z5")
			g.i("VPDPBUSD.BCST %d(R8), Z4, Z%d", 8*j, acc[(2*j)%4])
			g.i("VPDPBUSD.BCST %d(R8), Z5, Z%d", 8*j+4, acc[(2*j+1)%4])
		}
	} else {
		for k := 0; k < 8; k++ {
			g.i("VPXORD %d(SI), Z15, Z4", 32+64*k)
			g.i("VPDPBUSD.BCST %d(R8), Z4, Z%d", 4*k, acc[k%4])
		}
	}
	g.i("VPADDD Z2, Z1, Z1")
	g.i("VPADDD Z11, Z10, Z10")
	g.i("VPADDD Z10, Z1, Z1")
	g.i("VCVTDQ2PS Z1, Z1")
	g.i("VMULPS.BCST (R11), Z1, Z1")
	if q.name == "Q4_0" {
		g.i("VSUBPS.BCST (R10), Z1, Z1") // − 8·d_x·Σq_x
	} else {
		g.i("VMULPS.BCST (R10), Z14, Z7") // 128·d_x·Σq_x
		g.i("VSUBPS Z7, Z1, Z1")
	}
	g.i("VCVTPH2PS (SI), Z6")
	g.i("VFMADD231PS Z1, Z6, Z0")
	g.i("ADDQ $%d, SI", xgroupBytes(q))
	g.i("ADDQ $64, R8")
	g.i("ADDQ $4, R11")
	g.i("ADDQ $4, R10")
	g.i("DECQ CX")
	g.i("JNE block")
	g.i("VMOVUPS Z0, (DI)")
	g.i("ADDQ $64, DI")
	g.i("DECQ BX")
	g.i("JNE group")
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("zero:") // rows of no blocks: zeros
	g.i("VPXORD Z0, Z0, Z0")
	g.i("TESTQ BX, BX")
	g.i("JEQ done")
	g.p("zloop:")
	g.i("VMOVUPS Z0, (DI)")
	g.i("ADDQ $64, DI")
	g.i("DECQ BX")
	g.i("JNE zloop")
	g.p("done:")
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}

// qpackX16: the nb block columns of one interleaved group at w repacked at
// dst in the sixteen-row layout of qgemm16x4 (qgemm.go), 640 bytes a block:
// the scales as float32 d_w, m_w (Q4_0: d_w; Q8_0: 16·d_w), then for
// element groups 0..7 the levels of the sixteen rows (Q4_0's chunk j gives
// groups 2j, its low nibbles, and 2j+1; Q8_0's chunk k, sign bits flipped,
// group k). No transposes: the file's layout already has a row per lane.
func qpackX16(g *gen, q qtype) {
	x := x86{name: "AVX512", r: "Z"}
	name := "qpackX16" + q.name + "AVX512"
	x.text(g, name, 24, "(dst *byte, w unsafe.Pointer, nb int)")
	g.i("MOVQ dst+0(FP), DI")
	g.i("MOVQ w+8(FP), SI")
	g.i("MOVQ nb+16(FP), CX")
	if q.name == "Q4_0" {
		g.i("MOVL $0x0f0f0f0f, AX")
	} else {
		g.i("MOVL $0x80808080, AX")
		g.i("MOVL $0x41800000, DX")
		g.i("VPBROADCASTD DX, Z14")
	}
	g.i("VPBROADCASTD AX, Z15")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("loop:")
	g.i("VCVTPH2PS (SI), Z0")
	g.i("VMOVUPS Z0, (DI)")
	if q.name == "Q4_0" {
		g.i("VMOVUPS Z0, 64(DI)")
		for j := 0; j < 4; j++ {
			g.i("VMOVDQU64 %d(SI), Z3", 32+64*j)
			g.i("VPSRLW $4, Z3, Z5")
			g.i("VPANDD Z3, Z15, Z4")
			g.i("VPANDD Z5, Z15, Z5")
			g.i("VMOVDQU64 Z4, %d(DI)", 128+128*j)
			g.i("VMOVDQU64 Z5, %d(DI)", 192+128*j)
		}
	} else {
		g.i("VMULPS Z14, Z0, Z1")
		g.i("VMOVUPS Z1, 64(DI)")
		for k := 0; k < 8; k++ {
			g.i("VPXORD %d(SI), Z15, Z4", 32+64*k)
			g.i("VMOVDQU64 Z4, %d(DI)", 128+64*k)
		}
	}
	g.i("ADDQ $%d, SI", xgroupBytes(q))
	g.i("ADDQ $640, DI")
	g.i("DECQ CX")
	g.i("JNE loop")
	g.p("done:")
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}
