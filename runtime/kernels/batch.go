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
// single-token call of the same matrix (the same chunks). Within a chunk,
// where the set has multi-token kernels (kernelSet.dotRowsB: short float
// rows on x86-64; dot4B: long ones on AVX2; qdotXB: interleaved Q8_0 and
// Q4_0 on x86-64 but AVX-VNNI, two tokens at a time on arm64 dotprod; qaxpy4B: row-major Q8_0 and Q4_0 on
// AVX-512, and qdotRowsB with AVX512-VNNI; kdotRowsB: Q6_K, such as a
// Q4_0 or K-quant file's output projection, on the AVX2 and wider sets) up
// to four tokens go through
// each weight together, converted or unpacked once for all of them, each
// token keeping the single-token kernel's accumulators and order.
// Otherwise every token runs the single-token range code over a block of
// weights small enough to stay in cache (batchBlockBytes) before the next
// block is read: the weights come from memory once per step instead of once
// per token. Only the rows or columns each range call covers differ, and the
// kernels' arithmetic per row (dot products) and per column (row sums) does
// not depend on them where the blocks keep to the alignments below;
// TestBatchEqualsSingle checks it on every kernel set.

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
	checkMatX(w)
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
	p.batchX(&j)
	p.run(j, w.Rows)
}

// MatVecsBatch is MatVecs for B vectors: dst[i] = MatVecBatch(w[i], x, B)
// for each i (shapes as MatVecBatch's: dst[i] [B, w[i].Rows], x [B,
// w[i].Cols]), such as the q_proj, k_proj and v_proj of B sessions' tokens
// in a batched decode step. Each run of consecutive matrices MatVecs would
// fuse (the same dtype and width) goes to the pool as one call over their
// rows, each x quantized once; every dst[i] is MatVecBatch's, bit for bit.
// It panics, as MatVecBatch does, on B < 1 or lengths that disagree.
func MatVecsBatch(p *Pool, dst [][]float32, w []Mat, x []float32, B int) {
	if B < 1 {
		panic(fmt.Sprintf("kernels: MatVecsBatch of %d vectors", B))
	}
	matVecRuns(p, "MatVecsBatch", dst, w, x, B)
}

// batchX quantizes a batched product's B vectors (quantizeX) and, where
// the set has multi-token kernels for the dtype, lays them out for them
// (qBatchLayout) in the caller's scratch.
func (p *Pool) batchX(j *job) {
	p.quantizeX(j)
	if q, ok := j.batchQ(); ok {
		nb := j.w.Cols / 32
		s := p.scratch[0]
		n := qBatchBytes(j.ks, q, nb, j.t)
		if len(s.xb) < n {
			s.xb = make([]byte, n)
		}
		j.xb = s.xb[:n]
		qBatchLayout(j.xb, j.ks, q, j.xq, j.xd, nb, j.t)
	}
}

// batchT returns how many of the left tokens the next multi-token call of
// a MatVecBatch takes (0: none, the rest go one by one): the most the set's
// kernels for the dtype take, at most four. kern reports whether the set
// has a kernel for T tokens.
func batchT(left int, kern func(T int) bool) int {
	for T := min(left, 4); T >= 2; T-- {
		if kern(T) {
			return T
		}
	}
	return 0
}

// batchQ reports whether the job's MatVecBatch runs multi-token qdotRowsB
// kernels, and their q index.
func (j *job) batchQ() (int, bool) {
	if !j.w.DType.Quantized() || j.w.Cols == 0 || j.w.DType.Interleaved() { // interleaved: xbatchRows
		return 0, false
	}
	q := qIndex(j.w.DType)
	if q > 1 || j.ks.qdotRowsB[0][q] == nil {
		return 0, false
	}
	return q, true
}

// qBatchRecord is the bytes of one token's x per pair of blocks in
// qBatchLayout (internal/asmgen/batch.go's): Q8_0 192, Q4_0 128.
func qBatchRecord(q int) int {
	if q == 0 {
		return 192
	}
	return 128
}

// qBatchStride is the bytes of one pair of blocks of a group of T tokens in
// qBatchLayout: T records, and for Q4_0 the pair's corrections.
func qBatchStride(q, T int) int {
	if q == 0 {
		return T * qBatchRecord(q)
	}
	return T*qBatchRecord(q) + 32
}

// qBatchBytes is the size of qBatchLayout's output for B tokens of nb blocks.
func qBatchBytes(ks *kernelSet, q, nb, B int) int {
	n, pairs := 0, (nb+1)/2
	for t := 0; t < B; {
		T := batchT(B-t, func(T int) bool { return ks.qdotRowsB[T-2][q] != nil })
		if T == 0 {
			break
		}
		n += pairs * qBatchStride(q, T)
		t += T
	}
	return n
}

// qBatchLayout writes the B tokens' x, as quantizeX leaves it (xq, xd; nb
// blocks each), in the layout ks.qdotRowsB reads: the tokens in groups of
// batchT, one after the other; in a group of T, pair p of blocks (2p, 2p+1)
// at p·qBatchStride, token t's record at t·qBatchRecord within it: the 32
// q_x of each block, then d_x eight times for each (float32), then for Q8_0
// sixteen int32 −128·Σ of each lane's four q_x (the kernel multiplies w+128);
// after the T records Q4_0's corrections 8·d_x·Σq_x of both blocks, four
// float32 each (token t in lane t). A missing last block (nb odd) is zeros.
func qBatchLayout(dst []byte, ks *kernelSet, q int, xq []int8, xd []float32, nb, B int) {
	clear(dst)
	nq, nd := 64*nb, 2*nb
	R := qBatchRecord(q)
	off := 0
	for t0 := 0; t0 < B; {
		T := batchT(B-t0, func(T int) bool { return ks.qdotRowsB[T-2][q] != nil })
		if T == 0 {
			return
		}
		S := qBatchStride(q, T)
		for p := range (nb + 1) / 2 {
			pair := dst[off+p*S : off+(p+1)*S]
			for t := range T {
				rec := pair[t*R : (t+1)*R]
				xt := xq[(t0+t)*nq : (t0+t+1)*nq]
				for h := range 2 {
					b := 2*p + h
					if b >= nb {
						break
					}
					blk := xt[64*b : 64*b+64]
					copy(rec[32*h:], unsafe.Slice((*byte)(unsafe.Pointer(&blk[0])), 32))     // q_x
					copy(rec[64+32*h:], unsafe.Slice((*byte)(unsafe.Pointer(&blk[32])), 32)) // d_x ×8
					if q == 0 {
						for l := range 8 {
							s := int32(blk[4*l]) + int32(blk[4*l+1]) + int32(blk[4*l+2]) + int32(blk[4*l+3])
							*(*int32)(unsafe.Pointer(&rec[128+32*h+4*l])) = -128 * s
						}
					} else {
						*(*float32)(unsafe.Pointer(&pair[T*R+16*h+4*t])) = xd[(t0+t)*nd+nb+b]
					}
				}
			}
		}
		off += (nb + 1) / 2 * S
		t0 += T
	}
}

// AddRowsBatch computes dst[t, c] += Σ_k a[t, k]·W[k, c] for t < B over the
// first len(a)/B rows of w (the transposed down_proj [kept, hidden], rows nil
// in AddRows): AddRows of each a[t], bit for bit. Shapes: a [B, n] with n ≤
// w.Rows, dst [B, w.Cols].
func AddRowsBatch(p *Pool, dst []float32, w Mat, a []float32, B int) {
	checkMat("AddRowsBatch", w)
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
		t0 := j.batchRows(lo, hi)
		step := max(4, batchBlockBytes/max(w.RowBytes(), 1)/4*4)
		if w.DType.Interleaved() {
			step = (step + xrows - 1) / xrows * xrows // whole groups
		}
		nq, nd := len(j.xq)/B, len(j.xd)/B
		for r0 := lo; r0 < hi && t0 < B; r0 += step {
			r1 := min(r0+step, hi)
			for t := t0; t < B; t++ {
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
		multi := j.multiTerms(n, 0, n)
		for c0 := lo; c0 < hi; c0 += step {
			c1 := min(c0+step, hi)
			j.addRowsColsBatch(func(t int) []float32 { return j.dst[t*C+c0 : t*C+c1] }, n, 0, n, c0, multi)
		}
	case opAddRowsPartBatch: // [lo, hi) are terms, token t's sums in parts[t·chunks + c]
		n := len(j.x) / B
		chunks := len(j.parts) / B
		for t := range B {
			clear(j.parts[t*chunks+c][:C])
		}
		step := j.colStep(hi - lo)
		multi := j.multiTerms(n, lo, hi)
		for c0 := 0; c0 < C; c0 += step {
			c1 := min(c0+step, C)
			j.addRowsColsBatch(func(t int) []float32 { return j.parts[t*chunks+c][c0:c1] }, n, lo, hi, c0, multi)
		}
	}
}

// multiTerms reports whether an AddRowsBatch job sums the terms [lo, hi)
// of its B tokens (n terms each) with the set's multi-token qaxpy4B: the
// set has one for the dtype, and no token's coefficient there is zero
// (AddRows skips zero terms, so its groups of four rows would differ from
// token to token).
func (j *job) multiTerms(n, lo, hi int) bool {
	if !j.w.DType.Quantized() || qIndex(j.w.DType) > 1 || j.ks.qaxpy4B[qIndex(j.w.DType)] == nil || hi-lo < 4 {
		return false
	}
	for t := range j.t {
		for _, v := range j.x[t*n+lo : t*n+hi] {
			if v == 0 {
				return false
			}
		}
	}
	return true
}

// addRowsColsBatch is addRowsCols of every token t < B (terms [lo, hi) of
// its n, columns from c0 into dst(t)), bit for bit: with multi
// (multiTerms), the whole groups of four terms go through qaxpy4B for up to
// four tokens at a time, as qaccumRows' groups of four nonzero terms do for
// one, and the last one to three terms token by token.
func (j *job) addRowsColsBatch(dst func(t int) []float32, n, lo, hi, c0 int, multi bool) {
	w, B, ks := j.w, j.t, j.ks
	if multi {
		q, rb := qIndex(w.DType), w.RowBytes()
		nb := len(dst(0)) / qBlockElems[q]
		base := unsafe.Add(dataPtr(w), w.colBytes(c0))
		end := lo + (hi-lo)/4*4
		for t0 := 0; t0 < B && nb > 0; t0 += 4 {
			T := min(4, B-t0)
			var d [4]unsafe.Pointer
			for t := range T {
				d[t] = unsafe.Pointer(&dst(t0 + t)[0])
			}
			for k := lo; k < end; k += 4 {
				r := unsafe.Add(base, k*rb)
				ks.qaxpy4B[q](d[0], d[1], d[2], d[3], T, r, unsafe.Add(r, rb), unsafe.Add(r, 2*rb), unsafe.Add(r, 3*rb), &j.x[t0*n+k], 4*n, nb)
			}
		}
		lo = end
	}
	for t := range B {
		addRowsCols(ks, w, dst(t), nil, j.x[t*n:(t+1)*n], lo, hi, c0)
	}
}

// batchRows runs rows [lo, hi) of a MatVecBatch through the set's
// multi-token kernels for as many of the tokens as they take (from token 0,
// in batchT's groups) and returns that count; the caller runs the others
// one by one. The kernels exist for the rows that MatVec reads with dotRows
// (contiguous rows shorter than seqRowBytes), dot4 (longer ones:
// batchLongRows) and qdotRows (Q8_0 and Q4_0; Q6_K through kdotRowsB), and
// give those kernels' results bit for bit.
func (j *job) batchRows(lo, hi int) int {
	w, B, ks := j.w, j.t, j.ks
	R, C, rb := w.Rows, w.Cols, w.RowBytes()
	if hi <= lo || C == 0 {
		return 0
	}
	if w.DType.Interleaved() {
		return j.xbatchRows(lo, hi)
	}
	base := unsafe.Add(dataPtr(w), lo*rb)
	done := 0
	if q, ok := j.batchQ(); ok {
		nb, off := C/32, 0
		for {
			T := batchT(B-done, func(T int) bool { return ks.qdotRowsB[T-2][q] != nil })
			if T == 0 {
				return done
			}
			ks.qdotRowsB[T-2][q](base, rb, &j.xb[off], nb, hi-lo, &j.dst[done*R+lo], 4*R, dotRowsAhead)
			off += (nb + 1) / 2 * qBatchStride(q, T)
			done += T
		}
	}
	if w.DType.KQuant() {
		q := qIndex(w.DType)
		nb, nq := C/qBlockElems[q], len(j.xq)/B
		for {
			T := batchT(B-done, func(T int) bool { return ks.kdotRowsB[T-2][q] != nil })
			if T == 0 {
				return done
			}
			ks.kdotRowsB[T-2][q](base, rb, &j.xq[done*nq], nq, nb, hi-lo, &j.dst[done*R+lo], 4*R, dotRowsAhead)
			done += T
		}
	}
	if w.DType.Quantized() {
		return 0
	}
	if rb >= seqRowBytes {
		return j.batchLongRows(lo, hi)
	}
	d, es := dtIndex(w.DType), w.DType.Size()
	nb := C &^ (ks.blk - 1)
	if nb == 0 {
		return 0
	}
	for {
		T := batchT(B-done, func(T int) bool { return ks.dotRowsB[T-2][d] != nil })
		if T == 0 {
			return done
		}
		ks.dotRowsB[T-2][d](base, rb, &j.x[done*C], 4*C, nb, hi-lo, &j.dst[done*R+lo], 4*R, dotRowsAhead)
		for t := done; nb < C && t < done+T; t++ {
			for r := lo; r < hi; r++ {
				j.dst[t*R+r] += genericSet.dot1[d](unsafe.Add(dataPtr(w), r*rb+nb*es), &j.x[t*C+nb], C-nb)
			}
		}
		done += T
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

// batchLongRows is batchRows for float rows of seqRowBytes or more, which
// matVecRange reads four at a time from lo with dot4: the whole groups of
// four go through the set's dot4B for up to four tokens at once (each row
// read once for them), then each token gets dot4's portable column tail
// of those groups and matVecRange's rows after them. It returns B, or 0
// where the set has no dot4B or a row is shorter than one SIMD block.
// Llama-3.2-1B's down_proj and SmolLM2's (F16, 4 tokens) are such rows.
func (j *job) batchLongRows(lo, hi int) int {
	w, B, ks := j.w, j.t, j.ks
	R, C, rb := w.Rows, w.Cols, w.RowBytes()
	d, es := dtIndex(w.DType), w.DType.Size()
	nb := C &^ (ks.blk - 1)
	if nb == 0 || ks.dot4B[0][d] == nil {
		return 0
	}
	end := lo + (hi-lo)/4*4
	pf := dot4Ahead(rb) * rb
	done := 0
	for end > lo {
		T := batchT(B-done, func(T int) bool { return ks.dot4B[T-2][d] != nil })
		if T == 0 {
			break
		}
		ks.dot4B[T-2][d](unsafe.Add(dataPtr(w), lo*rb), rb, &j.x[done*C], 4*C, nb, end-lo, &j.dst[done*R+lo], 4*R, pf)
		done += T
	}
	for t := range B {
		x, dst := j.x[t*C:(t+1)*C], j.dst[t*R:(t+1)*R]
		if t >= done {
			matVecRange(ks, dst, w, nil, x, nil, nil, lo, hi)
			continue
		}
		for k := lo; nb < C && k < end; k += 4 {
			r := unsafe.Add(dataPtr(w), k*rb+nb*es)
			s0, s1, s2, s3 := genericSet.dot4[d](r, unsafe.Add(r, rb), unsafe.Add(r, 2*rb), unsafe.Add(r, 3*rb), nil, nil, nil, nil, &x[nb], C-nb)
			dst[k] += s0
			dst[k+1] += s1
			dst[k+2] += s2
			dst[k+3] += s3
		}
		if end < hi {
			matVecRange(ks, dst, w, nil, x, nil, nil, end, hi)
		}
	}
	return B
}
