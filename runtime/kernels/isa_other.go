//go:build (!amd64 && !arm64) || purego

package kernels

// archSets returns no SIMD set: only the generic kernels exist here.
func archSets() []*kernelSet { return nil }

// declaredSets lists every set built for this architecture.
var declaredSets []*kernelSet
