//go:build !purego

package kernels

import (
	"slices"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/selectinfer/sinf/format"
)

var avx2Set = &kernelSet{
	name: "avx2", blk: blkAVX2, gblk: gblkAVX2, gr: grAVX2, gt: gtAVX2, tt: ttAVX2, tc: tcAVX2,
	dot4:      [3]func(w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, x *float32, n int) (s0, s1, s2, s3 float32){dot4F32AVX2, dot4F16AVX2, dot4BF16AVX2},
	dot1:      [3]func(w unsafe.Pointer, x *float32, n int) float32{dot1F32AVX2, dot1F16AVX2, dot1BF16AVX2},
	dotRows:   [3]func(w unsafe.Pointer, stride int, idx *int32, x *float32, n, m int, dst *float32, pf int){dotRowsF32AVX2, dotRowsF16AVX2, dotRowsBF16AVX2},
	axpy4:     [3]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, n int){axpy4F32AVX2, axpy4F16AVX2, axpy4BF16AVX2},
	axpy1:     [3]func(dst *float32, w unsafe.Pointer, a float32, n int){axpy1F32AVX2, axpy1F16AVX2, axpy1BF16AVX2},
	axpyRows:  [3]func(dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, n, m int, pf int){axpyRowsF32AVX2, axpyRowsF16AVX2, axpyRowsBF16AVX2},
	gemm:      [3]func(w unsafe.Pointer, wstride int, x *float32, xstride int, n int, dst *float32, dstride int){gemmF32AVX2, gemmF16AVX2, gemmBF16AVX2},
	cvt:       [3]func(dst *float32, src unsafe.Pointer, n int){cvtF32AVX2, cvtF16AVX2, cvtBF16AVX2},
	cvtPanels: [3]func(dst *float32, pstride int, src unsafe.Pointer, n int, pre unsafe.Pointer){cvtPanelsF32AVX2, cvtPanelsF16AVX2, cvtPanelsBF16AVX2},
	gemmT:     gemmTF32AVX2,
	readSum:   readSumAVX2,
	swiglu:    swigluAVX2,
	expSum:    expSumAVX2,
	rope:      ropeAVX2,
	toF16:     toF16AVX2, // F16C
	sketch:    sketchAVX2,
	qdotRows:  [nq]func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int){qdotRowsQ8_0AVX2, qdotRowsQ4_0AVX2, qdotRowsQ5_0AVX2, qdotRowsQ5_1AVX2},
	qcvt:      [nq]func(dst *float32, src unsafe.Pointer, nb int){qcvtQ8_0AVX2, qcvtQ4_0AVX2, qcvtQ5_0AVX2, qcvtQ5_1AVX2},
	quantizeX: quantizeXAVX2,
	qaxpy4:    [nq]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int){qaxpy4Q8_0AVX2, qaxpy4Q4_0AVX2, qaxpy4Q5_0AVX2, qaxpy4Q5_1AVX2},
	qpack:     qpacks,
	qrows:     8,
	qgemm:     avx2Qgemm,
	dotRowsB: [3][3]dotRowsBFunc{
		{dotRowsT2F32AVX2, dotRowsT2F16AVX2, dotRowsT2BF16AVX2},
		{dotRowsT3F32AVX2, dotRowsT3F16AVX2, dotRowsT3BF16AVX2},
		{dotRowsT4F32AVX2, dotRowsT4F16AVX2, dotRowsT4BF16AVX2},
	},
	dot4B: [3][3]dotRowsBFunc{
		{dot4RowsT2F32AVX2, dot4RowsT2F16AVX2, dot4RowsT2BF16AVX2},
		{dot4RowsT3F32AVX2, dot4RowsT3F16AVX2, dot4RowsT3BF16AVX2},
		{dot4RowsT4F32AVX2, dot4RowsT4F16AVX2, dot4RowsT4BF16AVX2},
	},
}

var avx512Set = &kernelSet{
	name: "avx512", blk: blkAVX512, gblk: gblkAVX512, gr: grAVX512, gt: gtAVX512, tt: ttAVX512, tc: tcAVX512,
	dot4:      [3]func(w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, x *float32, n int) (s0, s1, s2, s3 float32){dot4F32AVX512, dot4F16AVX512, dot4BF16AVX512},
	dot1:      [3]func(w unsafe.Pointer, x *float32, n int) float32{dot1F32AVX512, dot1F16AVX512, dot1BF16AVX512},
	dotRows:   [3]func(w unsafe.Pointer, stride int, idx *int32, x *float32, n, m int, dst *float32, pf int){dotRowsF32AVX512, dotRowsF16AVX512, dotRowsBF16AVX512},
	axpy4:     [3]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, n int){axpy4F32AVX512, axpy4F16AVX512, axpy4BF16AVX512},
	axpy1:     [3]func(dst *float32, w unsafe.Pointer, a float32, n int){axpy1F32AVX512, axpy1F16AVX512, axpy1BF16AVX512},
	axpyRows:  [3]func(dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, n, m int, pf int){axpyRowsF32AVX512, axpyRowsF16AVX512, axpyRowsBF16AVX512},
	gemm:      [3]func(w unsafe.Pointer, wstride int, x *float32, xstride int, n int, dst *float32, dstride int){gemmF32AVX512, gemmF16AVX512, gemmBF16AVX512},
	cvt:       [3]func(dst *float32, src unsafe.Pointer, n int){cvtF32AVX512, cvtF16AVX512, cvtBF16AVX512},
	cvtPanels: [3]func(dst *float32, pstride int, src unsafe.Pointer, n int, pre unsafe.Pointer){cvtPanelsF32AVX512, cvtPanelsF16AVX512, cvtPanelsBF16AVX512},
	gemmT:     gemmTF32AVX512,
	readSum:   readSumAVX2, // a read is a read: the 256-bit loop already saturates memory
	swiglu:    swigluAVX2,  // bound by exp, not memory: 256 bits suffice
	expSum:    expSumAVX2,
	rope:      ropeAVX2,
	toF16:     toF16AVX2,  // F16C
	sketch:    sketchAVX2, // 512-bit form unmeasured
	// Block-quantized dots: the AVX2 kernels (one block of 32 weights a
	// step; 512-bit forms unmeasured).
	qdotRows:  [nq]func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int){qdotRowsQ8_0AVX2, qdotRowsQ4_0AVX2, qdotRowsQ5_0AVX2, qdotRowsQ5_1AVX2},
	qcvt:      [nq]func(dst *float32, src unsafe.Pointer, nb int){qcvtQ8_0AVX2, qcvtQ4_0AVX2, qcvtQ5_0AVX2, qcvtQ5_1AVX2},
	quantizeX: quantizeXAVX2,
	// Neuron-row sums (AddRows of down_proj.weight_t) on ZMM registers,
	// sixteen weights a step: BenchmarkAddRows over every row of the
	// Llama-3.2-1B shape (8192 × 2048), 1 thread, Zen 5, SINF_KERNELS=avx2
	// against avx512vnni alternated, medians of 3: Q8_0 15.6 → 17.8 GB/s,
	// Q4_0 8.5 → 11.9; over a random half of the rows 14.5 → 15.4 and 7.9 →
	// 9.2 (the K-quants' in kquant_amd64.go). Q5_0/Q5_1: the AVX2 forms.
	qaxpy4:  [nq]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int){qaxpy4Q8_0AVX512, qaxpy4Q4_0AVX512, qaxpy4Q5_0AVX2, qaxpy4Q5_1AVX2},
	qpack:   qpacks,
	qrows:   8,
	qgemm:   avx2Qgemm,
	qaxpy4B: [2]qaxpy4BFunc{qaxpy4BQ8_0AVX512, qaxpy4BQ4_0AVX512},
	dotRowsB: [3][3]dotRowsBFunc{
		{dotRowsT2F32AVX512, dotRowsT2F16AVX512, dotRowsT2BF16AVX512},
		{dotRowsT3F32AVX512, dotRowsT3F16AVX512, dotRowsT3BF16AVX512},
		{dotRowsT4F32AVX512, dotRowsT4F16AVX512, dotRowsT4BF16AVX512},
	},
}

// The VNNI sets are the AVX2 and AVX-512 sets with the decode dots of the
// block-quantized rows (qdotRows) done by VPDPBUSD: AVX-VNNI's VEX form
// (emitted as bytes: Go's assembler has only the EVEX one) or AVX512-VNNI's
// EVEX form on 256-bit registers (AVX512VL). 256-bit, not 512: a block is 32
// weights, one YMM, and a ZMM form would need two blocks' scales per
// register.
//
// Measured per operation (BenchmarkRawSets, CPU time per call, L2-resident
// rows, AMD EPYC Zen 5 VM with both VNNI forms, 15 alternating rounds at load
// 20, medians): Q8_0 dot AVX2 7.19 µs, VEX VNNI 6.86, EVEX VNNI 7.65; Q4_0
// 7.59, 7.38, 7.55 — the integer product is not what bounds these kernels
// (the per-block scale is), so VNNI gains ≤ 5%. The EVEX form lost to the VEX
// one, so avx512vnni takes the VEX dots where the CPU has AVX-VNNI and the
// EVEX ones only where it has AVX512-VNNI alone (Ice Lake server, Zen 4).
// The AVX-512 set's other kernels were 1.1–2.0× faster than AVX2's there (F16
// dot 6.2 against 12.5 µs, F16 axpy 7.0 against 13.9), none slower.
var qpacks = [nq]qpackFunc{
	qpack8Q8_0AVX2, qpack8Q4_0AVX2, qpack8Q5_0AVX2, qpack8Q5_1AVX2,
	func(dst *byte, w unsafe.Pointer, stride int, nb int) { qpack8Q4_KAVX2(dst, w, stride, nb/8) },
	func(dst *byte, w unsafe.Pointer, stride int, nb int) { qpack8Q5_KAVX2(dst, w, stride, nb/8) },
}

// avx2Qgemm is the integer prefill of the sets without VNNI: qgemm8x4AVX2,
// and for Q8_0 qgemm8x4Q8_0AVX2 (VPSIGNB/VPABSB, as VPMADDUBSW cannot take
// Q8_0's offset levels). Before it Q8_0 prefill dequantized to float32:
// 64-token prefill of interleaved dense files, 1 thread, AMD EPYC Zen 3
// (AVX2 only), 3 alternated rounds: Llama-3.2-1B shape 17.2–18.1 → 50.7–51.6
// tokens/s, SmolLM2-135M 154–157 → 387–416 (llama.cpp c392e5094's Q8_0 in
// the same hour: 34.5–35.3 and 256–275).
var avx2Qgemm = func() [nq]qgemmFunc {
	t := qgemmTable(qgemm8x4AVX2, qpacks, false)
	t[qIndex(format.Q8_0)] = qgemm8x4Q8_0AVX2
	return t
}()

// qpacks16 pack sixteen rows for qgemm16x4 as two halves of eight.
var qpacks16 = [nq]qpackFunc{
	halves16(qpackHalf16Q8_0AVX2, 1), halves16(qpackHalf16Q4_0AVX2, 1), halves16(qpackHalf16Q5_0AVX2, 1), halves16(qpackHalf16Q5_1AVX2, 1),
	halves16(qpackHalf16Q4_KAVX2, 8), halves16(qpackHalf16Q5_KAVX2, 8),
}

// halves16 returns the qpack of sixteen rows that packs rows 0–7 and 8–15
// with half, which takes the count of blocks of per (8 for the K-quants'
// super-blocks) blocks of 32.
func halves16(half func(dst *byte, w unsafe.Pointer, stride int, n int), per int) qpackFunc {
	return func(dst *byte, w unsafe.Pointer, stride int, nb int) {
		half(dst, w, stride, nb/per)
		half((*byte)(unsafe.Add(unsafe.Pointer(dst), 32)), unsafe.Add(w, 8*stride), stride, nb/per)
	}
}

var (
	avxvnniSet = withVNNI(avx2Set, "avxvnni", vnniDots, qgemm8x4AVXVNNI)
	// avx512vnniSet's dots are the EVEX ones here; init swaps in the VEX
	// ones on a CPU with AVX-VNNI.
	avx512vnniSet = withVNNI(avx512Set, "avx512vnni", evexDots, qgemm8x4AVX512VNNI)
)

// vnniDots and evexDots are the VEX (AVX-VNNI) and EVEX (AVX512-VNNI)
// qdotRows of Q8_0, Q4_0, Q5_0 and Q5_1, q table entries 0–3.
var (
	vnniDots = [4]qdotFunc{qdotRowsQ8_0AVXVNNI, qdotRowsQ4_0AVXVNNI, qdotRowsQ5_0AVXVNNI, qdotRowsQ5_1AVXVNNI}
	evexDots = [4]qdotFunc{qdotRowsQ8_0AVX512VNNI, qdotRowsQ4_0AVX512VNNI, qdotRowsQ5_0AVX512VNNI, qdotRowsQ5_1AVX512VNNI}
)

// qdotVariants lists the raw qdotRows forms this CPU runs, by name, so that
// TestQuantRawDot checks those no set of this CPU uses too.
func qdotVariants() map[string][4]qdotFunc {
	v := map[string][4]qdotFunc{}
	x := cpu.X86
	if x.HasAVXVNNI {
		v["avxvnni"] = vnniDots
	}
	if x.HasAVX512VL && x.HasAVX512VNNI {
		v["avx512vnni-evex"] = evexDots
	}
	return v
}

func init() {
	// Integer prefill on ZMM registers, sixteen rows a group: 233 GMAC/s
	// against the YMM form's 127 (BenchmarkRawGemm, Zen 5). The AVX2 and
	// AVX-512 sets take the VPMADDUBSW form (92 GMAC/s) for every packed
	// dtype but Q8_0 (its w+128 would saturate it), which dequantizes to
	// float32 there.
	avx512vnniSet.qpack, avx512vnniSet.qrows = qpacks16, 16
	avx512vnniSet.qgemm = qgemmTable(qgemm16x4AVX512VNNI, qpacks16, true)
	// Multi-token decode dots of Q8_0 and Q4_0 on ZMM registers, two blocks a
	// step (EVEX VPDPBUSD).
	avx512vnniSet.qdotRowsB = [3][2]qdotRowsBFunc{
		{qdotRowsT2Q8_0AVX512VNNI, qdotRowsT2Q4_0AVX512VNNI},
		{qdotRowsT3Q8_0AVX512VNNI, qdotRowsT3Q4_0AVX512VNNI},
		{qdotRowsT4Q8_0AVX512VNNI, qdotRowsT4Q4_0AVX512VNNI},
	}
	// Interleaved rows (interleave.go): a row per lane, no horizontal sums;
	// ZMM with AVX512-VNNI, else two YMM halves (VEX VPDPBUSD with AVX-VNNI,
	// VPMADDUBSW without).
	avx2Set.qdotX = [2]qdotXFunc{qdotX16Q8_0AVX2, qdotX16Q4_0AVX2}
	avx512Set.qdotX = avx2Set.qdotX
	// Their multi-token forms; not the AVX-VNNI set's: its Q8_0 single-token
	// kernel sums otherwise (sign bits flipped, 16·c off per block).
	avx2Set.qdotXB = [3][2]qdotXBFunc{
		{qdotX16T2Q8_0AVX2, qdotX16T2Q4_0AVX2},
		{qdotX16T3Q8_0AVX2, qdotX16T3Q4_0AVX2},
		{qdotX16T4Q8_0AVX2, qdotX16T4Q4_0AVX2},
	}
	avx512Set.qdotXB = avx2Set.qdotXB
	avxvnniSet.qdotX = [2]qdotXFunc{qdotX16Q8_0AVXVNNI, qdotX16Q4_0AVXVNNI}
	// Their prefill packs a group as two of qgemm8x4's eight-row groups (a
	// Go dequantization instead gave 1B Q4_0 prefill 24–26 tokens/s against
	// 68–95 row-major).
	xpacks := [2]func(dst *byte, w unsafe.Pointer, nb int){qpackX16Q8_0AVX2, qpackX16Q4_0AVX2}
	avx2Set.qpackX, avx512Set.qpackX, avxvnniSet.qpackX = xpacks, xpacks, xpacks
	avx512vnniSet.qdotX = [2]qdotXFunc{qdotX16Q8_0AVX512VNNI, qdotX16Q4_0AVX512VNNI}
	avx512vnniSet.qdotXB = [3][2]qdotXBFunc{
		{qdotX16T2Q8_0AVX512VNNI, qdotX16T2Q4_0AVX512VNNI},
		{qdotX16T3Q8_0AVX512VNNI, qdotX16T3Q4_0AVX512VNNI},
		{qdotX16T4Q8_0AVX512VNNI, qdotX16T4Q4_0AVX512VNNI},
	}
	avx512vnniSet.qpackX = [2]func(dst *byte, w unsafe.Pointer, nb int){qpackX16Q8_0AVX512, qpackX16Q4_0AVX512}
	avx2Set.features = []string{"avx2", "fma", "f16c"}
	avx512Set.features = []string{"avx2", "fma", "f16c", "avx512f", "avx512bw"}
	avxvnniSet.features = append(slices.Clone(avx2Set.features), "avx_vnni")
	avx512vnniSet.features = append(slices.Clone(avx512Set.features), "avx512vl", "avx512_vnni")
	if cpu.X86.HasAVXVNNI { // the faster form (above)
		copy(avx512vnniSet.qdotRows[:4], vnniDots[:])
		avx512vnniSet.features = append(slices.Clone(avx512Set.features), "avx_vnni")
	}
}

// withVNNI returns a copy of ks named name with the integer dot products
// dots for Q8_0, Q4_0, Q5_0 and Q5_1 rows (q table entries 0–3; the
// K-quants' kernels are ks's: archQKernels, fillPortableQ) and the integer
// prefill kernel gemm for every dtype ks packs (eight-row groups).
func withVNNI(ks *kernelSet, name string, dots [4]qdotFunc, gemm qgemmFunc) *kernelSet {
	c := *ks
	c.name = name
	copy(c.qdotRows[:4], dots[:])
	c.qgemm, c.qrows = qgemmTable(gemm, c.qpack, true), 8
	return &c
}

// archSets returns the SIMD sets this CPU supports, best first. AVX2 needs FMA
// and F16C (every AVX2 CPU so far has both); AVX-512 needs F and BW (BW for
// the 512-bit VPMOVZXWD of the BF16 path). cpu reports these only when the OS
// saves the vector state.
func archSets() []*kernelSet {
	x := cpu.X86
	var s []*kernelSet
	if !x.HasAVX2 || !x.HasFMA || !x.HasF16C {
		return s
	}
	if x.HasAVX512F && x.HasAVX512BW {
		if x.HasAVX512VL && x.HasAVX512VNNI {
			s = append(s, avx512vnniSet)
		}
		s = append(s, avx512Set)
	}
	if x.HasAVXVNNI {
		s = append(s, avxvnniSet)
	}
	return append(s, avx2Set)
}

// declaredSets lists every set built for this architecture, whether or not
// this CPU runs it (TestSetsComplete checks even those it cannot run).
var declaredSets = []*kernelSet{avx512vnniSet, avx512Set, avxvnniSet, avx2Set}

// qgemmVariants lists the integer prefill kernels this CPU runs, by name
// beyond its sets', so that TestQuantRawGemm checks the EVEX form even
// where avx512vnni takes the VEX one.
func qgemmVariants() map[string]qgemmKernels {
	v := map[string]qgemmKernels{}
	if x := cpu.X86; x.HasAVX512VL && x.HasAVX512VNNI {
		v["avx512vnni-evex8"] = qgemmKernels{qpacks, qgemmTable(qgemm8x4AVX512VNNI, qpacks, true), 8}
	}
	return v
}
