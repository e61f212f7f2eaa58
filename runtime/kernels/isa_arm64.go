//go:build !purego

package kernels

import "unsafe"

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
	// Block-quantized rows (quant.go); x is quantized by the portable code.
	qdotRows:  [2]func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int){qdotRowsQ8_0NEON, qdotRowsQ4_0NEON},
	qcvt:      [2]func(dst *float32, src unsafe.Pointer, nb int){qcvtQ8_0NEON, qcvtQ4_0NEON},
	quantizeX: quantizeXGo,
	qaxpy4:    [2]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int){qaxpy4Q8_0NEON, qaxpy4Q4_0NEON},
}

// qaxpy4 on NEON: four qaxpyRows rows (no four-row NEON form yet).
func qaxpy4Q8_0NEON(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
	qaxpyRowsQ8_0NEON(dst, w0, 0, nil, &a0, nb, 1, 0)
	qaxpyRowsQ8_0NEON(dst, w1, 0, nil, &a1, nb, 1, 0)
	qaxpyRowsQ8_0NEON(dst, w2, 0, nil, &a2, nb, 1, 0)
	qaxpyRowsQ8_0NEON(dst, w3, 0, nil, &a3, nb, 1, 0)
}

func qaxpy4Q4_0NEON(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, nb int) {
	qaxpyRowsQ4_0NEON(dst, w0, 0, nil, &a0, nb, 1, 0)
	qaxpyRowsQ4_0NEON(dst, w1, 0, nil, &a1, nb, 1, 0)
	qaxpyRowsQ4_0NEON(dst, w2, 0, nil, &a2, nb, 1, 0)
	qaxpyRowsQ4_0NEON(dst, w3, 0, nil, &a3, nb, 1, 0)
}

// archSets returns the SIMD sets of this CPU: ASIMD is baseline on arm64.
func archSets() []*kernelSet { return []*kernelSet{neonSet} }

// declaredSets lists every set built for this architecture, whether or not
// this CPU runs it.
var declaredSets = []*kernelSet{neonSet}
