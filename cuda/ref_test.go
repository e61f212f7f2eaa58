package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// refBackend implements backend on the CPU path: runtime/kernels for the
// matrix products, attention and SwiGLU, runtime's Counter and ActiveSet for
// the selection, the rest (RMSNorm, RoPE, biases, residual additions) as
// runtime's forward pass computes it, in the same order. A Session
// on it must reproduce runtime.Session bit for bit, which checks the
// Session's orchestration (buffers, offsets, positions, active sets) without
// a GPU; the cuda build's tests compare each GPU kernel with it.
//
// Device addresses are id<<40 | offset into Go memory.
type refBackend struct {
	mem  map[uint64][]byte
	next uint64
	pool *kernels.Pool
}

const refShift = 40

func newRefBackend(pool *kernels.Pool) *refBackend {
	return &refBackend{mem: map[uint64][]byte{}, next: 1, pool: pool}
}

func (r *refBackend) deviceInfo() Info { return Info{GPU: "CPU reference", Capability: "0.0"} }

func (r *refBackend) add(b []byte) Ptr {
	id := r.next
	r.next++
	r.mem[id] = b
	return Ptr(id << refShift)
}

func (r *refBackend) alloc(bytes int) (Ptr, error) { return r.add(make([]byte, bytes+16)), nil }

func (r *refBackend) free(p Ptr) {
	if p != 0 {
		delete(r.mem, uint64(p)>>refShift)
	}
}

func (r *refBackend) placeWeights(blobs [][]byte, mapped bool) (placement, error) {
	pl := placement{weights: "mapped"}
	for _, b := range blobs {
		pl.ptrs = append(pl.ptrs, r.add(b))
	}
	return pl, nil
}

func (r *refBackend) releaseWeights() {}

func (r *refBackend) bytes(p Ptr) []byte {
	b, ok := r.mem[uint64(p)>>refShift]
	if !ok {
		panic(fmt.Sprintf("ref: address %#x not allocated", uint64(p)))
	}
	return b[uint64(p)&(1<<refShift-1):]
}

func (r *refBackend) f32(p Ptr, n int) []float32 {
	if p == 0 {
		return nil
	}
	b := r.bytes(p)
	if len(b) < 4*n {
		panic(fmt.Sprintf("ref: %d floats at %#x overrun the allocation", n, uint64(p)))
	}
	if n == 0 {
		return []float32{}
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

func (r *refBackend) i32(p Ptr, n int) []int32 {
	if p == 0 {
		return nil
	}
	b := r.bytes(p)
	if len(b) < 4*n {
		panic(fmt.Sprintf("ref: %d ints at %#x overrun the allocation", n, uint64(p)))
	}
	if n == 0 {
		return []int32{}
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), n)
}

func (r *refBackend) mat(w weight) kernels.Mat {
	m := kernels.Mat{DType: w.dtype, Rows: w.rows, Cols: w.cols}
	m.Data = r.bytes(w.p)[:w.rows*m.RowBytes()]
	return m
}

func (r *refBackend) upload(dst Ptr, src []byte) error {
	copy(r.bytes(dst)[:len(src)], src)
	return nil
}

func (r *refBackend) download(dst []byte, src Ptr) error {
	copy(dst, r.bytes(src)[:len(dst)])
	return nil
}

func (r *refBackend) zero(p Ptr, bytes int) { clear(r.bytes(p)[:bytes]) }
func (r *refBackend) sync() error           { return nil }
func (r *refBackend) close()                {}

func (r *refBackend) embed(dst Ptr, w weight, ids Ptr, id0, T int) {
	m := r.mat(w)
	x := r.f32(dst, T*w.cols)
	for t := 0; t < T; t++ {
		id := id0
		if ids != 0 {
			id = int(r.i32(ids, T)[t])
		}
		m.RowF32(x[t*w.cols:(t+1)*w.cols], id)
	}
}

func (r *refBackend) rmsnorm(dst, x, w Ptr, T, H int, eps float64) {
	d, xs, ws := r.f32(dst, T*H), r.f32(x, T*H), r.f32(w, H)
	for t := 0; t < T; t++ {
		runtime.RMSNorm(d[t*H:(t+1)*H], xs[t*H:(t+1)*H], ws, eps)
	}
}

// finish adds bias to res and stores (or, with accumulate, adds) it into
// dst: runtime's project followed by its residual addition.
func finish(dst, res, bias []float32, T, rows int, accumulate bool) {
	if bias != nil {
		for t := 0; t < T; t++ {
			d := res[t*rows : (t+1)*rows]
			for j, bv := range bias {
				d[j] += bv
			}
		}
	}
	if !accumulate {
		copy(dst, res)
		return
	}
	for j := range dst {
		dst[j] += res[j]
	}
}

func (r *refBackend) matvec(dst Ptr, w weight, rows Ptr, n int, x, bias Ptr, accumulate bool) {
	m := r.mat(w)
	res := make([]float32, n)
	xs := r.f32(x, w.cols)
	if rows == 0 {
		kernels.MatVec(r.pool, res, m, xs)
	} else {
		kernels.MatVecRows(r.pool, res, m, r.i32(rows, n), xs)
	}
	var b []float32
	if bias != 0 {
		if rows != 0 {
			panic("ref: matvec with gathered rows and a bias")
		}
		b = r.f32(bias, n)
	}
	finish(r.f32(dst, n), res, b, 1, n, accumulate)
}

func (r *refBackend) gateUp(dst Ptr, gate, up weight, rows Ptr, n int, x Ptr) {
	g, u := r.f32(dst, n), make([]float32, n)
	xs := r.f32(x, gate.cols)
	if rows == 0 {
		kernels.MatVec(r.pool, g, r.mat(gate), xs)
		kernels.MatVec(r.pool, u, r.mat(up), xs)
	} else {
		rs := r.i32(rows, n)
		kernels.MatVecRows(r.pool, g, r.mat(gate), rs, xs)
		kernels.MatVecRows(r.pool, u, r.mat(up), rs, xs)
	}
	kernels.SwiGLU(r.pool, g, u)
}

func (r *refBackend) addRows(dst Ptr, w weight, rows Ptr, n int, a Ptr, accumulate bool) {
	y := make([]float32, w.cols)
	var rs []int32
	if rows != 0 {
		rs = r.i32(rows, n)
	}
	kernels.AddRows(r.pool, y, r.mat(w), rs, r.f32(a, n))
	finish(r.f32(dst, w.cols), y, nil, 1, w.cols, accumulate)
}

func (r *refBackend) gemm(dst Ptr, w weight, x Ptr, T int, bias Ptr, accumulate bool) {
	res := make([]float32, T*w.rows)
	kernels.MatMul(r.pool, res, r.mat(w), r.f32(x, T*w.cols), T)
	finish(r.f32(dst, T*w.rows), res, r.f32(bias, w.rows), T, w.rows, accumulate)
}

func (r *refBackend) gemmRowsT(dst Ptr, w weight, a Ptr, T int, accumulate bool) {
	res := make([]float32, T*w.cols)
	kernels.MatMulRowsT(r.pool, res, r.mat(w), r.f32(a, T*w.rows), T)
	finish(r.f32(dst, T*w.cols), res, nil, T, w.cols, accumulate)
}

func (r *refBackend) siluMul(g, u Ptr, n int) { kernels.SwiGLU(r.pool, r.f32(g, n), r.f32(u, n)) }

func (r *refBackend) rope(x, cos, sin Ptr, pos0, T, heads, hd, stride int) {
	half := hd / 2
	xs := r.f32(x, (T-1)*stride+heads*hd)
	cs, sn := r.f32(cos, (pos0+T)*half), r.f32(sin, (pos0+T)*half)
	for t := 0; t < T; t++ {
		p := pos0 + t
		for h := 0; h < heads; h++ {
			refRoPE(xs[t*stride+h*hd:t*stride+(h+1)*hd], cs[p*half:(p+1)*half], sn[p*half:(p+1)*half])
		}
	}
}

// refRoPE is runtime's rope.
func refRoPE(x, cos, sin []float32) {
	half := len(x) / 2
	for i := 0; i < half; i++ {
		a, b := x[i], x[i+half]
		x[i] = a*cos[i] - b*sin[i]
		x[i+half] = b*cos[i] + a*sin[i]
	}
}

// attention is runtime's: kernels.Attention over the cache (the device's
// rows a position each, copied into kernels' head-major caches).
func (r *refBackend) attention(out, q, kc, vc Ptr, pos0, T, heads, kvHeads, hd int) {
	qd, kvd := heads*hd, kvHeads*hd
	n := pos0 + T
	k, v := kernels.NewCache(format.F32, n, kvHeads, hd), kernels.NewCache(format.F32, n, kvHeads, hd)
	k.Put(0, r.f32(kc, n*kvd))
	v.Put(0, r.f32(vc, n*kvd))
	kernels.Attention(r.pool, r.f32(out, T*qd), r.f32(q, T*qd), k, v,
		kernels.AttnShape{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Pos: pos0, T: T})
}

func (r *refBackend) argmax(out, x Ptr, n int) {
	r.i32(out, 1)[0] = int32(runtime.Argmax(r.f32(x, n)))
}

func (r *refBackend) countTop(counts, act Ptr, T, kept int, alpha float64) {
	c := &runtime.Counter{Alpha: alpha, Counts: [][]int32{r.i32(counts, kept)}}
	c.ObserveFFN(0, r.f32(act, T*kept), T, nil)
}

func (r *refBackend) selectTop(rows, counts Ptr, kept, static, target int) {
	copy(r.i32(rows, target), refActiveSet(r.i32(counts, kept), kept, static, target))
}

func (r *refBackend) f64(p Ptr, n int) []float64 {
	b := r.bytes(p)
	if len(b) < 8*n {
		panic(fmt.Sprintf("ref: %d doubles at %#x overrun the allocation", n, uint64(p)))
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&b[0])), n)
}

func (r *refBackend) gateCalib(A, S, a, u Ptr, T, kept int) {
	runtime.GateCalib{A: r.f64(A, kept), S: r.f64(S, kept)}.Add(r.f32(a, T*kept), r.f32(u, T*kept), T)
}

func (r *refBackend) gateWeights(w, A, S, up, down Ptr, n int) {
	runtime.GateWeights(r.f32(w, n), runtime.GateCalib{A: r.f64(A, n), S: r.f64(S, n)}, runtime.Norms{Up: r.f32(up, n), Down: r.f32(down, n)})
}

func (r *refBackend) gateScore(keys, g, w Ptr, n int) {
	score := make([]float32, n)
	runtime.GateScores(r.pool, score, r.f32(g, n), r.f32(w, n))
	k := r.i32(keys, n)
	for j, v := range score {
		k[j] = int32(math.Float32bits(v)) // non-negative: the sign bit is clear
	}
}

func (r *refBackend) sketchWeights(w Ptr, s weight, x, down Ptr, n int) {
	ws := r.f32(w, n)
	sk := kernels.Sketch{Rows: s.rows, Cols: s.cols, Data: r.bytes(s.p)[:s.rows*s.cols/32*10]}
	kernels.SketchMatVec(r.pool, ws, sk, r.f32(x, s.cols))
	runtime.SketchWeights(ws, r.f32(down, n))
}

func (r *refBackend) gatherSiluMul(h, g, rows, u Ptr, n int) {
	rs, hs := r.i32(rows, n), r.f32(h, n)
	for j, row := range rs {
		hs[j] = r.f32(g, int(row)+1)[row]
	}
	kernels.SwiGLU(r.pool, hs, r.f32(u, n))
}

// refActiveSet calls runtime.ActiveSet for a layer of kept rows whose first
// static rows are its base, with φ·N = target.
func refActiveSet(counts []int32, kept, static, target int) []int32 {
	f := &runtime.MLP{Gate: kernels.Mat{DType: format.F32, Rows: kept}, Base: static, Sliced: true}
	mode := runtime.SelectInfer
	if static == 0 {
		mode = runtime.CoreInfer
	}
	sp := runtime.Sparsity{Mode: mode, Phi: float64(target) / float64(kept), Alpha: 0.2}
	rows := runtime.ActiveSet(f, counts, sp, kept)
	if len(rows) != target {
		panic(fmt.Sprintf("ref: ActiveSet gave %d rows, want %d", len(rows), target))
	}
	return rows
}
