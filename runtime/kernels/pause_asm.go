//go:build !purego && (amd64 || arm64)

package kernels

// cpuPause is one spin-wait hint (PAUSE on amd64, YIELD on arm64): it lets a
// core sharing the spinning one's execution units (SMT, or a busy host under
// a VM) run, and saves power while the pool's workers poll for a call.
func cpuPause()
