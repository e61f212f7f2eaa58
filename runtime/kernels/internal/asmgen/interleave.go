package main

import "fmt"

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
// xd[nb+b]. The rows need no horizontal sum. With T > 1 (qdotX16T<T>, the
// multi-token form of MatVecBatch) each chunk is unpacked once for T tokens,
// token t's x at xq + t·xstride, its xd at xd + t·xdstride and its sums at
// dst + t·dstride bytes; every token keeps the single-token kernel's float
// order, so its sums are that kernel's bit for bit (its int32 sums are exact
// however they are split: two accumulators a token there, four for one).
// Every form prefetches the block column xdotAhead bytes on: without it,
// 2-vCPU Intel Xeon (AVX512-VNNI), 3 alternated rounds, dense decode of the
// interleaved files at 1 thread went SmolLM2-135M Q4_0 137–141 → 161–172
// tokens/s, Q8_0 91–97 → 108–118, Llama-3.2-1B Q4_0 16.1–17.0 → 17.9–18.1,
// Q8_0 10.2–10.3 → 11.4–11.8 (2 threads: SmolLM2 Q4_0 265–325 → 322–374,
// 1B 29.4–30.8 → 31.6–33.5); 1 KiB ahead measured alike or lower, 4 KiB
// lower on the 1B (16.1–16.4). A batched step of four SmolLM2 Q4_0 tokens
// (BenchmarkBatchDecode) 560–562 → 718–730 tokens/s, 731–772 with the two
// accumulators a token. The multi-token forms prefetch xdotAheadBatch
// bytes on.
func qdotX16(g *gen, q qtype, T int) {
	x := x86{name: "AVX512", r: "Z"}
	name := "qdotX16" + q.name + "AVX512VNNI"
	sig, args := "(w unsafe.Pointer, nb int, xq *int8, xd *float32, ng int, dst *float32)", 48
	if T > 1 {
		name = fmt.Sprintf("qdotX16T%d%sAVX512VNNI", T, q.name)
		sig, args = "(w unsafe.Pointer, nb int, xq *int8, xstride int, xd *float32, xdstride int, ng int, dst *float32, dstride int)", 72
	}
	x.text(g, name, args, sig)
	arg := func(n string) string { // a 1-token and T-token argument's offset
		off := map[string][2]int{"xq": {16, 16}, "xstride": {0, 24}, "xd": {24, 32}, "xdstride": {0, 40}, "ng": {32, 48}, "dst": {40, 56}, "dstride": {0, 64}}[n]
		if T > 1 {
			return fmt.Sprintf("%s+%d(FP)", n, off[1])
		}
		return fmt.Sprintf("%s+%d(FP)", n, off[0])
	}
	xp := []string{"R8", "R12", "R13", "R14"}[:T]  // token t's x
	xdp := []string{"R11", "R10", "R15", "DX"}[:T] // its xd; xd[nb+b] at (xdp)(R9*4)
	fa := []int{0, 8, 9, 12}[:T]                   // its sums, float32
	// its int32 accumulators: four for one token; two for several, whose
	// products are enough independent chains (integer sums: the same result)
	na := 4
	if T > 1 {
		na = 2
	}
	ia := func(t, k int) int { return 16 + na*t + k%na }
	g.i("MOVQ w+0(FP), SI")
	g.i("MOVQ nb+8(FP), R9")
	g.i("MOVQ %s, BX", arg("ng"))
	g.i("MOVQ %s, DI", arg("dst"))
	if q.name == "Q4_0" {
		g.i("MOVL $0x0f0f0f0f, AX")
	} else {
		g.i("MOVL $0x80808080, AX")
		g.i("MOVL $0x41800000, DX") // 16.0
		g.i("VPBROADCASTD DX, Z14")
	}
	g.i("VPBROADCASTD AX, Z15")
	if T > 1 {
		g.i("MOVQ %s, AX", arg("dstride"))
	}
	g.i("TESTQ R9, R9")
	g.i("JEQ zero")
	g.p("group:")
	for i, ps := range [][]string{xp, xdp} {
		g.i("MOVQ %s, %s", arg([]string{"xq", "xd"}[i]), ps[0])
		if T > 1 {
			g.i("MOVQ %s, CX", arg([]string{"xstride", "xdstride"}[i]))
		}
		for t := 1; t < T; t++ {
			g.i("LEAQ (%s)(CX*1), %s", ps[t-1], ps[t])
		}
	}
	g.i("MOVQ R9, CX")
	for _, f := range fa {
		g.i("VPXORD Z%d, Z%d, Z%d", f, f, f)
	}
	g.p("block:")
	ahead := xdotAhead
	if T > 1 {
		ahead = xdotAheadBatch
	}
	for off := 0; off < xgroupBytes(q); off += 64 {
		g.i("PREFETCHT0 %d(SI)", ahead+off)
	}
	for t := range T {
		for k := 0; k < na; k++ {
			g.i("VPXORD Z%[1]d, Z%[1]d, Z%[1]d", ia(t, k))
		}
	}
	if q.name == "Q4_0" {
		for j := 0; j < 4; j++ {
			g.i("VMOVDQU64 %d(SI), Z3", 32+64*j)
			g.i("VPSRLW $4, Z3, Z5")
			g.i("VPANDD Z3, Z15, Z4")
			g.i("VPANDD Z5, Z15, Z5")
			for t := range T {
				g.i("VPDPBUSD.BCST %d(%s), Z4, Z%d", 8*j, xp[t], ia(t, (2*j)%4))
				g.i("VPDPBUSD.BCST %d(%s), Z5, Z%d", 8*j+4, xp[t], ia(t, (2*j+1)%4))
			}
		}
	} else {
		for k := 0; k < 8; k++ {
			g.i("VPXORD %d(SI), Z15, Z4", 32+64*k)
			for t := range T {
				g.i("VPDPBUSD.BCST %d(%s), Z4, Z%d", 4*k, xp[t], ia(t, k%4))
			}
		}
	}
	g.i("VCVTPH2PS (SI), Z6")
	for t := range T {
		a0 := ia(t, 0)
		g.i("VPADDD Z%d, Z%d, Z%d", ia(t, 1), a0, a0)
		if na == 4 {
			a2 := ia(t, 2)
			g.i("VPADDD Z%d, Z%d, Z%d", ia(t, 3), a2, a2)
			g.i("VPADDD Z%d, Z%d, Z%d", a2, a0, a0)
		}
		g.i("VCVTDQ2PS Z%d, Z%d", a0, a0)
		g.i("VMULPS.BCST (%s), Z%d, Z%d", xdp[t], a0, a0)
		if q.name == "Q4_0" {
			g.i("VSUBPS.BCST (%s)(R9*4), Z%d, Z%d", xdp[t], a0, a0) // − 8·d_x·Σq_x
		} else {
			g.i("VMULPS.BCST (%s)(R9*4), Z14, Z7", xdp[t]) // 128·d_x·Σq_x
			g.i("VSUBPS Z7, Z%d, Z%d", a0, a0)
		}
		g.i("VFMADD231PS Z%d, Z6, Z%d", a0, fa[t])
	}
	xdotTail(g, func() {
		g.i("ADDQ $%d, SI", xgroupBytes(q))
		for t := range T {
			g.i("ADDQ $64, %s", xp[t])
			g.i("ADDQ $4, %s", xdp[t])
		}
	}, func(zero bool) {
		for t := range T {
			src := fmt.Sprintf("Z%d", fa[t])
			if zero {
				src = "Z0"
			}
			switch t {
			case 0:
				g.i("VMOVUPS %s, (DI)", src)
			case 1, 2:
				g.i("VMOVUPS %s, (DI)(AX*%d)", src, t)
			case 3:
				g.i("LEAQ (DI)(AX*2), CX")
				g.i("VMOVUPS %s, (CX)(AX*1)", src)
			}
		}
	}, "VPXORD Z0, Z0, Z0")
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
	loopTail(g, fmt.Sprintf("ADDQ $%d, SI", xgroupBytes(q)), "ADDQ $640, DI")
}

// neonQdotX16 is qdotX16 for the dotprod set: SDOT by element, signed by
// signed (Q4_0's levels 0–15 as they are, with c = xd[nb+b] off per block;
// Q8_0's values with no offset). A block's 16 rows are four lane quads:
// V20..V23 the int32 sums of rows 4k..4k+3, V16..V19 their float32
// results; x's 32 bytes in V0, V1, the scales converted from F16 in V4..V7.
func neonQdotX16(g *gen, q qtype) {
	name := "qdotX16" + q.name + "DOTPROD"
	neonText(g, name, 48, "(w unsafe.Pointer, nb int, xq *int8, xd *float32, ng int, dst *float32)")
	g.i("MOVD w+0(FP), R0")
	g.i("MOVD nb+8(FP), R1")
	g.i("MOVD xq+16(FP), R2")
	g.i("MOVD xd+24(FP), R3")
	g.i("MOVD ng+32(FP), R4")
	g.i("MOVD dst+40(FP), R5")
	g.i("VMOVI $15, V30.B16")
	g.i("CBZ R4, done")
	g.i("CBZ R1, done") // callers pass nb ≥ 1 (xmatVecRange clears rows of no blocks)
	g.p("group:")
	g.i("MOVD R2, R6")
	g.i("MOVD R3, R7")
	g.i("ADD R1<<2, R3, R8") // xd[nb+b]
	g.i("MOVD R1, R9")
	zero(g, 16, 17, 18, 19)
	g.p("blk:")
	g.i("VLD1 (R6), [V0.B16, V1.B16]")
	g.i("ADD $64, R6, R6")
	neonScales(g, 2)
	zero(g, 20, 21, 22, 23)
	// element group e (elements 4e..4e+3) of the four quads in V(w)..V(w+3)
	sdots := func(w, e int) {
		for k := 0; k < 4; k++ {
			g.i(sdotLane(20+k, w+k, e/4, e%4))
		}
	}
	if q.name == "Q8_0" {
		for k := 0; k < 8; k++ {
			w := 8 + 4*(k%2)
			g.i("VLD1.P 64(R0), [V%d.B16, V%d.B16, V%d.B16, V%d.B16]", w, w+1, w+2, w+3)
			sdots(w, k)
		}
	} else {
		for j := 0; j < 4; j++ {
			neonNibbles(g, 12, 24)
			sdots(12, 2*j)
			sdots(24, 2*j+1)
		}
	}
	g.i("FMOVS.P 4(R7), F28")
	g.i("VDUP V28.S[0], V28.S4")
	if q.name == "Q4_0" {
		g.i("FMOVS.P 4(R8), F31")
		g.i("VDUP V31.S[0], V31.S4")
	}
	neonBlockSums(g, q, [4]int{20, 21, 22, 23}, [4]int{16, 17, 18, 19}, 28, 31)
	g.i("SUBS $1, R9, R9")
	g.i("BNE blk")
	g.i("VST1 [V16.S4, V17.S4, V18.S4, V19.S4], (R5)")
	g.i("ADD $64, R5, R5")
	g.i("SUBS $1, R4, R4")
	g.i("BNE group")
	g.p("done:")
	g.i("RET")
	g.p("")
}

// neonQdotX16T2 is neonQdotX16 for two tokens (qdotX16T2<q>DOTPROD, the
// dotprod set's multi-token form of MatVecBatch): each chunk is loaded and
// unpacked once for both, token t's x at xq + t·xstride, its xd at xd +
// t·xdstride and its sums at dst + t·dstride bytes; each token's float
// steps are neonQdotX16's, in its order, so its sums are that kernel's bit
// for bit. Registers: x's current half (16 bytes) in V0 (token 0) and V1
// (token 1), the scales in V4..V7, token 0's int32 sums in V20..V23 and
// results in V16..V19, token 1's in V24..V27 and V2, V3, V28, V29; V8..V15
// the chunks (the x scales at a block's end). Four tokens would need 32
// accumulators, so MatVecBatch takes them two at a time.
func neonQdotX16T2(g *gen, q qtype) {
	name := "qdotX16T2" + q.name + "DOTPROD"
	neonText(g, name, 72, "(w unsafe.Pointer, nb int, xq *int8, xstride int, xd *float32, xdstride int, ng int, dst *float32, dstride int)")
	neonArgs(g, "w", "nb", "xq", "xstride", "xd", "xdstride", "ng", "dst", "dstride")
	facc1 := [4]int{2, 3, 28, 29}
	g.i("VMOVI $15, V30.B16")
	g.i("CBZ R6, done")
	g.i("CBZ R1, done")
	g.p("group:")
	g.i("MOVD R2, R10")       // token 0's x
	g.i("ADD R3, R2, R11")    // token 1's
	g.i("MOVD R4, R12")       // token 0's d_x
	g.i("ADD R1<<2, R4, R13") // and c = xd[nb+b]
	g.i("ADD R5, R4, R14")    // token 1's
	g.i("ADD R1<<2, R14, R15")
	g.i("MOVD R1, R9")
	zero(g, 16, 17, 18, 19, 2, 3, 28, 29)
	g.p("blk:")
	neonScales(g, 12)
	zero(g, 20, 21, 22, 23, 24, 25, 26, 27)
	// element group e of the four quads in V(w)..V(w+3), both tokens
	sdots := func(w, e int) {
		for t := 0; t < 2; t++ {
			for k := 0; k < 4; k++ {
				g.i(sdotLane(20+4*t+k, w+k, t, e%4))
			}
		}
	}
	for h := 0; h < 2; h++ { // x's half h: element groups 4h..4h+3
		g.i("VLD1 (R10), [V0.B16]")
		g.i("VLD1 (R11), [V1.B16]")
		g.i("ADD $16, R10, R10")
		g.i("ADD $16, R11, R11")
		if q.name == "Q8_0" {
			for k := 4 * h; k < 4*h+4; k++ {
				w := 8 + 4*(k%2)
				g.i("VLD1.P 64(R0), [V%d.B16, V%d.B16, V%d.B16, V%d.B16]", w, w+1, w+2, w+3)
				sdots(w, k)
			}
			continue
		}
		for j := 2 * h; j < 2*h+2; j++ {
			neonNibbles(g, 12, 8)
			sdots(12, 2*j)
			sdots(8, 2*j+1)
		}
	}
	g.i("ADD $32, R10, R10") // x blocks are 64 bytes apart
	g.i("ADD $32, R11, R11")
	for t, r := range [2][2]string{{"R12", "R13"}, {"R14", "R15"}} {
		g.i("FMOVS.P 4(%s), F%d", r[0], 8+2*t)
		g.i("VDUP V%d.S[0], V%d.S4", 8+2*t, 8+2*t)
		if q.name == "Q4_0" {
			g.i("FMOVS.P 4(%s), F%d", r[1], 9+2*t)
			g.i("VDUP V%d.S[0], V%d.S4", 9+2*t, 9+2*t)
		}
	}
	neonBlockSums(g, q, [4]int{20, 21, 22, 23}, [4]int{16, 17, 18, 19}, 8, 9)
	neonBlockSums(g, q, [4]int{24, 25, 26, 27}, facc1, 10, 11)
	g.i("SUBS $1, R9, R9")
	g.i("BNE blk")
	g.i("ADD R8, R7, R14") // token 1's sums
	g.i("VST1 [V16.S4, V17.S4, V18.S4, V19.S4], (R7)")
	g.i("VST1.P [V2.S4, V3.S4], 32(R14)")
	g.i("VST1 [V28.S4, V29.S4], (R14)")
	g.i("ADD $64, R7, R7")
	g.i("SUBS $1, R6, R6")
	g.i("BNE group")
	g.p("done:")
	g.i("RET")
	g.p("")
}

// neonScales loads a block column's sixteen F16 scales (R0 += 32) into V(r),
// V(r+1) and converts them to float32 in V4..V7.
func neonScales(g *gen, r int) {
	g.i("VLD1.P 32(R0), [V%d.B16, V%d.B16]", r, r+1)
	g.i(fcvtl(4, r))
	g.i(fcvtl2(5, r))
	g.i(fcvtl(6, r+1))
	g.i(fcvtl2(7, r+1))
}

// neonNibbles loads the next 64-byte Q4_0X16 chunk (R0 += 64) into V8..V11
// and unpacks it: low nibbles to V(lo)..V(lo+3), high ones to
// V(hi)..V(hi+3) (hi may be 8: in place).
func neonNibbles(g *gen, lo, hi int) {
	g.i("VLD1.P 64(R0), [V8.B16, V9.B16, V10.B16, V11.B16]")
	for k := 0; k < 4; k++ {
		g.i("VAND V30.B16, V%d.B16, V%d.B16", 8+k, lo+k)
		g.i("VUSHR $4, V%d.B16, V%d.B16", 8+k, hi+k)
	}
}

// neonBlockSums adds one block's sums of a token to its results: for each
// quad k, acc[k] += scale_k·(float(is[k])·d_x), then for Q4_0 acc[k] −=
// c·scale_k, with the scales in V4..V7, d_x broadcast in V(dx) and c in V(c).
func neonBlockSums(g *gen, q qtype, is, acc [4]int, dx, c int) {
	for k := 0; k < 4; k++ {
		g.i(scvtfV(is[k], is[k]))
		g.i(fmulV(is[k], is[k], dx))
		g.i("VFMLA V%d.S4, V%d.S4, V%d.S4", 4+k, is[k], acc[k])
		if q.name == "Q4_0" {
			g.i("VFMLS V%d.S4, V%d.S4, V%d.S4", c, 4+k, acc[k])
		}
	}
}

// xdotAhead is how many bytes ahead of its block qdotX16YMM prefetches
// (PREFETCHT0 of the block column 2 KiB on). Without it the AVX2 set's
// single-token interleaved dots read at 0.65–0.75 of the roofline at one
// thread; decode of the Llama-3.2-1B-shape dense Q4_0 file (Q4_0X16, Q6_K
// head), 1 thread, AMD EPYC Zen 3, 3 alternated rounds: 17.8–20.5 → 22.1–23.0
// tokens/s (SmolLM2-135M's, head Q8_0X16: 144–170 → 170–207); 1 KiB and 4
// KiB ahead measured 21.8–23.5 and 19.4–22.0. The AVX-VNNI form (same
// generator) prefetches alike: SINF_KERNELS=avxvnni on a 2-vCPU Intel Xeon,
// 3 alternated rounds, dense decode at 1 thread, SmolLM2-135M Q4_0 129–135 →
// 155–157 tokens/s, Q8_0 89–94 → 107–108, Llama-3.2-1B Q4_0 17.1–17.6 →
// 18.5–18.9, Q8_0 10.1–10.4 → 11.4–11.9 (1B Q4_0 at 2 threads 30.2–31.2 →
// 32.5–33.5); so do the AVX512-VNNI forms (qdotX16).
const xdotAhead = 2048

// xdotAheadBatch is how many bytes ahead the multi-token qdotX16 forms
// (T > 1) prefetch. Each column costs them up to four times the single-token
// form's work, so at 2 KiB the lines arrive late: 2-vCPU Intel Xeon
// (AVX512-VNNI), qdotX16T4Q4_0 streaming a 64 MiB matrix took 43–51 cycles a
// block column at 2 KiB, 36–40 at 8 KiB and 36–38 at 16 KiB (32 from L2),
// two alternated rounds; a batched step of four SmolLM2-135M Q4_0 tokens at 2
// threads (BenchmarkBatchDecode) went 725–873 → 881–1046 tokens/s (16 KiB
// 887–972), three alternated rounds, and `sinf-run serve --batch`, four
// clients over one (cmd/serve-load), 2.11–2.14 → 2.31–2.35.
const xdotAheadBatch = 8192

// qdotX16YMM is qdotX16 on YMM registers for the AVX2 sets (vnni "": the
// four products of a lane by VPMADDUBSW then VPMADDWD by ones, for Q4_0 a
// block's pair sums added in int16 and widened once; Q8_0's signed values
// through VPABSB/VPSIGNB, as the row kernels do) and for AVX-VNNI (vnni
// "AVXVNNI": VEX VPDPBUSD, Q8_0's sign bits flipped and 16·c off per
// block, as the ZMM form). A chunk's 64 bytes are two YMM halves, rows 0–7
// and 8–15: Y2/Y3 their int32 sums, Y0/Y1 their float32 results; x's
// eight element groups broadcast in Y6..Y13 (the VEX form has no broadcast
// operand).
func qdotX16YMM(g *gen, q qtype, vnni string) {
	x := x86{name: "AVX2", r: "Y"}
	name := "qdotX16" + q.name + "AVX2"
	if vnni != "" {
		name = "qdotX16" + q.name + vnni
	}
	x.text(g, name, 48, "(w unsafe.Pointer, nb int, xq *int8, xd *float32, ng int, dst *float32)")
	g.i("MOVQ w+0(FP), SI")
	g.i("MOVQ nb+8(FP), R9")
	g.i("MOVQ ng+32(FP), BX")
	g.i("MOVQ dst+40(FP), DI")
	g.i("TESTQ R9, R9")
	g.i("JEQ zero")
	switch {
	case q.name == "Q4_0":
		g.i("MOVL $0x0f0f0f0f, AX")
	case vnni != "":
		g.i("MOVL $0x80808080, AX")
	default:
		g.i("MOVL $0x00010001, AX") // int16 ones for VPMADDWD
	}
	g.i("VMOVD AX, X15")
	g.i("VPBROADCASTD X15, Y15")
	if q.name == "Q4_0" && vnni == "" {
		g.i("MOVL $0x00010001, AX")
		g.i("VMOVD AX, X14")
		g.i("VPBROADCASTD X14, Y14")
	}
	if q.name == "Q8_0" && vnni != "" {
		g.i("MOVL $0x41800000, AX") // 16.0
		g.i("VMOVD AX, X14")
		g.i("VBROADCASTSS X14, Y14")
	}
	ones := 15
	if q.name == "Q4_0" {
		ones = 14
	}
	g.p("group:")
	g.i("MOVQ xq+16(FP), R8")
	g.i("MOVQ xd+24(FP), R11")
	g.i("LEAQ (R11)(R9*4), R10")
	g.i("MOVQ R9, CX")
	g.i("VXORPS Y0, Y0, Y0")
	g.i("VXORPS Y1, Y1, Y1")
	g.p("block:")
	for off := 0; off < xgroupBytes(q); off += 64 {
		g.i("PREFETCHT0 %d(SI)", xdotAhead+off)
	}
	if q.name != "Q4_0" || vnni != "" { // q4SumsInt16 writes its first product
		g.i("VPXOR Y2, Y2, Y2")
		g.i("VPXOR Y3, Y3, Y3")
	}
	for e := 0; e < 8; e++ {
		g.i("VPBROADCASTD %d(R8), Y%d", 4*e, 6+e)
	}
	// add the four products of lanes u (unsigned) by x group e to acc
	prod := func(acc, u, e int) {
		if vnni != "" {
			g.i(vpdpbusdVEX(acc, u, 6+e))
			return
		}
		g.i("VPMADDUBSW Y%d, Y%d, Y%d", 6+e, u, u)
		g.i("VPMADDWD Y%d, Y%d, Y%d", ones, u, u)
		g.i("VPADDD Y%d, Y%d, Y%d", u, acc, acc)
	}
	for h := 0; h < 2; h++ {
		acc := 2 + h
		if q.name == "Q4_0" && vnni == "" {
			// x group e is in Y(6+e); a product overwrites the levels it used
			q4SumsInt16(g, h, 1, ones, func(int) int { return acc }, func(_, u, e, dst int) {
				g.i("VPMADDUBSW Y%d, Y%d, Y%d", 6+e, u, dst)
			}, func(u int) int { return u })
			continue
		}
		if q.name == "Q4_0" {
			for j := 0; j < 4; j++ {
				q4Unpack(g, 32+64*j+32*h)
				prod(acc, 4, 2*j)
				prod(acc, 5, 2*j+1)
			}
			continue
		}
		for k := 0; k < 8; k++ {
			if vnni != "" {
				g.i("VPXOR %d(SI), Y15, Y4", 32+64*k+32*h)
				prod(acc, 4, k)
				continue
			}
			g.i("VMOVDQU %d(SI), Y5", 32+64*k+32*h)
			g.i("VPABSB Y5, Y4")
			g.i("VPSIGNB Y5, Y%d, Y5", 6+k) // x·sign(w)
			g.i("VPMADDUBSW Y5, Y4, Y4")
			g.i("VPMADDWD Y15, Y4, Y4")
			g.i("VPADDD Y4, Y%d, Y%d", acc, acc)
		}
	}
	g.i("VBROADCASTSS (R11), Y6")
	switch {
	case q.name == "Q4_0":
		g.i("VBROADCASTSS (R10), Y7")
	case vnni != "":
		g.i("VBROADCASTSS (R10), Y7")
		g.i("VMULPS Y14, Y7, Y7") // 128·d_x·Σq_x
	}
	for h := 0; h < 2; h++ {
		g.i("VCVTDQ2PS Y%d, Y%d", 2+h, 2+h)
		g.i("VMULPS Y6, Y%d, Y%d", 2+h, 2+h)
		if q.name == "Q4_0" || vnni != "" {
			g.i("VSUBPS Y7, Y%d, Y%d", 2+h, 2+h)
		}
		g.i("VCVTPH2PS %d(SI), Y8", 16*h)
		g.i("VFMADD231PS Y%d, Y8, Y%d", 2+h, h)
	}
	xdotTail(g, func() {
		g.i("ADDQ $%d, SI", xgroupBytes(q))
		g.i("ADDQ $64, R8")
		g.i("ADDQ $4, R11")
		g.i("ADDQ $4, R10")
	}, func(zero bool) {
		g.i("VMOVUPS Y0, (DI)")
		if zero {
			g.i("VMOVUPS Y0, 32(DI)")
		} else {
			g.i("VMOVUPS Y1, 32(DI)")
		}
	}, "VXORPS Y0, Y0, Y0")
}

// neonQpackX16 is qpackX16 for the dotprod set's eight-row layout
// (neonQpack8's: d_w, m_w = 0, signed levels): one interleaved group's nb
// block columns at w become two packed eight-row groups, rows 0–7 at dst
// and rows 8–15 at dst + 320·nb. A chunk's first 32 bytes are rows 0–7,
// its last 32 rows 8–15, so no transposes: Q4_0's nibbles − 8, Q8_0's
// values as they are.
func neonQpackX16(g *gen, q qtype) {
	name := "qpackX16" + q.name + "NEON"
	neonText(g, name, 24, "(dst *byte, w unsafe.Pointer, nb int)")
	g.i("MOVD dst+0(FP), R0")
	g.i("MOVD w+8(FP), R4")
	g.i("MOVD nb+16(FP), R3")
	g.i("MOVD $%d, R5", qpackStride)
	g.i("MUL R3, R5, R5")
	g.i("ADD R0, R5, R1") // rows 8–15
	g.i("VMOVI $15, V30.B16")
	g.i("VMOVI $8, V29.B16")
	zero(g, 31)
	g.i("CBZ R3, done")
	g.p("blk:")
	g.i("VLD1.P 32(R4), [V0.B16, V1.B16]")
	g.i(fcvtl(2, 0))
	g.i(fcvtl2(3, 0))
	g.i(fcvtl(4, 1))
	g.i(fcvtl2(5, 1))
	g.i("VST1 [V2.S4, V3.S4], (R0)")
	g.i("VST1 [V4.S4, V5.S4], (R1)")
	for h := 0; h < 2; h++ {
		g.i("FMOVQ F31, %d(R%d)", 32, h)
		g.i("FMOVQ F31, %d(R%d)", 48, h)
	}
	chunks := 8
	if q.name == "Q4_0" {
		chunks = 4
	}
	for c := 0; c < chunks; c++ {
		g.i("VLD1.P 64(R4), [V8.B16, V9.B16, V10.B16, V11.B16]")
		for h := 0; h < 2; h++ {
			a, b := 8+2*h, 9+2*h
			if q.name == "Q8_0" {
				g.i("FMOVQ F%d, %d(R%d)", a, 64+32*c, h)
				g.i("FMOVQ F%d, %d(R%d)", b, 64+32*c+16, h)
				continue
			}
			for i, v := range []int{a, b} {
				g.i("VAND V30.B16, V%d.B16, V%d.B16", v, 12+i)
				g.i("VUSHR $4, V%d.B16, V%d.B16", v, 14+i)
			}
			for i := 12; i < 16; i++ {
				g.i("VSUB V29.B16, V%d.B16, V%d.B16", i, i)
			}
			g.i("FMOVQ F12, %d(R%d)", 64+64*c, h) // group 2c: low nibbles
			g.i("FMOVQ F13, %d(R%d)", 64+64*c+16, h)
			g.i("FMOVQ F14, %d(R%d)", 64+64*c+32, h) // group 2c+1: high
			g.i("FMOVQ F15, %d(R%d)", 64+64*c+48, h)
		}
	}
	g.i("ADD $%d, R0, R0", qpackStride)
	g.i("ADD $%d, R1, R1", qpackStride)
	g.i("SUBS $1, R3, R3")
	g.i("BNE blk")
	g.p("done:")
	g.i("RET")
	g.p("")
}

// xdotTail ends the x86 qdotX16 kernels: advance moves to the next block,
// store stores a group's sixteen sums of every token (zero: the zeros of
// rows of no blocks, in the register the zero instruction clears), then the
// next group.
func xdotTail(g *gen, advance func(), store func(zero bool), zero string) {
	advance()
	g.i("DECQ CX")
	g.i("JNE block")
	store(false)
	g.i("ADDQ $64, DI")
	g.i("DECQ BX")
	g.i("JNE group")
	g.i("VZEROUPPER")
	g.i("RET")
	xdotZero(g, store, zero)
}

// xdotZero ends an x86 qdotX16 kernel with its zero: label, for rows of no
// blocks: zero clears the register store(true) stores for each of the BX
// groups at DI.
func xdotZero(g *gen, store func(zero bool), zero string) {
	g.p("zero:")
	g.i(zero)
	g.i("TESTQ BX, BX")
	g.i("JEQ done")
	g.p("zloop:")
	store(true)
	g.i("ADDQ $64, DI")
	g.i("DECQ BX")
	g.i("JNE zloop")
	g.p("done:")
	g.i("VZEROUPPER")
	g.i("RET")
	g.p("")
}

// qpackX16YMM is qpackX16 for the AVX2 sets' eight-row layout (qpack8's:
// d_w, m_w, unsigned levels; Q4_0 m_w = d_w, Q8_0 its values with the sign
// bit flipped and m_w = 16·d_w): one interleaved group's nb block columns
// at w become two packed eight-row groups, rows 0–7 at dst and rows 8–15 at
// dst + 320·nb, as neonQpackX16 does. A chunk's halves are the two groups'
// rows, so no transposes.
func qpackX16YMM(g *gen, q qtype) {
	x := x86{name: "AVX2", r: "Y"}
	name := "qpackX16" + q.name + "AVX2"
	x.text(g, name, 24, "(dst *byte, w unsafe.Pointer, nb int)")
	g.i("MOVQ dst+0(FP), DI")
	g.i("MOVQ w+8(FP), SI")
	g.i("MOVQ nb+16(FP), CX")
	g.i("IMUL3Q $%d, CX, R8", qpackStride)
	g.i("ADDQ DI, R8") // rows 8–15
	if q.name == "Q4_0" {
		g.i("MOVL $0x0f0f0f0f, AX")
	} else {
		g.i("MOVL $0x80808080, AX")
		g.i("MOVL $0x41800000, DX") // 16.0
		g.i("VMOVD DX, X14")
		g.i("VBROADCASTSS X14, Y14")
	}
	g.i("VMOVD AX, X15")
	g.i("VPBROADCASTD X15, Y15")
	g.i("TESTQ CX, CX")
	g.i("JEQ done")
	g.p("loop:")
	dsts := []string{"DI", "R8"}
	for h, d := range dsts {
		g.i("VCVTPH2PS %d(SI), Y0", 16*h)
		g.i("VMOVUPS Y0, (%s)", d)
		if q.name == "Q8_0" {
			g.i("VMULPS Y14, Y0, Y0")
		}
		g.i("VMOVUPS Y0, 32(%s)", d)
	}
	if q.name == "Q4_0" {
		for j := 0; j < 4; j++ {
			for h, d := range dsts {
				g.i("VMOVDQU %d(SI), Y3", 32+64*j+32*h)
				g.i("VPSRLW $4, Y3, Y5")
				g.i("VPAND Y3, Y15, Y4")
				g.i("VPAND Y5, Y15, Y5")
				g.i("VMOVDQU Y4, %d(%s)", 64+64*j, d)
				g.i("VMOVDQU Y5, %d(%s)", 96+64*j, d)
			}
		}
	} else {
		for k := 0; k < 8; k++ {
			for h, d := range dsts {
				g.i("VPXOR %d(SI), Y15, Y4", 32+64*k+32*h)
				g.i("VMOVDQU Y4, %d(%s)", 64+32*k, d)
			}
		}
	}
	loopTail(g, fmt.Sprintf("ADDQ $%d, SI", xgroupBytes(q)), fmt.Sprintf("ADDQ $%d, DI", qpackStride), fmt.Sprintf("ADDQ $%d, R8", qpackStride))
}

// qdotX16YMMBatch is qdotX16YMM (vnni "") for T tokens at once, qdotX16T<T>'s
// arguments (the multi-token form of MatVecBatch on the AVX2 sets): each
// chunk is loaded and unpacked once for the T tokens. Registers do not hold
// both halves of T tokens, so a group is run twice over its blocks, rows 0–7
// then 8–15 (the group's blocks, 288 or 544 bytes a block column, come
// back from L1 or L2: 5 or 10 KiB at SmolLM2's 576 columns, 72 or 136 KiB
// at 8192), token t's int32 sums in Y(8+t) and its float32
// results in Yt; x's element groups are broadcast from memory per product.
// Each lane keeps the single-token kernel's arithmetic: its integer sums are
// exact in any order and its float32 steps per block are the same, so every
// token's sums are qdotX16YMM's bit for bit. The first pass prefetches
// xdotAheadBatch bytes on: SINF_KERNELS=avx2 on a 2-vCPU Intel Xeon, T=4
// Q4_0 streaming a 64 MiB matrix went 120–130 → 81–93 cycles a block column
// (2 KiB ahead alike; 55–56 from L2), and a batched step of four SmolLM2-135M
// Q4_0 tokens at 2 threads (BenchmarkBatchDecode) 455–482 → 587–616
// tokens/s, three alternated rounds.
func qdotX16YMMBatch(g *gen, q qtype, T int) {
	x := x86{name: "AVX2", r: "Y"}
	name := fmt.Sprintf("qdotX16T%d%sAVX2", T, q.name)
	x.text(g, name, 72, "(w unsafe.Pointer, nb int, xq *int8, xstride int, xd *float32, xdstride int, ng int, dst *float32, dstride int)")
	xp := []string{"R8", "R12", "R13", "R14"}[:T]  // token t's x
	xdp := []string{"R11", "R10", "R15", "DX"}[:T] // its xd; xd[nb+b] at (xdp)(R9*4)
	ia := func(t int) int { return 8 + t }
	g.i("MOVQ w+0(FP), SI")
	g.i("MOVQ nb+8(FP), R9")
	g.i("MOVQ ng+48(FP), BX")
	g.i("MOVQ dst+56(FP), DI")
	g.i("MOVQ dstride+64(FP), AX")
	if q.name == "Q4_0" {
		g.i("MOVL $0x0f0f0f0f, CX")
		g.i("VMOVD CX, X15")
		g.i("VPBROADCASTD X15, Y15")
	}
	ones := 15
	if q.name == "Q4_0" {
		ones = 14
	}
	g.i("MOVL $0x00010001, CX") // int16 ones for VPMADDWD
	g.i("VMOVD CX, X%d", ones)
	g.i("VPBROADCASTD X%d, Y%d", ones, ones)
	g.i("TESTQ R9, R9")
	g.i("JEQ zero")
	g.p("group:")
	for h := range 2 {
		for i, ps := range [][]string{xp, xdp} {
			g.i("MOVQ %s, %s", []string{"xq+16(FP)", "xd+32(FP)"}[i], ps[0])
			if T > 1 {
				g.i("MOVQ %s, CX", []string{"xstride+24(FP)", "xdstride+40(FP)"}[i])
			}
			for t := 1; t < T; t++ {
				g.i("LEAQ (%s)(CX*1), %s", ps[t-1], ps[t])
			}
		}
		g.i("MOVQ R9, CX")
		for t := range T {
			g.i("VXORPS Y%[1]d, Y%[1]d, Y%[1]d", t)
		}
		g.p("block%d:", h)
		if h == 0 {
			for off := 0; off < xgroupBytes(q); off += 64 {
				g.i("PREFETCHT0 %d(SI)", xdotAheadBatch+off)
			}
		}
		if q.name == "Q4_0" {
			// token t's x group e broadcast from memory into Y6
			q4SumsInt16(g, h, T, ones, ia, func(t, u, e, dst int) {
				g.i("VPBROADCASTD %d(%s), Y6", 4*e, xp[t])
				g.i("VPMADDUBSW Y6, Y%d, Y%d", u, dst)
			}, func(int) int { return 6 })
		} else {
			for t := range T {
				g.i("VPXOR Y%[1]d, Y%[1]d, Y%[1]d", ia(t))
			}
			for k := range 8 {
				g.i("VMOVDQU %d(SI), Y5", 32+64*k+32*h)
				g.i("VPABSB Y5, Y4")
				for t := range T {
					g.i("VPBROADCASTD %d(%s), Y6", 4*k, xp[t])
					g.i("VPSIGNB Y5, Y6, Y6") // x·sign(w)
					g.i("VPMADDUBSW Y6, Y4, Y6")
					g.i("VPMADDWD Y%d, Y6, Y6", ones)
					g.i("VPADDD Y6, Y%[1]d, Y%[1]d", ia(t))
				}
			}
		}
		g.i("VCVTPH2PS %d(SI), Y7", 16*h)
		for t := range T {
			a := ia(t)
			g.i("VCVTDQ2PS Y%[1]d, Y%[1]d", a)
			g.i("VBROADCASTSS (%s), Y12", xdp[t])
			g.i("VMULPS Y12, Y%[1]d, Y%[1]d", a)
			if q.name == "Q4_0" {
				g.i("VBROADCASTSS (%s)(R9*4), Y13", xdp[t]) // 8·d_x·Σq_x
				g.i("VSUBPS Y13, Y%[1]d, Y%[1]d", a)
			}
			g.i("VFMADD231PS Y%d, Y7, Y%d", a, t)
		}
		g.i("ADDQ $%d, SI", xgroupBytes(q))
		for t := range T {
			g.i("ADDQ $64, %s", xp[t])
			g.i("ADDQ $4, %s", xdp[t])
		}
		g.i("DECQ CX")
		g.i("JNE block%d", h)
		xStoreTokens(g, T, 32*h, "")
		if h == 0 { // back to the group's first block column
			g.i("MOVQ R9, CX")
			g.i("IMULQ $%d, CX", xgroupBytes(q))
			g.i("SUBQ CX, SI")
		}
	}
	g.i("ADDQ $64, DI")
	g.i("DECQ BX")
	g.i("JNE group")
	g.i("VZEROUPPER")
	g.i("RET")
	xdotZero(g, func(bool) {
		xStoreTokens(g, T, 0, "Y0")
		xStoreTokens(g, T, 32, "Y0")
	}, "VXORPS Y0, Y0, Y0")
}

// xStoreTokens stores token t's eight float32 results (Yt, or src for all
// when set) at DI + t·AX + off bytes, t < T (CX clobbered for t = 3).
func xStoreTokens(g *gen, T, off int, src string) {
	for t := range T {
		r := src
		if r == "" {
			r = fmt.Sprintf("Y%d", t)
		}
		switch t {
		case 0:
			g.i("VMOVUPS %s, %d(DI)", r, off)
		case 1, 2:
			g.i("VMOVUPS %s, %d(DI)(AX*%d)", r, off, t)
		case 3:
			g.i("LEAQ (DI)(AX*2), CX")
			g.i("VMOVUPS %s, %d(CX)(AX*1)", r, off)
		}
	}
}

// q4Unpack loads the Q4_0X16 chunk at off(SI) and leaves its low nibbles
// in Y4 and its high ones in Y5 (Y15: the 0x0f mask).
func q4Unpack(g *gen, off int) {
	g.i("VMOVDQU %d(SI), Y4", off)
	g.i("VPSRLW $4, Y4, Y5")
	g.i("VPAND Y4, Y15, Y4")
	g.i("VPAND Y5, Y15, Y5")
}

// q4SumsInt16 emits half h (rows 0–7 or 8–15) of a Q4_0X16 block column for
// T tokens on AVX2: each chunk unpacked once (q4Unpack), then for each
// token and nibble half u (Y4, Y5) its x group e's pair sums by prod(t, u,
// e, dst) — a VPMADDUBSW into dst — the first straight into the token's
// int16 accumulator acc(t), the others into tmp(u) and added with VPADDW;
// then each accumulator widened to int32 by VPMADDWD with the int16 ones
// in Y(ones). A lane's eight pair sums are each within 2·15·128, so they
// add up exactly in int16 (≤ 30720): the same integers as a VPMADDWD per
// product, one a block instead of eight.
func q4SumsInt16(g *gen, h, T, ones int, acc func(t int) int, prod func(t, u, e, dst int), tmp func(u int) int) {
	for j := range 4 {
		q4Unpack(g, 32+64*j+32*h)
		for t := range T {
			for k, u := range []int{4, 5} {
				if j == 0 && k == 0 {
					prod(t, u, 2*j+k, acc(t))
					continue
				}
				prod(t, u, 2*j+k, tmp(u))
				g.i("VPADDW Y%[1]d, Y%[2]d, Y%[2]d", tmp(u), acc(t))
			}
		}
	}
	for t := range T {
		g.i("VPMADDWD Y%[1]d, Y%[2]d, Y%[2]d", ones, acc(t))
	}
}
