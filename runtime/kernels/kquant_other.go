//go:build !amd64 || purego

package kernels

// archQKernels: no SIMD K-quant kernels here; fillPortableQ puts in the
// portable ones.
func archQKernels() {}
