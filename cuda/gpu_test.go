//go:build cuda

package cuda

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
)

// gpuOrSkip returns the device backend on GPU 0, or skips the test with the
// reason there is none.
func gpuOrSkip(t testing.TB) *device {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	be, err := newBackend(0)
	require.NoError(t, err)
	t.Cleanup(be.close)
	return be.(*device)
}

// pair runs each kernel on the GPU and on the CPU reference backend.
type pair struct {
	t   testing.TB
	gpu *device
	ref *refBackend
}

func newPair(t testing.TB) *pair {
	return &pair{t: t, gpu: gpuOrSkip(t), ref: newRefBackend(testPool(t))}
}

// buf is one buffer on both backends.
type buf struct{ g, r Ptr }

func (p *pair) f32(v []float32) buf { return p.bytes(f32Bytes(v), 4*len(v)) }
func (p *pair) i32(v []int32) buf   { return p.bytes(i32Bytes(v), 4*len(v)) }
func (p *pair) zeros(n int) buf     { return p.bytes(nil, 4*n) }

func (p *pair) bytes(b []byte, n int) buf {
	g, err := p.gpu.alloc(n)
	require.NoError(p.t, err)
	p.t.Cleanup(func() { p.gpu.free(g) })
	r, _ := p.ref.alloc(n)
	if len(b) > 0 {
		require.NoError(p.t, p.gpu.upload(g, b))
		require.NoError(p.t, p.ref.upload(r, b))
	}
	return buf{g, r}
}

// weights is a random [rows, cols] matrix of dtype on both backends (device
// copy on the GPU), values in about ±1.
type weights struct {
	g, r weight
}

func (p *pair) weights(rng *rand.Rand, dtype format.DType, rows, cols int) weights {
	b := randWeightBytes(rng, dtype, rows*cols)
	g, err := p.gpu.alloc(len(b))
	require.NoError(p.t, err)
	p.t.Cleanup(func() { p.gpu.free(g) })
	require.NoError(p.t, p.gpu.upload(g, b))
	rp, _ := p.ref.placeWeights([][]byte{b}, false)
	return weights{weight{g, dtype, rows, cols}, weight{rp.ptrs[0], dtype, rows, cols}}
}

// randWeightBytes encodes n values of N(0, 0.5²) as dtype (a block dtype: n
// whole blocks, quantized by format.Quantize); past 1M elements (benchmark
// sizes) the first 1M repeat.
func randWeightBytes(rng *rand.Rand, dtype format.DType, n int) []byte {
	if dtype.Quantized() {
		v := make([]float32, min(n, 1<<20))
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.5)
		}
		q, err := format.Quantize(nil, v, dtype)
		if err != nil {
			panic(err)
		}
		size, err := dtype.RowBytes(n)
		if err != nil {
			panic(err)
		}
		b := make([]byte, 0, size)
		for len(b) < cap(b) {
			b = append(b, q[:min(len(q), cap(b)-len(b))]...)
		}
		return b
	}
	es := dtype.Size()
	b := make([]byte, n*es)
	const fresh = 1 << 20
	for i := 0; i < min(n, fresh); i++ {
		v := float32(rng.NormFloat64() * 0.5)
		switch dtype {
		case format.F32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		case format.F16:
			binary.LittleEndian.PutUint16(b[2*i:], format.F32ToF16(v))
		case format.BF16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
		}
	}
	for o := fresh * es; o < len(b); o += fresh * es {
		copy(b[o:], b[:fresh*es])
	}
	return b
}

// get downloads n floats of b from both backends.
func (p *pair) get(b buf, n int) (gpu, cpu []float32) {
	gpu, cpu = make([]float32, n), make([]float32, n)
	require.NoError(p.t, p.gpu.download(f32Bytes(gpu), b.g))
	require.NoError(p.t, p.ref.download(f32Bytes(cpu), b.r))
	return gpu, cpu
}

func (p *pair) getI32(b buf, n int) (gpu, cpu []int32) {
	gpu, cpu = make([]int32, n), make([]int32, n)
	require.NoError(p.t, p.gpu.download(i32Bytes(gpu), b.g))
	require.NoError(p.t, p.ref.download(i32Bytes(cpu), b.r))
	return gpu, cpu
}

// close requires gpu within tol of cpu relative to cpu's largest magnitude.
func (p *pair) close(what string, b buf, n int, tol float64) {
	p.t.Helper()
	gpu, cpu := p.get(b, n)
	var maxAbs, maxErr float64
	worst := 0
	for i := range cpu {
		maxAbs = max(maxAbs, math.Abs(float64(cpu[i])))
		if e := math.Abs(float64(gpu[i]) - float64(cpu[i])); e > maxErr || math.IsNaN(e) {
			maxErr, worst = e, i
		}
	}
	rel := maxErr / max(maxAbs, 1e-30)
	require.False(p.t, math.IsNaN(rel), "%s: NaN at %d (gpu %g, cpu %g)", what, worst, gpu[worst], cpu[worst])
	require.LessOrEqual(p.t, rel, tol, "%s: relative error %.3g at %d (gpu %g, cpu %g, max |cpu| %g)", what, rel, worst, gpu[worst], cpu[worst], maxAbs)
}

func randVec(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

func randRows(rng *rand.Rand, n, of int) []int32 {
	perm := rng.Perm(of)[:n]
	rows := make([]int32, n)
	for i, r := range perm {
		rows[i] = int32(r)
	}
	return rows
}

func testRopeConfig(hd int) runtime.Config { return runtime.Config{HeadDim: hd, RopeTheta: 10000} }

var (
	dtypes = []format.DType{format.F32, format.F16, format.BF16}
	// allDTypes adds the block dtypes, whose rows' lengths are multiples of
	// 32 or 256 (the kernel tests skip the other shapes for them).
	allDTypes = append(dtypes, format.Q8_0, format.Q4_0, format.Q5_0, format.Q5_1, format.Q4_K, format.Q5_K, format.Q6_K)
)

// tolFor is the relative error allowed against the CPU's kernels: F32 1e-5;
// F16/BF16 1e-3; block dtypes 1e-5, since both backends quantize x to the
// same int8 blocks and sum the same integer block dots (only the float sum
// over blocks, or over a tile, runs in another order).
func tolFor(d format.DType) float64 {
	if d == format.F32 || d.Quantized() {
		return 1e-5
	}
	return 1e-3
}

// takes reports whether dtype can store rows of cols elements.
func takes(dtype format.DType, cols int) bool { e, _ := dtype.Block(); return cols%e == 0 }

// TestKernelEmbed: rows are converted (dequantized) exactly.
func TestKernelEmbed(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(1, 1))
	for _, dt := range allDTypes {
		H := 72
		for !takes(dt, H) {
			H += 8
		}
		w := p.weights(rng, dt, 50, H)
		ids := p.i32([]int32{3, 49, 0, 3, 17})
		out := p.zeros(5 * H)
		p.gpu.embed(out.g, w.g, ids.g, 0, 5)
		p.ref.embed(out.r, w.r, ids.r, 0, 5)
		g, c := p.get(out, 5*H)
		require.Equal(t, c, g, "%v", dt)
		one := p.zeros(H)
		p.gpu.embed(one.g, w.g, 0, 42, 1)
		p.ref.embed(one.r, w.r, 0, 42, 1)
		g, c = p.get(one, H)
		require.Equal(t, c, g, "%v single id", dt)
	}
}

func TestKernelRMSNorm(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(2, 1))
	for _, H := range []int{64, 2048, 3000} {
		T := 3
		x, w, out := p.f32(randVec(rng, T*H, 2)), p.f32(randVec(rng, H, 1)), p.zeros(T*H)
		p.gpu.rmsnorm(out.g, x.g, w.g, T, H, 1e-5)
		p.ref.rmsnorm(out.r, x.r, w.r, T, H, 1e-5)
		p.close("rmsnorm", out, T*H, 1e-5)
	}
}

// TestKernelMatVec: dense and gathered rows, bias, accumulation, each dtype,
// aligned (vectorised) and odd (scalar) row lengths; block rows of 1 to 64
// blocks (the GPU's x quantized to int8 blocks, __dp4a dots).
func TestKernelMatVec(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(3, 1))
	for _, dt := range allDTypes {
		for _, shape := range [][2]int{{300, 256}, {129, 100}, {129, 96}, {129, 768}, {2048, 2048}} {
			R, C := shape[0], shape[1]
			if !takes(dt, C) {
				continue
			}
			w := p.weights(rng, dt, R, C)
			x := p.f32(randVec(rng, C, 1))
			bias := p.f32(randVec(rng, R, 1))
			out := p.f32(randVec(rng, R, 1))
			p.gpu.matvec(out.g, w.g, 0, R, x.g, bias.g, true)
			p.ref.matvec(out.r, w.r, 0, R, x.r, bias.r, true)
			p.close("matvec dense", out, R, tolFor(dt))
			n := R / 3
			rows := p.i32(randRows(rng, n, R))
			gout := p.zeros(n)
			p.gpu.matvec(gout.g, w.g, rows.g, n, x.g, 0, false)
			p.ref.matvec(gout.r, w.r, rows.r, n, x.r, 0, false)
			p.close("matvec gathered", gout, n, tolFor(dt))
		}
	}
}

// TestKernelSketchWeights: GateFirst's row weights from an SK2 up_proj
// sketch, |(s·x)·down|, against the CPU's kernels.SketchMatVec and
// runtime.SketchWeights (x quantized alike; integer block sums, float32
// across blocks in another order: 1e-5).
func TestKernelSketchWeights(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(3, 9))
	for _, shape := range [][2]int{{300, 256}, {129, 96}, {129, 64}, {1434, 2048}} {
		R, C := shape[0], shape[1]
		s := p.weights(rng, format.SK2, R, C)
		x, down := p.f32(randVec(rng, C, 1)), p.f32(randVec(rng, R, 1))
		w := p.zeros(R)
		p.gpu.sketchWeights(w.g, s.g, x.g, down.g, R)
		p.ref.sketchWeights(w.r, s.r, x.r, down.r, R)
		p.close("sketch_weights", w, R, 1e-5)
		gw, rw := p.get(w, R)
		for j := range rw {
			require.GreaterOrEqual(t, gw[j], float32(0), "row %d", j)
		}
	}
}

func TestKernelGateUp(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(4, 1))
	for _, dt := range allDTypes {
		for _, shape := range [][2]int{{384, 128}, {172, 64}, {8192, 2048}, {77, 36}, {77, 1088}, {77, 256}} {
			N, H := shape[0], shape[1]
			if !takes(dt, H) {
				continue
			}
			g, u := p.weights(rng, dt, N, H), p.weights(rng, dt, N, H)
			x := p.f32(randVec(rng, H, 1))
			out := p.zeros(N)
			p.gpu.gateUp(out.g, g.g, u.g, 0, N, x.g)
			p.ref.gateUp(out.r, g.r, u.r, 0, N, x.r)
			p.close("gate_up dense", out, N, tolFor(dt))
			n := (2 * N) / 5
			rows := p.i32(randRows(rng, n, N))
			p.gpu.gateUp(out.g, g.g, u.g, rows.g, n, x.g)
			p.ref.gateUp(out.r, g.r, u.r, rows.r, n, x.r)
			p.close("gate_up gathered", out, n, tolFor(dt))
		}
	}
}

// TestKernelAddRows: the transposed down_proj over all rows and gathered
// rows, with and without accumulation into the residual.
func TestKernelAddRows(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(5, 1))
	for _, dt := range allDTypes {
		for _, shape := range [][2]int{{269, 128}, {120, 64}, {5734, 2048}, {33, 30}, {33, 96}, {33, 512}} {
			K, H := shape[0], shape[1]
			if !takes(dt, H) {
				continue
			}
			w := p.weights(rng, dt, K, H)
			a := p.f32(randVec(rng, K, 1))
			out := p.f32(randVec(rng, H, 1))
			p.gpu.addRows(out.g, w.g, 0, K, a.g, true)
			p.ref.addRows(out.r, w.r, 0, K, a.r, true)
			p.close("add_rows all", out, H, tolFor(dt))
			n := K / 2
			rows := p.i32(randRows(rng, n, K))
			p.gpu.addRows(out.g, w.g, rows.g, n, a.g, false)
			p.ref.addRows(out.r, w.r, rows.r, n, a.r, false)
			p.close("add_rows gathered", out, H, tolFor(dt))
		}
	}
}

// TestKernelGemm: prefill projections (cuBLAS for F32, the tiled kernel for
// F16/BF16/Q8_0/Q4_0) and the transposed down_proj, ragged tile edges
// included.
func TestKernelGemm(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(6, 1))
	for _, dt := range allDTypes {
		for _, s := range [][3]int{{5, 100, 70}, {5, 100, 96}, {70, 128, 384}, {129, 512, 256}, {7, 64, 512}} {
			T, R, C := s[0], s[1], s[2]
			if !takes(dt, C) {
				continue
			}
			w := p.weights(rng, dt, R, C)
			x := p.f32(randVec(rng, T*C, 1))
			bias := p.f32(randVec(rng, R, 1))
			out := p.f32(randVec(rng, T*R, 1))
			p.gpu.gemm(out.g, w.g, x.g, T, bias.g, true)
			p.ref.gemm(out.r, w.r, x.r, T, bias.r, true)
			p.close("gemm", out, T*R, tolFor(dt))
			p.gpu.gemm(out.g, w.g, x.g, T, 0, false)
			p.ref.gemm(out.r, w.r, x.r, T, 0, false)
			p.close("gemm plain", out, T*R, tolFor(dt))
			// Transposed: W [R, C] as the down_proj of R neurons.
			a := p.f32(randVec(rng, T*R, 1))
			y := p.f32(randVec(rng, T*C, 1))
			p.gpu.gemmRowsT(y.g, w.g, a.g, T, true)
			p.ref.gemmRowsT(y.r, w.r, a.r, T, true)
			p.close("gemm_rows_t", y, T*C, tolFor(dt))
		}
	}
}

func TestKernelSiLUMul(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(7, 1))
	n := 10007
	g, u := p.f32(randVec(rng, n, 4)), p.f32(randVec(rng, n, 1))
	p.gpu.siluMul(g.g, u.g, n)
	p.ref.siluMul(g.r, u.r, n)
	p.close("silu_mul", g, n, 1e-6)
}

// TestKernelRoPE: rotate-half with the Session's tables, in place on a
// strided buffer (K rows of the cache).
func TestKernelRoPE(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(8, 1))
	for _, hd := range []int{8, 64, 128} {
		heads, T, pos0 := 4, 6, 11
		stride := heads*hd + 2*hd
		cos, sin := ropeTables(testRopeConfig(hd), 64)
		cb, sb := p.f32(cos), p.f32(sin)
		x := p.f32(randVec(rng, T*stride, 1))
		p.gpu.rope(x.g, cb.g, sb.g, pos0, T, heads, hd, stride)
		p.ref.rope(x.r, cb.r, sb.r, pos0, T, heads, hd, stride)
		p.close("rope", x, T*stride, 1e-6)
	}
}

// TestKernelAttention: decode (T = 1) and prefill (T > 1, causal) over a
// cache with earlier positions, GQA groups, head sizes below and above a
// warp, positions across several 32-position chunks.
func TestKernelAttention(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(9, 1))
	for _, c := range []struct{ heads, kv, hd, pos0, T int }{
		{8, 4, 8, 0, 1}, {8, 4, 16, 37, 1}, {32, 8, 64, 200, 1}, {24, 8, 128, 5, 20}, {4, 1, 64, 0, 70}, {14, 2, 64, 130, 3},
	} {
		qd, kvd, n := c.heads*c.hd, c.kv*c.hd, c.pos0+c.T
		q := p.f32(randVec(rng, c.T*qd, 1))
		kc, vc := p.f32(randVec(rng, n*kvd, 1)), p.f32(randVec(rng, n*kvd, 1))
		out := p.zeros(c.T * qd)
		p.gpu.attention(out.g, q.g, kc.g, vc.g, c.pos0, c.T, c.heads, c.kv, c.hd)
		p.ref.attention(out.r, q.r, kc.r, vc.r, c.pos0, c.T, c.heads, c.kv, c.hd)
		p.close("attention", out, c.T*qd, 1e-5)
	}
}

func TestKernelArgmax(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(10, 1))
	for _, n := range []int{1, 7, 2048, 128256} {
		v := randVec(rng, n, 3)
		if n > 10 { // ties: the lowest index wins
			v[n-3], v[5] = 100, 100
		}
		x, out := p.f32(v), p.zeros(1)
		p.gpu.argmax(out.g, x.g, n)
		p.ref.argmax(out.r, x.r, n)
		g, c := p.getI32(out, 1)
		require.Equal(t, c, g, "n %d", n)
	}
}

// TestKernelCountTop: the per-token top round(α·P) of positive activations
// counted exactly as runtime.Counter, with many ties (quantised values) and
// α giving halves.
func TestKernelCountTop(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(11, 1))
	for _, c := range []struct {
		T, kept int
		alpha   float64
		quant   bool
	}{{1, 269, 0.2, false}, {9, 120, 0.5, true}, {33, 5734, 0.2, true}, {64, 8192, 0.2, false}, {5, 3000, 1, true}, {3, 40, 0.05, false}} {
		act := randVec(rng, c.T*c.kept, 1)
		if c.quant {
			for i := range act {
				act[i] = float32(math.Round(float64(act[i])*4) / 4)
			}
		}
		a := p.f32(act)
		counts := p.i32(make([]int32, c.kept))
		p.gpu.countTop(counts.g, a.g, c.T, c.kept, c.alpha)
		p.ref.countTop(counts.r, a.r, c.T, c.kept, c.alpha)
		g, r := p.getI32(counts, c.kept)
		require.Equal(t, r, g, "T %d kept %d alpha %g", c.T, c.kept, c.alpha)
	}
}

// TestKernelSelectTop: runtime.ActiveSet's rows (static first, then by
// count, ties to the lower row, ascending) for tie-heavy counts.
func TestKernelSelectTop(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(12, 1))
	for _, c := range []struct{ kept, static, target, maxCount int }{
		{269, 115, 192, 5}, {5734, 2458, 3277, 30}, {5734, 0, 3277, 30}, {120, 0, 48, 2}, {100, 100, 100, 3}, {64, 10, 64, 1}, {9000, 0, 1, 0},
	} {
		cs := make([]int32, c.kept)
		for i := range cs {
			cs[i] = int32(rng.IntN(c.maxCount + 1))
		}
		counts := p.i32(cs)
		rows := p.zeros(c.target)
		p.gpu.selectTop(rows.g, counts.g, c.kept, c.static, c.target)
		p.ref.selectTop(rows.r, counts.r, c.kept, c.static, c.target)
		g, r := p.getI32(rows, c.target)
		require.Equal(t, r, g, "%+v", c)
	}
}

// TestKernelGateFirst: GateFirst's calibration sums and row weights
// (runtime.GateCalib, GateWeights), its keys (runtime.GateScores' bits),
// the rows sinf_select_top picks from them, and the gathered SwiGLU, against
// the CPU.
// Keys agree within 2e-6 relative: the device computes silu with a double
// exp, the CPU's AVX2/NEON SwiGLU with its own float exp (within 1e-6 of the
// portable formula; the emulator found keys 2 ulp apart, where this test
// once allowed 1).
func TestKernelGateFirst(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(13, 1))
	for _, c := range []struct{ kept, k int }{{269, 96}, {5734, 2048}, {1075, 384}, {40, 40}} {
		const T = 7
		a, u := randVec(rng, T*c.kept, 1), randVec(rng, T*c.kept, 1)
		u[3] = 0 // skipped by both
		ab, ub := p.f32(a), p.f32(u)
		A, S := p.zeros(2*c.kept), p.zeros(2*c.kept) // doubles
		p.gpu.gateCalib(A.g, S.g, ab.g, ub.g, T, c.kept)
		p.ref.gateCalib(A.r, S.r, ab.r, ub.r, T, c.kept)
		up, down := p.f32(randVec(rng, c.kept, 1)), p.f32(randVec(rng, c.kept, 1))
		gw := p.zeros(c.kept)
		p.gpu.gateWeights(gw.g, A.g, S.g, up.g, down.g, c.kept)
		p.ref.gateWeights(gw.r, A.r, S.r, up.r, down.r, c.kept)
		p.close("gate_weights", gw, c.kept, 1e-6)
		g := p.f32(randVec(rng, c.kept, 4))
		w := make([]float32, c.kept)
		for i := range w {
			w[i] = float32(0.5 + rng.Float64())
		}
		wb := p.f32(w)
		keys := p.zeros(c.kept)
		p.gpu.gateScore(keys.g, g.g, wb.g, c.kept)
		p.ref.gateScore(keys.r, g.r, wb.r, c.kept)
		gk, rk := p.getI32(keys, c.kept)
		for i := range rk {
			gv, rv := float64(math.Float32frombits(uint32(gk[i]))), float64(math.Float32frombits(uint32(rk[i])))
			require.True(t, math.Abs(gv-rv) <= 2e-6*rv, "kept %d key %d: gpu %#x cpu %#x", c.kept, i, gk[i], rk[i])
		}
		// Select from the CPU's keys on both, so the rows must be equal.
		ck := p.i32(rk)
		rows := p.zeros(c.k)
		p.gpu.selectTop(rows.g, ck.g, c.kept, 0, c.k)
		p.ref.selectTop(rows.r, ck.r, c.kept, 0, c.k)
		gr, rr := p.getI32(rows, c.k)
		require.Equal(t, rr, gr, "kept %d", c.kept)
		uk := p.f32(randVec(rng, c.k, 1))
		h := p.zeros(c.k)
		rb := p.i32(rr)
		p.gpu.gatherSiluMul(h.g, g.g, rb.g, uk.g, c.k)
		p.ref.gatherSiluMul(h.r, g.r, rb.r, uk.r, c.k)
		p.close("gather_silu_mul", h, c.k, 1e-6)
	}
}
