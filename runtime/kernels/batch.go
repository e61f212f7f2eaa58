package kernels

import (
	"fmt"
	"unsafe"
)

// Batched decode: the next token of B sequences through one pass over the
// weights (a server's slots, issue 27 item 5). Each token's result is the
// single-token kernel's bit for bit — MatVecBatch's row t is MatVec of x[t],
// AddRowsBatch's is AddRows of a[t] — so that batching never changes a
// greedy generation. The pool splits a call exactly as it splits the
// single-token call of the same matrix (the same chunks), and within a chunk
// every token runs the single-token range code over a block of weights small
// enough to stay in cache (batchBlockBytes) before the next block is read: the
// weights come from memory once per step instead of once per token. Only the
// rows or columns each range call covers differ, and the kernels' arithmetic
// per row (dot products) and per column (row sums) does not depend on them
// where the blocks keep to the alignments below; TestBatchEqualsSingle checks
// it on every kernel set.

// batchBlockBytes is the weight bytes a chunk runs all its tokens over
// before going on, and batchMinCols the fewest columns of a row that
// AddRowsBatch takes at a time: narrower segments cost more in per-call and
// per-term overhead than the cache saves. Llama-3.2-1B's down_proj (8192 ×
// 2048), 4 tokens, 2 threads, AMD EPYC (Zen 5, family 26): AddRowsBatch's tokens/s
// against one AddRows call's, F16 0.56× with 64-column segments in 64 KiB
// blocks and 1.48× with 1024 columns in 256 KiB; Q4_0 0.37× and 1.0× (its
// integer products, computed per token, bound it: the batch saves only the
// reads).
const (
	batchBlockBytes = 256 << 10
	batchMinCols    = 1024
)

// MatVecBatch computes dst[t, r] = Σ_c W[r,c]·x[t, c] for every row r and t <
// B: MatVec of each of B vectors, each dst[t] bit for bit MatVec(w, x[t]).
// Shapes: x [B, w.Cols], dst [B, w.Rows], row-major float32. For
// block-quantized w each x[t] is quantized to int8 blocks as MatVec does.
func MatVecBatch(p *Pool, dst []float32, w Mat, x []float32, B int) {
	checkMat(w)
	if B < 1 {
		panic(fmt.Sprintf("kernels: MatVecBatch of %d vectors", B))
	}
	checkLen("MatVecBatch x", x, B*w.Cols)
	checkLen("MatVecBatch dst", dst, B*w.Rows)
	if B == 1 {
		MatVec(p, dst, w, x) // the same result, without the blocks
		return
	}
	j := job{op: opMatVecBatch, ks: active, w: w, dst: dst, x: x, t: B}
	p.quantizeX(&j)
	p.run(j, w.Rows)
}

// AddRowsBatch computes dst[t, c] += Σ_k a[t, k]·W[k, c] for t < B over the
// first len(a)/B rows of w (the transposed down_proj [kept, hidden], rows nil
// in AddRows): AddRows of each a[t], bit for bit. Shapes: a [B, n] with n ≤
// w.Rows, dst [B, w.Cols].
func AddRowsBatch(p *Pool, dst []float32, w Mat, a []float32, B int) {
	checkMat(w)
	if B < 1 || len(a)%B != 0 {
		panic(fmt.Sprintf("kernels: AddRowsBatch of %d coefficients for %d vectors", len(a), B))
	}
	n := len(a) / B
	if n > w.Rows {
		panic(fmt.Sprintf("kernels: AddRowsBatch: %d coefficients per vector for %d rows", n, w.Rows))
	}
	checkLen("AddRowsBatch dst", dst, B*w.Cols)
	if B == 1 {
		AddRows(p, dst, w, nil, a)
		return
	}
	ks := active
	if p.workers == 1 || n < minSplitTerms || w.Cols == 0 {
		// AddRows splits columns here: so does the batch, with every column
		// summed over all terms as there.
		p.run(job{op: opAddRowsBatch, ks: ks, w: w, dst: dst, x: a, t: B}, w.Cols)
		return
	}
	// AddRows splits terms into chunks summed into buffers of their own,
	// then added in chunk order; the batch keeps B sets of those buffers,
	// token t's chunk c in parts[t·chunks + c].
	chunks := p.run(job{op: opAddRowsPartBatch, ks: ks, w: w, x: a, t: B}, n)
	C := w.Cols
	nb := C &^ (ks.blk - 1)
	for t := range B {
		d := dst[t*C : (t+1)*C]
		for i := range chunks {
			acc := p.parts[t*chunks+i][:C]
			if nb > 0 {
				ks.axpy1[0](&d[0], unsafe.Pointer(&acc[0]), 1, nb)
			}
			for c := nb; c < C; c++ {
				d[c] += acc[c]
			}
		}
	}
}

// batchDo runs chunk [lo, hi) of a batched job (do's batched cases).
func (j *job) batchDo(lo, hi int, c int) {
	w, B := j.w, j.t
	R, C := w.Rows, w.Cols
	switch j.op {
	case opMatVecBatch: // [lo, hi) are rows, in blocks of a multiple of four from lo (dot4's groups)
		step := max(4, batchBlockBytes/max(w.RowBytes(), 1)/4*4)
		nq, nd := len(j.xq)/B, len(j.xd)/B
		for r0 := lo; r0 < hi; r0 += step {
			r1 := min(r0+step, hi)
			for t := range B {
				var xq []int8
				var xd []float32
				if nq > 0 {
					xq, xd = j.xq[t*nq:(t+1)*nq], j.xd[t*nd:(t+1)*nd]
				}
				matVecRange(j.ks, j.dst[t*R:(t+1)*R], w, nil, j.x[t*C:(t+1)*C], xq, xd, r0, r1)
			}
		}
	case opAddRowsBatch: // [lo, hi) are columns; every term
		n := len(j.x) / B
		step := j.colStep(n)
		for c0 := lo; c0 < hi; c0 += step {
			c1 := min(c0+step, hi)
			for t := range B {
				addRowsCols(j.ks, w, j.dst[t*C+c0:t*C+c1], nil, j.x[t*n:(t+1)*n], 0, n, c0)
			}
		}
	case opAddRowsPartBatch: // [lo, hi) are terms, token t's sums in parts[t·chunks + c]
		n := len(j.x) / B
		chunks := len(j.parts) / B
		for t := range B {
			clear(j.parts[t*chunks+c][:C])
		}
		step := j.colStep(hi - lo)
		for c0 := 0; c0 < C; c0 += step {
			c1 := min(c0+step, C)
			for t := range B {
				addRowsCols(j.ks, w, j.parts[t*chunks+c][c0:c1], nil, j.x[t*n:(t+1)*n], lo, hi, c0)
			}
		}
	}
}

// colStep returns the width of the column blocks in which AddRowsBatch takes
// rows terms of the job's weights: about batchBlockBytes of them, at least
// batchMinCols, and a multiple of 64 columns (every kernel set's SIMD width,
// and a Q8_0/Q4_0 block) or of a K-quant's 256, so that blocks from an
// aligned start take each column down the same SIMD or tail path as one call
// over the whole range.
func (j *job) colStep(rows int) int {
	a := 64
	if j.w.DType.Quantized() {
		a = max(a, qBlockElems[qIndex(j.w.DType)])
	}
	perCol := max(1, j.w.RowBytes()/max(j.w.Cols, 1)) // bytes a row holds per column (≥ 1 for 4-bit blocks' rounding)
	return max(batchMinCols, batchBlockBytes/max(rows*perCol, 1)/a*a)
}

// addRowsCols adds Σ_{k∈[lo,hi)} a[k]·W[r_k, c0 : c0+len(acc)] to acc, r_k =
// rows[k] (rows nil: k): AddRows' sum over the terms [lo, hi) restricted to
// the columns from c0 (a multiple of the dtype's block). Every AddRows path
// (columns, terms, batched) sums through it.
func addRowsCols(ks *kernelSet, w Mat, acc []float32, rows []int32, a []float32, lo, hi, c0 int) {
	rb := w.RowBytes()
	base := unsafe.Add(dataPtr(w), w.colBytes(c0))
	nrows, rs := w.Rows, rows
	if rows == nil {
		base, nrows = unsafe.Add(base, lo*rb), hi-lo
	} else {
		rs = rows[lo:hi]
	}
	if w.DType.Quantized() {
		qaccumRows(ks, qIndex(w.DType), acc, base, rb, nrows, rs, a[lo:hi])
		return
	}
	accumRows(ks, dtIndex(w.DType), w.DType.Size(), acc, base, rb, nrows, rs, a[lo:hi], true)
}
