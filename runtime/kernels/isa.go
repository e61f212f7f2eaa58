package kernels

//go:generate go run ./internal/asmgen

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// kernelSet is one implementation of the raw inner loops, for one instruction
// set. Index [d] of the per-dtype tables is dtIndex of the weight dtype. Raw
// kernels take element counts that are whole multiples of their block (blk or
// gblk, powers of two); callers finish the tails with the generic set. Weight
// pointers need no alignment.
type kernelSet struct {
	name string
	// features lists the CPU features the set uses, as Linux's
	// /proc/cpuinfo flags name them (arm64: its Features names).
	features []string
	blk      int // element multiple of dot4, dot1, axpy4, axpy1, cvt
	gblk     int // element multiple of gemm
	gr       int // gemm micro-kernel rows
	gt       int // gemm micro-kernel tokens
	tt       int // gemmT micro-kernel tokens
	tc       int // gemmT micro-kernel columns

	// dot4 returns the dot products of the n-element rows w0..w3 with x,
	// prefetching the rows p0..p3 (the ones the caller reads next) as it goes.
	dot4 [3]func(w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, x *float32, n int) (s0, s1, s2, s3 float32)
	// dot1 returns the dot product of the n-element row w with x.
	dot1 [3]func(w unsafe.Pointer, x *float32, n int) float32
	// dotRows sets dst[j] to the dot product of the n-element row r at
	// w + r·stride bytes with x, for j < m and r = idx[j] (idx nil: r = j),
	// prefetching contiguous rows pf bytes ahead, gathered ones a row ahead.
	// Indices are not checked.
	dotRows [3]func(w unsafe.Pointer, stride int, idx *int32, x *float32, n, m int, dst *float32, pf int)
	// axpy4 adds a0·w0 + a1·w1 + a2·w2 + a3·w3 to dst[:n], prefetching the
	// rows p0..p3 as it goes.
	axpy4 [3]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, n int)
	// axpy1 adds a·w to dst[:n].
	axpy1 [3]func(dst *float32, w unsafe.Pointer, a float32, n int)
	// axpyRows adds Σ_{j<m} a[j]·w_r to dst[:n], with rows r as in dotRows,
	// skipping a[j] == 0.
	axpyRows [3]func(dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, n, m int, pf int)
	// gemm adds Σ_{e<n} W_r[e]·X_t[e] to the float32 at dst + t·dstride + 4r
	// for r < gr, t < gt, with W_r at w + r·wstride bytes and X_t at
	// x + t·xstride bytes.
	gemm [3]func(w unsafe.Pointer, wstride int, x *float32, xstride int, n int, dst *float32, dstride int)
	// cvt decodes n weights at src into dst.
	cvt [3]func(dst *float32, src unsafe.Pointer, n int)
	// cvtPanels decodes n weights at src (n a multiple of tc) in runs of tc,
	// run i to dst + i·pstride bytes: one weight row cut into gemmT's panels.
	// It prefetches as many bytes at pre into L2 as it reads at src.
	cvtPanels [3]func(dst *float32, pstride int, src unsafe.Pointer, n int, pre unsafe.Pointer)
	// gemmT adds Σ_{k<kc} A_t[k]·W_k[c] to D_t[c] for t < tt, c < tc, with the
	// float32 row W_k at w + k·wstride bytes, A_t at a + t·astride bytes and
	// D_t at dst + t·dstride bytes.
	gemmT func(w unsafe.Pointer, wstride int, a *float32, astride int, dst *float32, dstride int, kc int)
	// swiglu sets g[i] = silu(g[i])·u[i] for i < n, n a multiple of 16.
	swiglu func(g, u *float32, n int)
	// expSum sets x[i] = e^(x[i]−m) for i < n, n a multiple of 16, and
	// returns their sum.
	expSum func(x *float32, n int, m float32) float32
	// rope rotates heads consecutive vectors of 2·half float32 at x by cos
	// and sin [half] (Rope's arithmetic), half a multiple of 8.
	rope func(x, cos, sin *float32, half, heads int)
	// toF16 sets dst[i] to x[i] rounded to the nearest F16, ties to even
	// (format.F32ToF16's value; any NaN stays a NaN, not necessarily
	// F32ToF16's 0x7e00), for i < n, n a multiple of 8 (Cache.Put).
	toF16 func(dst *uint16, x *float32, n int)
	// readSum returns a checksum of the n bytes at p (n a multiple of 128).
	readSum func(p unsafe.Pointer, n int) uint64
	// sketch sets dst[r] = 2·Σ_b d_w·Σ_lanes (d_x·v − t[b]) for r < rows, the
	// rows of nb SK2 blocks (10 bytes each) one after the other at w, over
	// x as quantizeX leaves it at xq and t[b] = 3·d_x·Σq_x/16 (SketchMatVec;
	// see sketchAVX2).
	sketch func(dst *float32, w unsafe.Pointer, xq *int8, t *float32, rows, nb int)

	// Block-quantized weights (quant.go), index [q] qIndex of the dtype;
	// rows are nb whole blocks of 32 weights.
	//
	// qdotRows sets dst[j] to Σ_b d_w[b]·xd[b]·Σ_{e<32} q_w[b][e]·q_x[b][e]
	// over the nb blocks of row r, rows as in dotRows: the row's dot product
	// with x quantized to int8 blocks by quantizeX (q_x[b] at xq + 64b; see
	// there for the rest of the layout); for the K-quants by quantizeXK, whose
	// one scale per 256 the AVX2 K-quant dots rely on (they read a
	// super-block's d_x once).
	qdotRows [nq]func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int)
	// qaxpy4 adds a0·w0 + a1·w1 + a2·w2 + a3·w3 to dst[:32·nb], prefetching
	// the rows p0..p3 as it goes.
	qaxpy4 [nq]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int)
	// qcvt dequantizes the nb blocks at src into dst[:32·nb].
	qcvt [nq]func(dst *float32, src unsafe.Pointer, nb int)
	// quantizeX quantizes the 32·nb floats at x to int8 blocks with one
	// scale per g blocks (nb a multiple of g) as the portable
	// quantizeXGroups does, with the same results: g 1 is quantizeX, g 8
	// quantizeXK.
	quantizeX func(xq *int8, xd *float32, x *float32, nb, g int)

	// Integer prefill (qgemm.go), index [q] as above; nil where the set
	// multiplies dequantized float32 weights instead.
	//
	// qpack repacks the nb blocks of 32 (a K-quant's sub-blocks) of the
	// qrows (8 or 16) rows at w, w+stride, … into dst, qpackStride·qrows/8
	// bytes a block (the layout of internal/asmgen/qgemm.go).
	qpack [nq]func(dst *byte, w unsafe.Pointer, stride int, nb int)
	qrows int
	// qgemm sets dst_j[i] = Σ_b d_w[i][b]·d_x[j][b]·Σ_e u·q_x − m_w[i][b]·c[j][b]
	// for the qrows packed rows i at pw and four tokens j: token j's x as
	// quantizeX leaves it at xq + j·xstride bytes, its sums c = 8·d_x·Σ q_x
	// at xc + j·cstride bytes, its qrows sums at dst + j·dstride bytes;
	// it prefetches the nb cache lines from pf on (the next rows to pack).
	qgemm [nq]func(pw *byte, xq *int8, xstride int, xc *float32, cstride int, nb int, dst *float32, dstride int, pf unsafe.Pointer)

	// Multi-token decode (batch.go; nil where the set has none), index
	// [T−2] for T tokens at once:
	//
	// dotRowsB[T−2][d] is dotRows over m contiguous rows for the T vectors
	// at x + t·xstride bytes, token t's results at dst + t·dstride bytes:
	// each weight converted once for all T, each token's sums dotRows' bit
	// for bit.
	dotRowsB [3][3]dotRowsBFunc
	// dot4B[T−2][d] is the same for rows of seqRowBytes or more, each
	// token's sums dot4's bit for bit (the rows of a group of four, one
	// after the other; the caller takes the rows after the last whole group
	// and the elements after the last 2·vw token by token, as dot4 does).
	dot4B [3][3]dotRowsBFunc
	// qdotRowsB[T−2][q] is qdotRows of Q8_0 (q 0) or Q4_0 (q 1) over m
	// contiguous rows for T tokens, x as qBatchLayout writes it at xb:
	// each block unpacked once for all T, each token's sums qdotRows' bit
	// for bit.
	qdotRowsB [3][2]qdotRowsBFunc
	// kdotRowsB[T−2][q] is qdotRows of a K-quant (Q6_K so far) over m
	// contiguous rows for T tokens, token t's x as quantizeXFor(dtype)
	// leaves it at xq + t·xstride bytes: each super-block unpacked once for all T, each
	// token's sums qdotRows' bit for bit.
	kdotRowsB [3][nq]kdotRowsBFunc
	// qaxpy4B[q] is qaxpy4 of Q8_0 (q 0) or Q4_0 (q 1) for T ≤ 4 tokens
	// at once: d_t[:32·nb] += Σ_r a_t[r]·w_r, a_t at a + t·astride bytes (no
	// prefetching); each block unpacked once for all T, each token's sums
	// qaxpy4's bit for bit.
	qaxpy4B [2]qaxpy4BFunc

	// Interleaved rows (Q8_0X16, Q4_0X16: interleave.go), index [q] of the
	// base dtype (0 Q8_0, 1 Q4_0); nil where the set has none (the
	// portable forms run instead):
	//
	// qdotX[q] is MatVec over ng interleaved groups of sixteen rows at w,
	// nb blocks a row, x as quantizeX leaves it: row i of group g's sum at
	// dst[16g+i].
	qdotX [2]qdotXFunc
	// qdotXB[T−2][q] is qdotX for T tokens at once (MatVecBatch): token
	// t's x at xq + t·xstride and xd + t·xdstride bytes, its sums at dst
	// + t·dstride bytes; each chunk unpacked once for all T, each token's
	// sums qdotX's bit for bit.
	qdotXB [3][2]qdotXBFunc
	// qpackX[q] repacks one interleaved group's nb block columns at w in
	// qgemm's layout at dst: one sixteen-row group (qrows 16), or two
	// eight-row ones, rows 8–15 at dst + qpackStride·nb (qrows 8).
	qpackX [2]func(dst *byte, w unsafe.Pointer, nb int)
}

// qdotXFunc is the type of a set's interleaved decode kernels
// (kernelSet.qdotX).
type qdotXFunc = func(w unsafe.Pointer, nb int, xq *int8, xd *float32, ng int, dst *float32)

// qdotXBFunc is the type of a set's multi-token interleaved decode kernels
// (kernelSet.qdotXB).
type qdotXBFunc = func(w unsafe.Pointer, nb int, xq *int8, xstride int, xd *float32, xdstride int, ng int, dst *float32, dstride int)

// dotRowsBFunc, qdotRowsBFunc and kdotRowsBFunc are the types of a set's
// multi-token decode kernels (kernelSet.dotRowsB, qdotRowsB, kdotRowsB).
type (
	dotRowsBFunc  = func(w unsafe.Pointer, stride int, x *float32, xstride int, n, m int, dst *float32, dstride int, pf int)
	qdotRowsBFunc = func(w unsafe.Pointer, stride int, xb *byte, nb, m int, dst *float32, dstride int, pf int)
	kdotRowsBFunc = func(w unsafe.Pointer, stride int, xq *int8, xstride int, nb, m int, dst *float32, dstride int, pf int)
	qaxpy4BFunc   = func(d0, d1, d2, d3 unsafe.Pointer, T int, w0, w1, w2, w3 unsafe.Pointer, a *float32, astride int, nb int)
)

// qdotFunc is the type of a set's qdotRows kernels.
type qdotFunc = func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int)

// dtIndex maps a weight dtype to its index in the kernel tables.
func dtIndex(d format.DType) int {
	switch d {
	case format.F32:
		return 0
	case format.F16:
		return 1
	case format.BF16:
		return 2
	}
	panic("kernels: weight dtype " + d.String() + " is not F32, F16 or BF16")
}

// checkDType panics unless d is a weight dtype the kernels take.
func checkDType(d format.DType) {
	if !d.Quantized() {
		dtIndex(d)
	}
}

// genericSet is the portable implementation; it is also the tail handler of
// every other set.
var genericSet = &kernelSet{
	name: "generic", blk: 1, gblk: 1, gr: 1, gt: 4, tt: 4, tc: tcGeneric,
	dot4:      [3]func(w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, x *float32, n int) (s0, s1, s2, s3 float32){dot4F32Go, dot4F16Go, dot4BF16Go},
	dot1:      [3]func(w unsafe.Pointer, x *float32, n int) float32{dot1F32Go, dot1F16Go, dot1BF16Go},
	dotRows:   [3]func(w unsafe.Pointer, stride int, idx *int32, x *float32, n, m int, dst *float32, pf int){dotRowsF32Go, dotRowsF16Go, dotRowsBF16Go},
	axpy4:     [3]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, n int){axpy4F32Go, axpy4F16Go, axpy4BF16Go},
	axpy1:     [3]func(dst *float32, w unsafe.Pointer, a float32, n int){axpy1F32Go, axpy1F16Go, axpy1BF16Go},
	axpyRows:  [3]func(dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, n, m int, pf int){axpyRowsF32Go, axpyRowsF16Go, axpyRowsBF16Go},
	qdotX:     [2]qdotXFunc{qdotX16Q8_0Go, qdotX16Q4_0Go},
	gemm:      [3]func(w unsafe.Pointer, wstride int, x *float32, xstride int, n int, dst *float32, dstride int){gemmF32Go, gemmF16Go, gemmBF16Go},
	cvt:       [3]func(dst *float32, src unsafe.Pointer, n int){cvtF32Go, cvtF16Go, cvtBF16Go},
	cvtPanels: [3]func(dst *float32, pstride int, src unsafe.Pointer, n int, pre unsafe.Pointer){cvtPanelsF32Go, cvtPanelsF16Go, cvtPanelsBF16Go},
	gemmT:     gemmTF32Go,
	readSum:   readSumGo,
	swiglu:    swigluGo,
	expSum:    expSumGo,
	rope:      ropeGo,
	toF16:     toF16Go,
	qdotRows:  [nq]func(w unsafe.Pointer, stride int, idx *int32, xq *int8, xd *float32, nb, m int, dst *float32, pf int){qdotRowsQ8_0Go, qdotRowsQ4_0Go},
	qcvt:      [nq]func(dst *float32, src unsafe.Pointer, nb int){qcvtQ8_0Go, qcvtQ4_0Go},
	quantizeX: quantizeXGo,
	qaxpy4:    [nq]func(dst *float32, w0, w1, w2, w3, p0, p1, p2, p3 unsafe.Pointer, a0, a1, a2, a3 float32, nb int){qaxpy4Q8_0Go, qaxpy4Q4_0Go},
	sketch:    sketchGo,
}

// kernelSets lists the sets this CPU can run, the preferred one first and the
// generic one last; archSets is filled in by the architecture files.
func kernelSets() []*kernelSet { return append(archSets(), genericSet) }

// active is the set the kernels use; each call reads it once, on the calling
// goroutine, and hands it to the workers inside the job. It is the best set
// of this CPU, or the one named by $SINF_KERNELS (for measuring; never
// needed). envErr is the error of a name that is not a set this CPU runs:
// the kernels then use the best set, and the commands refuse to start
// (EnvError).
var active, envErr = chooseSet(os.Getenv("SINF_KERNELS"))

// chooseSet returns the set named name ("" the best of this CPU), or the
// best one and an error naming SINF_KERNELS and the valid names when this
// CPU runs no set of that name.
func chooseSet(name string) (*kernelSet, error) {
	sets := kernelSets()
	if name == "" {
		return sets[0], nil
	}
	var here []string
	for _, ks := range sets {
		if ks.name == name {
			return ks, nil
		}
		here = append(here, ks.name)
	}
	for _, ks := range declaredSets {
		if ks.name == name {
			return sets[0], fmt.Errorf("SINF_KERNELS=%s: this CPU lacks a feature of that kernel set (it uses %s); this CPU runs %s",
				name, strings.Join(ks.features, ", "), strings.Join(here, ", "))
		}
	}
	return sets[0], fmt.Errorf("SINF_KERNELS=%s: no such kernel set; this CPU runs %s (unset SINF_KERNELS for the best, %s)",
		name, strings.Join(here, ", "), sets[0].name)
}

// EnvError returns the error of $SINF_KERNELS when it names no kernel set
// this CPU runs (nil when it is unset or valid). The commands check it at
// start-up, so that a mistyped name is not a silent fallback.
func EnvError() error { return envErr }

// ISA names the kernel set the kernels run on: "avx512vnni", "avx512",
// "avxvnni", "avx2", "dotprod", "neon" or "generic".
func ISA() string { return active.name }

// Features lists the CPU features the active kernel set uses, as
// /proc/cpuinfo names them (none for the generic set).
func Features() []string { return slices.Clone(active.features) }

// useKernelSet makes ks the active set and returns a function restoring the
// previous one. For tests and benchmarks; not safe while kernels run.
func useKernelSet(ks *kernelSet) (restore func()) {
	prev := active
	active = ks
	return func() { active = prev }
}

// ---- portable raw kernels ----

func f32s(p unsafe.Pointer, n int) []float32 { return unsafe.Slice((*float32)(p), n) }
func u16s(p unsafe.Pointer, n int) []uint16  { return unsafe.Slice((*uint16)(p), n) }
func xs(x *float32, n int) []float32         { return unsafe.Slice(x, n) }

func dot1F32Go(w unsafe.Pointer, x *float32, n int) float32 {
	if n <= 0 {
		return 0
	}
	return dotF32(f32s(w, n), xs(x, n))
}

func dot1F16Go(w unsafe.Pointer, x *float32, n int) float32 {
	if n <= 0 {
		return 0
	}
	return dotF16(u16s(w, n), xs(x, n))
}

func dot1BF16Go(w unsafe.Pointer, x *float32, n int) float32 {
	if n <= 0 {
		return 0
	}
	return dotBF16(u16s(w, n), xs(x, n))
}

// rowAt returns row j of a row list for the row kernels: w + r·stride with
// r = idx[j], or j when idx is nil.
func rowAt(w unsafe.Pointer, stride int, idx *int32, j int) unsafe.Pointer {
	if idx != nil {
		j = int(*(*int32)(unsafe.Add(unsafe.Pointer(idx), 4*j)))
	}
	return unsafe.Add(w, j*stride)
}

func dotRowsGo(dot func(unsafe.Pointer, *float32, int) float32, w unsafe.Pointer, stride int, idx *int32, x *float32, n, m int, dst *float32) {
	d := xs(dst, m)
	for j := range d {
		d[j] = dot(rowAt(w, stride, idx, j), x, n)
	}
}

func dotRowsF32Go(w unsafe.Pointer, stride int, idx *int32, x *float32, n, m int, dst *float32, _ int) {
	dotRowsGo(dot1F32Go, w, stride, idx, x, n, m, dst)
}

func dotRowsF16Go(w unsafe.Pointer, stride int, idx *int32, x *float32, n, m int, dst *float32, _ int) {
	dotRowsGo(dot1F16Go, w, stride, idx, x, n, m, dst)
}

func dotRowsBF16Go(w unsafe.Pointer, stride int, idx *int32, x *float32, n, m int, dst *float32, _ int) {
	dotRowsGo(dot1BF16Go, w, stride, idx, x, n, m, dst)
}

func dot4F32Go(w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, x *float32, n int) (s0, s1, s2, s3 float32) {
	return dot1F32Go(w0, x, n), dot1F32Go(w1, x, n), dot1F32Go(w2, x, n), dot1F32Go(w3, x, n)
}

func dot4F16Go(w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, x *float32, n int) (s0, s1, s2, s3 float32) {
	return dot1F16Go(w0, x, n), dot1F16Go(w1, x, n), dot1F16Go(w2, x, n), dot1F16Go(w3, x, n)
}

func dot4BF16Go(w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, x *float32, n int) (s0, s1, s2, s3 float32) {
	return dot1BF16Go(w0, x, n), dot1BF16Go(w1, x, n), dot1BF16Go(w2, x, n), dot1BF16Go(w3, x, n)
}

func axpy1F32Go(dst *float32, w unsafe.Pointer, a float32, n int) {
	if n > 0 {
		axpyF32(xs(dst, n), f32s(w, n), a)
	}
}

func axpy1F16Go(dst *float32, w unsafe.Pointer, a float32, n int) {
	if n > 0 {
		axpyF16(xs(dst, n), u16s(w, n), a)
	}
}

func axpy1BF16Go(dst *float32, w unsafe.Pointer, a float32, n int) {
	if n > 0 {
		axpyBF16(xs(dst, n), u16s(w, n), a)
	}
}

func axpy4F32Go(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, n int) {
	axpy1F32Go(dst, w0, a0, n)
	axpy1F32Go(dst, w1, a1, n)
	axpy1F32Go(dst, w2, a2, n)
	axpy1F32Go(dst, w3, a3, n)
}

func axpy4F16Go(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, n int) {
	axpy1F16Go(dst, w0, a0, n)
	axpy1F16Go(dst, w1, a1, n)
	axpy1F16Go(dst, w2, a2, n)
	axpy1F16Go(dst, w3, a3, n)
}

func axpy4BF16Go(dst *float32, w0, w1, w2, w3, _, _, _, _ unsafe.Pointer, a0, a1, a2, a3 float32, n int) {
	axpy1BF16Go(dst, w0, a0, n)
	axpy1BF16Go(dst, w1, a1, n)
	axpy1BF16Go(dst, w2, a2, n)
	axpy1BF16Go(dst, w3, a3, n)
}

func axpyRowsGo(axpy func(*float32, unsafe.Pointer, float32, int), dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, n, m int) {
	for j, aj := range xs(a, m) {
		if aj != 0 {
			axpy(dst, rowAt(w, stride, idx, j), aj, n)
		}
	}
}

func axpyRowsF32Go(dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, n, m int, _ int) {
	axpyRowsGo(axpy1F32Go, dst, w, stride, idx, a, n, m)
}

func axpyRowsF16Go(dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, n, m int, _ int) {
	axpyRowsGo(axpy1F16Go, dst, w, stride, idx, a, n, m)
}

func axpyRowsBF16Go(dst *float32, w unsafe.Pointer, stride int, idx *int32, a *float32, n, m int, _ int) {
	axpyRowsGo(axpy1BF16Go, dst, w, stride, idx, a, n, m)
}

func cvtF32Go(dst *float32, src unsafe.Pointer, n int) {
	if n > 0 {
		copy(xs(dst, n), f32s(src, n))
	}
}

func cvtF16Go(dst *float32, src unsafe.Pointer, n int) {
	if n <= 0 {
		return
	}
	d, s, t := xs(dst, n), u16s(src, n), f16Table
	for i, h := range s {
		d[i] = t[h]
	}
}

func cvtBF16Go(dst *float32, src unsafe.Pointer, n int) {
	if n <= 0 {
		return
	}
	d, s := xs(dst, n), u16s(src, n)
	for i, h := range s {
		d[i] = bf(h)
	}
}

// tcGeneric is the generic set's gemmT tile width.
const tcGeneric = 8

func cvtPanelsGo(cvt func(*float32, unsafe.Pointer, int), size int, dst *float32, pstride int, src unsafe.Pointer, n int) {
	for i := 0; i < n; i += tcGeneric {
		cvt((*float32)(unsafe.Add(unsafe.Pointer(dst), i/tcGeneric*pstride)), unsafe.Add(src, i*size), min(tcGeneric, n-i))
	}
}

func cvtPanelsF32Go(dst *float32, pstride int, src unsafe.Pointer, n int, _ unsafe.Pointer) {
	cvtPanelsGo(cvtF32Go, 4, dst, pstride, src, n)
}

func cvtPanelsF16Go(dst *float32, pstride int, src unsafe.Pointer, n int, _ unsafe.Pointer) {
	cvtPanelsGo(cvtF16Go, 2, dst, pstride, src, n)
}

func cvtPanelsBF16Go(dst *float32, pstride int, src unsafe.Pointer, n int, _ unsafe.Pointer) {
	cvtPanelsGo(cvtBF16Go, 2, dst, pstride, src, n)
}

// gemmGo is the portable micro-kernel (gr 1, gt 4): it decodes the row in
// chunks once (dtype index d, size bytes each) and dots each chunk with the
// four tokens.
func gemmGo(d, size int, w unsafe.Pointer, x *float32, xstride int, n int, dst *float32, dstride int) {
	var buf [256]float32
	var s [4]float32
	for e := 0; e < n; e += len(buf) {
		m := min(len(buf), n-e)
		src := unsafe.Add(w, e*size)
		switch d { // direct calls keep buf on the stack
		case 0:
			cvtF32Go(&buf[0], src, m)
		case 1:
			cvtF16Go(&buf[0], src, m)
		default:
			cvtBF16Go(&buf[0], src, m)
		}
		for t := range s {
			xt := (*float32)(unsafe.Add(unsafe.Pointer(x), t*xstride+4*e))
			s[t] += dotF32(buf[:m], xs(xt, m))
		}
	}
	for t, v := range s {
		*(*float32)(unsafe.Add(unsafe.Pointer(dst), t*dstride)) += v
	}
}

func gemmF32Go(w unsafe.Pointer, _ int, x *float32, xstride int, n int, dst *float32, dstride int) {
	gemmGo(0, 4, w, x, xstride, n, dst, dstride)
}

func gemmF16Go(w unsafe.Pointer, _ int, x *float32, xstride int, n int, dst *float32, dstride int) {
	gemmGo(1, 2, w, x, xstride, n, dst, dstride)
}

func gemmBF16Go(w unsafe.Pointer, _ int, x *float32, xstride int, n int, dst *float32, dstride int) {
	gemmGo(2, 2, w, x, xstride, n, dst, dstride)
}

// gemmTF32Go is the portable outer-product micro-kernel (tt 4, tc 8).
func gemmTF32Go(w unsafe.Pointer, wstride int, a *float32, astride int, dst *float32, dstride int, kc int) {
	var acc [4][8]float32
	for t := range acc {
		copy(acc[t][:], xs((*float32)(unsafe.Add(unsafe.Pointer(dst), t*dstride)), 8))
	}
	for k := 0; k < kc; k++ {
		wk := (*[8]float32)(unsafe.Add(w, k*wstride))
		for t := range acc {
			at := *(*float32)(unsafe.Add(unsafe.Pointer(a), t*astride+4*k))
			for c, wv := range wk {
				acc[t][c] += at * wv
			}
		}
	}
	for t := range acc {
		copy(xs((*float32)(unsafe.Add(unsafe.Pointer(dst), t*dstride)), 8), acc[t][:])
	}
}

func readSumGo(p unsafe.Pointer, n int) uint64 {
	if n <= 0 {
		return 0
	}
	b := unsafe.Slice((*uint64)(p), n/8)
	var s0, s1, s2, s3 uint64
	for i := 0; i+4 <= len(b); i += 4 {
		s0 += b[i]
		s1 += b[i+1]
		s2 += b[i+2]
		s3 += b[i+3]
	}
	return s0 + s1 + s2 + s3
}

func toF16Go(dst *uint16, x *float32, n int) {
	d, v := unsafe.Slice(dst, n), xs(x, n)
	for i, f := range v {
		d[i] = format.F32ToF16(f)
	}
}
