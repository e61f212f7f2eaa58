//go:build !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// neonSet uses only baseline ARMv8.0 Advanced SIMD (FCVTL for F16, so no
// FEAT_FP16 is needed).
var neonSet = &kernelSet{
	name: "neon", features: []string{"asimd"}, blk: blkNEON, gblk: gblkNEON, gr: grNEON, gt: gtNEON, tt: ttNEON, tc: tcNEON,
	dot4:      [3]func(w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, x *float32, n int) (s0, s1, s2, s3 float32){dot4F32NEON, dot4F16NEON, dot4BF16NEON},
	dot1:      [3]func(w unsafe.Pointer, x *float32, n int) float32{dot1F32NEON, dot1F16NEON, dot1BF16NEON},
	dotRows:   [3]func(w unsafe.Pointer, stride int, idx *int32, x *float32, n, m int, dst *float32, pf int){dotRowsF32NEON, dotRowsF16NEON, dotRowsBF16NEON},
	axpy4:     [3]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, n int){axpy4F32NEON, axpy4F16NEON, axpy4BF16NEON},
	axpy1:     [3]func(dst *float32, w unsafe.Pointer, a float32, n int){axpy1F32NEON, axpy1F16NEON, axpy1BF16NEON},
	axpyRows:  [3]func(dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, n, m int, pf int){axpyRowsF32NEON, axpyRowsF16NEON, axpyRowsBF16NEON},
	gemm:      [3]func(w unsafe.Pointer, wstride int, x *float32, xstride int, n int, dst *float32, dstride int){gemmF32NEON, gemmF16NEON, gemmBF16NEON},
	cvt:       [3]func(dst *float32, src unsafe.Pointer, n int){cvtF32NEON, cvtF16NEON, cvtBF16NEON},
	cvtPanels: [3]func(dst *float32, pstride int, src unsafe.Pointer, n int, pre unsafe.Pointer){cvtPanelsF32NEON, cvtPanelsF16NEON, cvtPanelsBF16NEON},
	gemmT:     gemmTF32NEON,
	readSum:   readSumNEON,
	swiglu:    swigluNEON,
	expSum:    expSumNEON,
	rope:      ropeNEON,
	toF16:     toF16NEON,
	// Block-quantized rows (quant.go); x is quantized by the portable code.
	qdotRows:  [nq]func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int){qdotRowsQ8_0NEON, qdotRowsQ4_0NEON, qdotRowsQ5_0NEON, qdotRowsQ5_1NEON},
	qcvt:      [nq]func(dst *float32, src unsafe.Pointer, nb int){qcvtQ8_0NEON, qcvtQ4_0NEON, qcvtQ5_0NEON, qcvtQ5_1NEON},
	quantizeX: quantizeXGo,
	qaxpy4:    [nq]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int){qaxpy4Q8_0NEON, qaxpy4Q4_0NEON, qaxpy4Q5_0NEON, qaxpy4Q5_1NEON},
	sketch:    sketchNEON,
}

// dotprodSet is neonSet with the decode dots and the prefill products of
// block-quantized rows done by SDOT (FEAT_DotProd, HWCAP asimddp).
var dotprodSet = func() *kernelSet {
	c := *neonSet
	c.name = "dotprod"
	c.features = []string{"asimd", "asimddp"}
	c.sketch = sketchDOTPROD
	copy(c.qdotRows[:4], []qdotFunc{qdotRowsQ8_0DOTPROD, qdotRowsQ4_0DOTPROD, qdotRowsQ5_0DOTPROD, qdotRowsQ5_1DOTPROD}) // Q8_0, Q4_0, Q5_0, Q5_1 (the K-quants': archQKernels)
	// Integer prefill (qgemm.go): SDOT by lane; Q8_0 and Q4_0 pack signed
	// levels in assembly; the neon set dequantizes to float32 instead.
	c.qpack = [nq]qpackFunc{qpack8Q8_0NEON, qpack8Q4_0NEON}
	c.qgemm, c.qrows = qgemmTable(qgemm8x4DOTPROD, c.qpack, true), 8
	// Interleaved rows (interleave.go): SDOT by element, a row per lane;
	// prefill packs a group as two of qgemm8x4's eight-row groups.
	c.qdotX = [2]qdotXFunc{qdotX16Q8_0DOTPROD, qdotX16Q4_0DOTPROD}
	c.qpackX = [2]func(dst *byte, w unsafe.Pointer, nb int){qpackX16Q8_0NEON, qpackX16Q4_0NEON}
	// Their two-token form (MatVecBatch: a batched server's slots, two at a
	// time); prefill keeps the repacked SDOT products (xdotPrefill).
	c.qdotXB[0] = [2]qdotXBFunc{qdotX16T2Q8_0DOTPROD, qdotX16T2Q4_0DOTPROD}
	return &c
}()

// archSets returns the SIMD sets of this CPU, best first: ASIMD is baseline
// on arm64; the dot product instructions are announced by the kernel's
// HWCAP (golang.org/x/sys/cpu reads it; under qemu-aarch64-static, the
// -cpu model's).
func archSets() []*kernelSet {
	if cpu.ARM64.HasASIMDDP {
		return []*kernelSet{dotprodSet, neonSet}
	}
	return []*kernelSet{neonSet}
}

// declaredSets lists every set built for this architecture, whether or not
// this CPU runs it.
var declaredSets = []*kernelSet{dotprodSet, neonSet}

// qdotVariants lists the raw qdotRows forms this CPU runs beyond its sets'
// (none here).
func qdotVariants() map[string][4]qdotFunc { return nil }

// qgemmVariants lists the integer prefill kernels this CPU runs beyond its
// sets' (none here).
func qgemmVariants() map[string]qgemmKernels { return nil }
