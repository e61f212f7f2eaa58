//go:build (!amd64 && !arm64) || purego

package kernels

import "unsafe"

// archQKernels: no SIMD K-quant kernels here; fillPortableQ puts in the
// portable ones.
func archQKernels() {}

// kaccumSIMD is never called here: no set has simd K-quant kernels.
func kaccumSIMD(dst *float32, q *[4]unsafe.Pointer, sc *[64]float32, off *[32]float32, a *[4]float32, rows int, five, six bool) {
	panic("kernels: no SIMD K-quant accumulation on this architecture")
}
