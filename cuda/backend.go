package cuda

import "github.com/selectinfer/sinf/format"

// Ptr is a device address (0: none). Kernels take device addresses as
// integers, so Go never holds device memory as a pointer.
type Ptr uint64

// add returns p advanced by n bytes.
func (p Ptr) add(n int) Ptr { return p + Ptr(n) }

// weight is a row-major weight matrix [rows, cols] of dtype at a device
// address (kernels.Mat on the device).
type weight struct {
	p          Ptr
	dtype      format.DType
	rows, cols int
}

// placement says how the weights were made readable by the device.
type placement struct {
	ptrs    []Ptr  // the device address of each blob
	weights string // "mapped", "managed" or "device"
	note    string // why a fallback was taken, or ""
}

// backend is the device the Session drives: memory and the kernels of the C
// API (sinfcuda.h). The cuda build implements it with libsinfcuda; the tests
// also implement it on the CPU kernels, which checks the Session's
// orchestration against runtime.Session on any machine.
//
// Kernel methods are asynchronous: a launch error is kept and returned by the
// next sync or download.
type backend interface {
	deviceInfo() Info
	alloc(bytes int) (Ptr, error) // zeroed device memory
	free(p Ptr)
	// placeWeights makes each blob (a weight tensor's bytes in the mapped
	// file or on the heap) readable by kernels: registered in place when
	// mapped is set or the GPU is integrated, else copied once.
	placeWeights(blobs [][]byte, mapped bool) (placement, error)
	releaseWeights()
	upload(dst Ptr, src []byte) error
	download(dst []byte, src Ptr) error // waits for queued kernels
	zero(p Ptr, bytes int)
	sync() error
	close()

	embed(dst Ptr, w weight, ids Ptr, id0, T int)
	rmsnorm(dst, x, w Ptr, T, H int, eps float64)
	matvec(dst Ptr, w weight, rows Ptr, n int, x, bias Ptr, accumulate bool)
	gateUp(dst Ptr, gate, up weight, rows Ptr, n int, x Ptr)
	addRows(dst Ptr, w weight, rows Ptr, n int, a Ptr, accumulate bool)
	gemm(dst Ptr, w weight, x Ptr, T int, bias Ptr, accumulate bool)
	gemmRowsT(dst Ptr, w weight, a Ptr, T int, accumulate bool)
	siluMul(g, u Ptr, n int)
	rope(x, cos, sin Ptr, pos0, T, heads, hd, stride int)
	attention(out, q, kc, vc Ptr, pos0, T, heads, kvHeads, hd int)
	argmax(out, x Ptr, n int)
	countTop(counts, act Ptr, T, kept int, alpha float64)
	selectTop(rows, counts Ptr, kept, static, target int)
	gateCalib(A, S, a, u Ptr, T, kept int)
	gateWeights(w, A, S, up, down Ptr, n int)
	gateScore(keys, g, w Ptr, n int)
	// sketchWeights: w[j] = |(s[j]·x)·down[j]|, s an SK2 sketch [n, cols]
	// (runtime.SketchWeights over kernels.SketchMatVec).
	sketchWeights(w Ptr, s weight, x, down Ptr, n int)
	gatherSiluMul(h, g, rows, u Ptr, n int)
}
