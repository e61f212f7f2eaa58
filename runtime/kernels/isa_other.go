//go:build (!amd64 && !arm64) || purego

package kernels

// archSets returns no SIMD set: only the generic kernels exist here.
func archSets() []*kernelSet { return nil }

// declaredSets lists every set built for this architecture.
var declaredSets []*kernelSet

// qdotVariants lists the raw qdotRows forms this CPU runs beyond its sets'.
func qdotVariants() map[string][4]qdotFunc { return nil }

// qgemmVariants lists the integer prefill kernels this CPU runs beyond its
// sets' (none here).
func qgemmVariants() map[string]qgemmKernels { return nil }
