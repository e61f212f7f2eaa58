package kernels

import (
	"fmt"
	"unsafe"
)

// MatVec computes dst[r] = Σ_c W[r,c]·x[c] for every row r of w.
// Shapes: dst [w.Rows], x [w.Cols]. Rows are split across the pool's workers.
// For block-quantized w (Q8_0, Q4_0, …, the K-quants), x is first quantized to int8 blocks of
// 32 (quant.go, as GGML does; for the K-quants with one scale per 256, as
// GGML's Q8_K), so each product also carries x's rounding: at most max|x| of
// its block (K-quants: of its 256) / 254 per element. w may have
// interleaved rows (Q8_0X16, Q4_0X16; spec §5.4, interleave.go), as may
// MatVecRows's; the neuron-row products (AddRows, MatMulRowsT) panic on them.
func MatVec(p *Pool, dst []float32, w Mat, x []float32) {
	checkMatX(w)
	checkLen("MatVec x", x, w.Cols)
	checkLen("MatVec dst", dst, w.Rows)
	j := job{op: opMatVec, ks: active, w: w, dst: dst, x: x}
	p.quantizeX(&j)
	p.run(j, w.Rows)
}

// MatVecs computes dst[i] = w[i]·x for each i (shapes as MatVec's: dst[i]
// [w[i].Rows], x [w[i].Cols]): the products of one input, such as an
// attention block's q_proj, k_proj and v_proj (HF LlamaAttention). Each run
// of consecutive matrices with the same dtype and width goes to the pool as
// one call over their rows together, x quantized once, so a small k_proj or
// v_proj costs no call of its own (where an interleaved matrix's rows are
// not whole groups of sixteen, it runs alone). The results are MatVec's,
// bit for bit.
func MatVecs(p *Pool, dst [][]float32, w []Mat, x []float32) {
	matVecRuns(p, "MatVecs", dst, w, x, 1)
}

// matVecRuns is MatVecs (B = 1) and MatVecsBatch (B > 1): each run of
// fusable matrices one pool call (opMatVecs, with t = B for a batch), a
// matrix alone MatVecBatch's.
func matVecRuns(p *Pool, name string, dst [][]float32, w []Mat, x []float32, B int) {
	if len(dst) != len(w) {
		panic(fmt.Sprintf("kernels: %s: %d outputs for %d matrices", name, len(dst), len(w)))
	}
	xName, dstName := "MatVecs x", "MatVecs dst" // constants: no allocation per call
	if B > 1 {
		xName, dstName = "MatVecsBatch x", "MatVecsBatch dst"
	}
	for i := 0; i < len(w); {
		n := 1
		for i+n < len(w) && fusable(w[i], w[i+n]) {
			n++
		}
		if n == 1 {
			MatVecBatch(p, dst[i], w[i], x, B) // MatVec for B = 1
			i++
			continue
		}
		rows := 0
		for k := i; k < i+n; k++ {
			checkMatX(w[k])
			checkLen(xName, x, B*w[k].Cols)
			checkLen(dstName, dst[k], B*w[k].Rows)
			rows += w[k].Rows
		}
		j := job{op: opMatVecs, ks: active, w: w[i], x: x, mats: w[i : i+n], dsts: dst[i : i+n]}
		if B > 1 {
			j.t = B
			p.batchX(&j)
		} else {
			p.quantizeX(&j)
		}
		p.run(j, rows)
		i += n
	}
}

// fusable reports whether MatVecs may run b's rows in a's call: the same
// dtype (so the same quantized x) and width, and for interleaved rows whole
// groups in both (the pool splits at group boundaries).
func fusable(a, b Mat) bool {
	return a.DType == b.DType && a.Cols == b.Cols &&
		(!a.DType.Interleaved() || a.Rows%xrows == 0 && b.Rows%xrows == 0)
}

// MatVecRows computes dst[j] = W[rows[j],:]·x for j < len(rows): the gathered
// form for the selected neuron rows of gate_proj / up_proj (paper §5).
// Shapes: dst [len(rows)], x [w.Cols]; rows index [0, w.Rows). On interleaved
// rows (a sliced layer's gate_proj, spec §5.4) each row costs its whole group
// of sixteen, computed once for a run of rows in one group
// (xmatVecRange): ascending rows read each group once.
func MatVecRows(p *Pool, dst []float32, w Mat, rows []int32, x []float32) {
	checkMatX(w)
	checkLen("MatVecRows x", x, w.Cols)
	checkLen("MatVecRows dst", dst, len(rows))
	j := job{op: opMatVecRows, ks: active, w: w, dst: dst, x: x, rows: rows}
	p.quantizeX(&j)
	p.run(j, len(rows))
}

// QuantizedXBytes is the caller's scratch that holds T vectors of cols
// floats quantized to int8 blocks (Pool.quantizeX: 64 bytes and two float32
// a block of 32) and dequantized back (dequantizeX: float32), kept by the
// pool once a product of that size ran.
func QuantizedXBytes(T, cols int) int64 {
	return int64(T) * int64(cols/32) * (64 + 8 + 32*4)
}

// dequantizeX returns the x of a job that quantizeX quantized as float32,
// each element d·q, in the caller's scratch.
func (p *Pool) dequantizeX(j *job) []float32 {
	s, n, T := p.scratch[0], j.w.Cols, max(j.t, 1)
	if len(s.xf) < T*n {
		s.xf = make([]float32, T*n)
	}
	nb := n / 32
	for t := range T {
		xq, xd, xf := j.xq[t*2*n:], j.xd[t*2*nb:], s.xf[t*n:(t+1)*n]
		for b := range nb {
			d := xd[b]
			for e, q := range xq[64*b : 64*b+32] {
				xf[32*b+e] = float32(q) * d
			}
		}
	}
	return s.xf[:T*n]
}

// quantizeX gives a MatVec job on block-quantized weights its x quantized to
// int8 blocks (quantizeXWith in quant.go: quantizeX's blocks; one scale per
// 256 for the K-quants, with the level sums for Q6_K), in the caller's scratch: for
// MatVecBatch each of its j.t vectors, token t's at t·2n bytes and t·2(n/32)
// scales.
func (p *Pool) quantizeX(j *job) {
	if !j.w.DType.Quantized() {
		return
	}
	s, n, T := p.scratch[0], j.w.Cols, max(j.t, 1)
	nq, nd := 2*n, 2*(n/32)
	if len(s.xq) < T*nq {
		s.xq, s.xd = make([]int8, T*nq), make([]float32, T*nd+1)
	}
	for t := range T {
		quantizeXWith(j.ks, j.w.DType, s.xq[t*nq:(t+1)*nq], s.xd[t*nd:(t+1)*nd], j.x[t*n:(t+1)*n])
	}
	j.xq, j.xd = s.xq[:T*nq], s.xd[:T*nd]
}

// AddRows computes dst[c] += Σ_j a[j]·W[rows[j],c]: the neuron-row form of the
// transposed down_proj ([kept, hidden], spec/sinf.md) over selected neurons.
// rows nil means rows 0..len(a)-1. Shapes: dst [w.Cols], a [len(rows)].
// With several workers the terms are cut into chunks, each summed into a
// buffer of its own, and the partial sums are then added to dst in chunk
// order (so each worker streams whole rows, and the result does not depend on
// which worker ran which chunk). Terms with a[j] == 0 are skipped.
func AddRows(p *Pool, dst []float32, w Mat, rows []int32, a []float32) {
	checkMat("AddRows", w)
	checkLen("AddRows dst", dst, w.Cols)
	n := len(a)
	if rows == nil {
		if len(a) > w.Rows {
			panic(fmt.Sprintf("kernels: AddRows: %d coefficients for %d rows", len(a), w.Rows))
		}
	} else {
		checkLen("AddRows a", a, len(rows))
		n = len(rows)
	}
	ks := active
	if p.workers == 1 || n < minSplitTerms || w.Cols == 0 {
		p.run(job{op: opAddRows, ks: ks, w: w, dst: dst, x: a[:n], rows: rows}, w.Cols)
		return
	}
	parts := p.run(job{op: opAddRowsPart, ks: ks, w: w, x: a[:n], rows: rows}, n)
	C := w.Cols
	nb := C &^ (ks.blk - 1)
	for i := range parts {
		acc := p.parts[i][:C]
		if nb > 0 {
			ks.axpy1[0](&dst[0], unsafe.Pointer(&acc[0]), 1, nb)
		}
		for c := nb; c < C; c++ {
			dst[c] += acc[c]
		}
	}
}

// minSplitTerms is the fewest AddRows terms split across workers; fewer are
// split by columns.
const minSplitTerms = 32

// MatMul computes dst[t,r] = Σ_c W[r,c]·X[t,c] for t < T: the prefill form of
// MatVec. Shapes: x [T, w.Cols], dst [T, w.Rows], both row-major. Tokens are
// split across the pool's workers when there are enough, else rows. w may
// have interleaved rows (Q8_0X16, Q4_0X16; spec §5.4), as for MatVec; where
// the set decodes Q4_0X16 several tokens at a time (xdotPrefill), MatMul of
// it is MatVecBatch's, bit for bit. T = 0 computes nothing; T < 0 panics.
func MatMul(p *Pool, dst []float32, w Mat, x []float32, T int) {
	checkMatX(w)
	if T < 0 {
		panic(fmt.Sprintf("kernels: MatMul of %d tokens", T))
	}
	checkLen("MatMul x", x, T*w.Cols)
	checkLen("MatMul dst", dst, T*w.Rows)
	if T == 0 {
		return
	}
	ks := active
	if ks.xdotPrefill(w) {
		MatVecBatch(p, dst, w, x, T)
		return
	}
	j := job{op: opMatMul, ks: ks, w: w, dst: dst, x: x, t: T}
	if w.DType.Quantized() {
		// x as int8 blocks, as decode takes it: in integers where the set
		// has the kernels, else dequantized back for the float32 path, so
		// that every set (and the CUDA backend) rounds x alike.
		p.quantizeX(&j)
		if !ks.intPrefill(w) {
			j.x, j.xq, j.xd = p.dequantizeX(&j), nil, nil
		}
	}
	if groups := (T + ks.gt - 1) / ks.gt; groups >= minChunk*p.workers {
		// Enough tokens: each worker takes whole groups of tokens over all
		// rows. Its share of x then stays in its own L2, and it reads the
		// weights the other workers read at about the same time (from L3);
		// 8–25% faster than splitting rows at 64 tokens on 2 threads.
		j.op = opMatMulTok
		p.run(j, groups)
		return
	}
	p.run(j, w.Rows)
}

// MatMulRowsT computes dst[t,c] = Σ_k A[t,k]·W[k,c] for t < T, with W = w
// of shape [K, C] (the transposed down_proj) and A [T, K] row-major; dst [T, C].
// It overwrites dst.
func MatMulRowsT(p *Pool, dst []float32, w Mat, a []float32, T int) {
	checkMat("MatMulRowsT", w)
	checkLen("MatMulRowsT a", a, T*w.Rows)
	checkLen("MatMulRowsT dst", dst, T*w.Cols)
	p.run(job{op: opMatMulT, ks: active, w: w, dst: dst, x: a, t: T}, w.Cols)
}

func checkMat(op string, w Mat) {
	refuseInterleaved(op, w)
	checkDType(w.DType)
	if w.Rows < 0 || w.Cols < 0 || len(w.Data) < w.Rows*w.RowBytes() ||
		w.DType.Quantized() && w.Cols%qBlockElems[qIndex(w.DType)] != 0 {
		panic(fmt.Sprintf("kernels: %d bytes do not hold a [%d, %d] %v matrix", len(w.Data), w.Rows, w.Cols, w.DType))
	}
}

// Add adds src to dst element by element: dst, src [n] float32 (src at
// least as long as dst, else it panics), the residual connections of a
// layer. It is the set's axpy with a = 1, so each sum is dst[i] + src[i]
// rounded once, the plain loop's value bit for bit. SmolLM2's 4 × 576 (a
// batched step of four tokens): 1.3 → 0.08 µs (2-vCPU Intel Xeon, AVX-512),
// two a layer.
func Add(dst, src []float32) {
	checkLen("Add src", src, len(dst))
	ks := active
	n := len(dst) &^ (ks.blk - 1)
	if n > 0 {
		ks.axpy1[0](&dst[0], unsafe.Pointer(&src[0]), 1, n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

func checkLen(what string, s []float32, n int) {
	if len(s) < n {
		panic(fmt.Sprintf("kernels: %s has %d elements, want %d", what, len(s), n))
	}
}

const (
	opMatVec = iota
	opMatVecRows
	opAddRows
	opMatMul
	opMatMulT
	opRead
	opAddRowsPart
	opAttention
	opSwiGLU
	opMatMulTok
	opMatVecBatch      // MatVecBatch: opMatVec's rows, t tokens (batch.go)
	opAddRowsBatch     // AddRowsBatch: opAddRows' columns, t tokens
	opAddRowsPartBatch // AddRowsBatch: opAddRowsPart's terms, t tokens
	opSketch           // SketchMatVec: rows of an SK2 sketch (sketch.go)
	opMatVecs          // MatVecs, MatVecsBatch: the rows of mats, one after the other (t tokens)
)

// job is one kernel call, split by the pool into [lo, hi) ranges of its
// parallel dimension. Passing it by value keeps dispatch allocation-free.
type job struct {
	op   int
	ks   *kernelSet
	w    Mat
	dst  []float32
	x    []float32
	rows []int32
	t    int
	k, v Cache // Attention: the KV cache
	// AttentionBatch: each token's key caches, then its value caches, and
	// its position
	kvb  []Cache
	pos  []int
	attn AttnShape // Attention: the shape
	xq   []int8    // MatVec on block-quantized weights: x as int8 blocks
	xd   []float32 // and their scales
	xb   []byte    // MatVecBatch: x as qBatchLayout writes it (nil: no multi-token kernel)
	// parts: AddRowsPart's partial sums, one buffer per chunk
	parts [][]float32
	chunk int // the units of the pool's widest chunk (set by run)
	// MatVecs: the matrices (job.w is the first) and their outputs
	mats []Mat
	dsts [][]float32
}

// colAlign returns the multiple that the pool keeps the job's ranges to
// where it can: 16 elements for vector splits (columns, elements), so SIMD
// column splits stay aligned, and for MatMulRowsT a whole number of gemmT
// panels as well (48 columns for AVX2's 24); 1 for the others.
// Block-quantized weights split columns at whole blocks (32, or 256 for a
// K-quant) too: there the pool keeps to the multiple always (see
// alignRequired).
func (j *job) colAlign() int {
	if j.op == opSketch {
		return 1
	}
	if j.op == opAttention && j.attn.KVHeads > 0 {
		// Chunks of whole GQA groups: one thread reads a group's key and
		// value rows and its other heads find them in cache. Only with four
		// groups or more, where rounding chunks up keeps the threads even
		// (9 heads of 3 groups on 2 threads: 6 + 3 was slower than 5 + 4).
		g := j.attn.Heads / j.attn.KVHeads
		if max(j.attn.T, len(j.pos))*j.attn.Heads >= 4*g {
			return g
		}
		return 1
	}
	if j.w.DType.Interleaved() {
		return xrows // whole groups (MatVec, MatMul's rows)
	}
	q := j.w.DType.Quantized()
	be := 1
	if q {
		be = qBlockElems[qIndex(j.w.DType)]
	}
	switch j.op {
	case opAddRows, opAddRowsBatch, opSwiGLU:
		if q && j.op != opSwiGLU {
			return be
		}
		return 16
	case opMatMul:
		if j.ks.intPrefill(j.w) {
			return j.ks.qrows // qgemm's groups of rows
		}
	case opMatMulT:
		a := 16
		for a%j.ks.tc != 0 || a%be != 0 {
			a += 16
		}
		return a
	}
	return 1
}

// chunkMin returns the fewest units worth a chunk of their own: minChunk,
// swigluMinChunk for SwiGLU.
func (j *job) chunkMin() int {
	if j.op == opSwiGLU {
		return swigluMinChunk
	}
	if j.op == opAttention && j.t > 0 {
		return 1 // a unit is a head's attnTokens tokens
	}
	return minChunk
}

// alignRequired reports whether the job's ranges must keep to colAlign even
// when that leaves workers idle: column splits of block-quantized weights.
func (j *job) alignRequired() bool {
	return j.w.DType.Quantized() && (j.op == opAddRows || j.op == opAddRowsBatch || j.op == opMatMulT) ||
		j.w.DType.Interleaved() && j.op != opMatMulTok
}

// scratchNeed returns the float32s of worker scratch that any chunk of the
// job uses: pack and qw for MatMulRowsT (matMulTRange), qw for MatMul on
// block-quantized rows (qmatMulRange), att for Attention (the cache's
// length, rounded up to 16; a blocked call's attnScratch). They depend on the
// job's shape only, not on the chunk, so the pool sizes every worker's
// scratch once per shape before the call (Pool.reserve) and a worker that
// joins late, or first takes the short last chunk, allocates nothing.
func (j *job) scratchNeed() (need scratchSize) {
	switch j.op {
	case opAttention:
		// the whole cache's positions, not this call's: a decode step
		// is one position longer than the last
		n := max(j.attn.Pos+j.attn.T, j.k.Positions())
		for _, c := range j.kvb[:len(j.kvb)/2] {
			n = max(n, c.Positions())
		}
		need.att = (n + 15) &^ 15 // attendHead's padding
		// attendBlock: sized for this call's positions
		if j.t > 0 {
			need.att = max(need.att, attnScratch(j.attn.Pos+j.attn.T, j.attn.HeadDim, j.k.F16 != nil))
		}
	case opMatMul, opMatMulTok:
		if j.ks.intPrefill(j.w) {
			need.qw = j.ks.qgemmScratch(j.w.Cols)
		} else if j.w.DType.Quantized() && j.w.Cols > 0 {
			need.qw = qmatMulBlock(j.ks, j.w.Cols) * j.w.Cols
			if j.w.DType.Interleaved() {
				need.qw = max(need.qw, xrows*j.w.Cols) // xcvtGroup's group
			}
		}
	case opMatMulT:
		if j.t < j.ks.tt || j.w.Rows == 0 {
			return need // accumulated straight from the weights
		}
		tt, tc, kc := j.ks.tt, j.ks.tc, min(j.w.Rows, gemmKC)
		cb, np := matMulTBlock(j.ks, j.w, j.t, j.chunk)
		need.pack = np*kc*tc + tt*kc + tt*np*tc + j.t/tt*tt*tc
		if j.w.DType.Quantized() {
			need.qw = cb
		}
	}
	return need
}

// do runs chunk c, the part [lo, hi) of the job's parallel dimension.
func (j *job) do(lo, hi int, s *scratch, c int) {
	if lo >= hi {
		return
	}
	switch j.op {
	case opMatVec:
		matVecRange(j.ks, j.dst, j.w, nil, j.x, j.xq, j.xd, lo, hi)
	case opMatVecRows:
		matVecRange(j.ks, j.dst, j.w, j.rows, j.x, j.xq, j.xd, lo, hi)
	case opMatVecs: // each matrix's part as MatVec (t > 1: MatVecBatch) computes it
		off := 0
		for i, w := range j.mats {
			if a, b := max(lo, off), min(hi, off+w.Rows); a < b {
				if j.t > 1 {
					m := *j
					m.op, m.w, m.dst = opMatVecBatch, w, j.dsts[i]
					m.batchDo(a-off, b-off, c)
				} else {
					matVecRange(j.ks, j.dsts[i], w, nil, j.x, j.xq, j.xd, a-off, b-off)
				}
			}
			off += w.Rows
		}
	case opAddRows: // [lo, hi) are columns
		addRowsCols(j.ks, j.w, j.dst[lo:hi], j.rows, j.x, 0, len(j.x), lo)
	case opAddRowsPart: // [lo, hi) are terms, summed into j.parts[c]
		acc := j.parts[c][:j.w.Cols]
		clear(acc)
		addRowsCols(j.ks, j.w, acc, j.rows, j.x, lo, hi, 0)
	case opAttention:
		attentionRange(j.ks, j, lo, hi, s)
	case opSwiGLU:
		swigluRange(j.ks, j.dst[lo:hi], j.x[lo:hi])
	case opMatMul:
		matMulRange(j.ks, j.dst, j.w, j.x, j.t, lo, hi, s, j.xq, j.xd)
	case opMatMulTok: // [lo, hi) are groups of gt tokens
		R, C := j.w.Rows, j.w.Cols
		t0, t1 := lo*j.ks.gt, min(hi*j.ks.gt, j.t)
		xq, xd := j.xq, j.xd
		if xq != nil {
			xq, xd = xq[t0*2*C:], xd[t0*2*(C/32):]
		}
		matMulRange(j.ks, j.dst[t0*R:t1*R], j.w, j.x[t0*C:t1*C], t1-t0, 0, R, s, xq, xd)
	case opMatMulT:
		matMulTRange(j.ks, j.dst, j.w, j.x, j.t, lo, hi, j.chunk, s)
	case opMatVecBatch, opAddRowsBatch, opAddRowsPartBatch:
		j.batchDo(lo, hi, c)
	case opSketch:
		sketchRange(j.ks, j.dst, j.w, j.xq, j.xd, lo, hi)
	case opRead:
		readSink.Add(j.ks.readSum(unsafe.Add(dataPtr(j.w), lo*readUnit), (hi-lo)*readUnit))
	}
}

func dataPtr(w Mat) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(w.Data)) }

// rowIndex returns row j of a gathered list (or j itself), checked.
func rowIndex(rows []int32, j, nrows int) int {
	r := j
	if rows != nil {
		r = int(rows[j])
	}
	if uint(r) >= uint(nrows) {
		panic(fmt.Sprintf("kernels: row %d out of range [0, %d)", r, nrows))
	}
	return r
}

// checkRows panics unless every row index is in [0, nrows).
func checkRows(rows []int32, nrows int) {
	for _, r := range rows {
		if uint32(r) >= uint32(nrows) {
			panic(fmt.Sprintf("kernels: row %d out of range [0, %d)", r, nrows))
		}
	}
}

// prefetchBytes is how far ahead, at least, MatVec prefetches.
const prefetchBytes = 8 << 10

// dot4Ahead is how many rows of rb bytes ahead matVecRange prefetches
// while it reads rows four at a time: whole groups of four, at least
// prefetchBytes.
func dot4Ahead(rb int) int { return 4 * max(1, (prefetchBytes+4*rb-1)/(4*rb)) }

// seqRowBytes: MatVec and AddRows read contiguous rows shorter than this one
// at a time (a single stream, which the hardware prefetchers follow better
// than four short ones); longer or gathered rows go four at a time.
const seqRowBytes = 2048

// dotRowsAhead is how many bytes ahead of its position dotRows and axpyRows
// prefetch. F16 and BF16 rows take about twice the instructions per byte of
// F32 ones (a conversion per FMA), so the out-of-order window covers fewer
// lines ahead and the software prefetch has to reach further. Tuned on Zen 3
// only: decode steps of the SmolLM2 shape (F16, 1152-byte rows) alternated in
// one process ran 4–6% faster at 1024 than at 512 (1 and 2 threads), and 1536
// and 2048 were no better; dotRows alone on 1152-byte BF16 rows read 10%
// faster. F32 rows reach these kernels only below 512 columns, and NEON is
// unmeasured.
const dotRowsAhead = 1024

// gatherAheadBytes is how far ahead, at least, the row kernels prefetch
// gathered rows (the selected neurons' rows), which no hardware prefetcher
// follows: as rows ahead, the pf of a call with idx (rowsAhead). One row
// ahead, as before, left MatVecRows over a random half of the rows at
// 6.2 GB/s for Q4_0, 10.1 for Q8_0, 8.3 for Q4_K and 9.6 for F16 SmolLM2
// rows (1 thread, Zen 5; BenchmarkMatVecRows); 4, 8 and 16 KiB ahead gave
// 10.4–10.7, 13.8–16.0, 11.2–11.4 and 14.5–15.4, 16 KiB the best or level
// on every shape. NEON is unmeasured.
const gatherAheadBytes = 16 << 10

// rowsAhead returns the pf argument of a row kernel (dotRows, axpyRows,
// qdotRows) reading rows of rb bytes: dotRowsAhead bytes for contiguous rows
// (idx nil), else the rows that cover gatherAheadBytes (at least one).
func rowsAhead(idx *int32, rb int) int {
	if idx == nil {
		return dotRowsAhead
	}
	return max(1, (gatherAheadBytes+rb-1)/rb)
}

// dot returns Σ_{e<n} W[e]·x[e] for the row at p: the kernel set on the whole
// blocks (nb elements), the generic loop on the tail.
func dot(ks *kernelSet, d, es int, p unsafe.Pointer, x []float32, n, nb int) float32 {
	var s float32
	if nb > 0 {
		s = ks.dot1[d](p, &x[0], nb)
	}
	if nb < n {
		s += genericSet.dot1[d](unsafe.Add(p, nb*es), &x[nb], n-nb)
	}
	return s
}

// dot4 is dot for four rows sharing x, prefetching the rows at q (the next
// ones to be read).
func dot4(ks *kernelSet, d, es int, p, q *[4]unsafe.Pointer, x []float32, n, nb int) (s0, s1, s2, s3 float32) {
	if nb > 0 {
		s0, s1, s2, s3 = ks.dot4[d](p[0], p[1], p[2], p[3], q[0], q[1], q[2], q[3], &x[0], nb)
	}
	if nb < n {
		o, xt, m := nb*es, &x[nb], n-nb
		t0, t1, t2, t3 := genericSet.dot4[d](unsafe.Add(p[0], o), unsafe.Add(p[1], o), unsafe.Add(p[2], o), unsafe.Add(p[3], o),
			nil, nil, nil, nil, xt, m)
		s0, s1, s2, s3 = s0+t0, s1+t1, s2+t2, s3+t3
	}
	return
}

// matVecRange computes dst[k] for k in [lo, hi): row k of w, or row rows[k].
// Block-quantized rows take x as int8 blocks (xq, xd).
func matVecRange(ks *kernelSet, dst []float32, w Mat, rows []int32, x []float32, xq []int8, xd []float32, lo, hi int) {
	if w.DType.Interleaved() {
		xmatVecRange(ks, dst, w, rows, xq, xd, lo, hi)
		return
	}
	if w.DType.Quantized() {
		qmatVecRange(ks, dst, w, rows, xq, xd, lo, hi)
		return
	}
	d, es, n, rb := dtIndex(w.DType), w.DType.Size(), w.Cols, w.RowBytes()
	if n == 0 {
		clear(dst[lo:hi])
		return
	}
	nb := n &^ (ks.blk - 1)
	base := dataPtr(w)
	dst = dst[:hi]
	k := lo
	if rb < seqRowBytes {
		// Short rows: one row after the other is a single stream, which the
		// hardware prefetchers follow better than four short ones; one call
		// runs the whole range.
		var idx *int32
		base, idx = rowRange(w, rows, lo, hi)
		if nb > 0 {
			ks.dotRows[d](base, rb, idx, &x[0], nb, hi-lo, &dst[lo], rowsAhead(idx, rb))
		} else {
			clear(dst[lo:hi])
		}
		for j := lo; nb < n && j < hi; j++ {
			dst[j] += genericSet.dot1[d](unsafe.Add(rowAt(base, rb, idx, j-lo), nb*es), &x[nb], n-nb)
		}
		return
	}
	// Rows go four at a time; while a group is read, the rows a prefetch
	// distance ahead (at least prefetchBytes) are prefetched, so that short or
	// scattered rows still stream.
	ahead := dot4Ahead(rb)
	var cur, pre [4]unsafe.Pointer
	for ; k+4 <= hi; k += 4 {
		for i := range cur {
			cur[i] = unsafe.Add(base, rowIndex(rows, k+i, w.Rows)*rb)
			pre[i] = unsafe.Add(base, rowIndex(rows, min(k+ahead+i, hi-1), w.Rows)*rb)
		}
		dst[k], dst[k+1], dst[k+2], dst[k+3] = dot4(ks, d, es, &cur, &pre, x, n, nb)
	}
	for ; k < hi; k++ {
		dst[k] = dot(ks, d, es, unsafe.Add(base, rowIndex(rows, k, w.Rows)*rb), x, n, nb)
	}
}

// accumRows adds Σ_j a[j]·row(j)[:len(dst)] to dst, where row(j) starts at
// base + r·stride bytes for r = rows[j] (rows nil: r = j), r < nrows, and
// holds elements of dtype index d (es bytes each). Terms with a[j] == 0 are
// skipped; the others are taken four rows at a time, except short contiguous
// rows streamed from memory (stream), which go one at a time.
func accumRows(ks *kernelSet, d, es int, dst []float32, base unsafe.Pointer, stride, nrows int, rows []int32, a []float32, stream bool) {
	n := len(dst)
	if n == 0 {
		return
	}
	nb := n &^ (ks.blk - 1)
	if stream && stride < seqRowBytes {
		if len(a) == 0 {
			return
		}
		var idx *int32
		if rows != nil {
			checkRows(rows[:len(a)], nrows)
			idx = &rows[0]
		} else if len(a) > nrows {
			panic(fmt.Sprintf("kernels: row %d out of range [0, %d)", len(a)-1, nrows))
		}
		if nb > 0 {
			ks.axpyRows[d](&dst[0], base, stride, idx, &a[0], nb, len(a), rowsAhead(idx, stride))
		}
		if nb < n {
			genericSet.axpyRows[d](&dst[nb], unsafe.Add(base, nb*es), stride, idx, &a[0], n-nb, len(a), 0)
		}
		return
	}
	// Groups of four nonzero terms; group g is added while group g+1's rows
	// are prefetched.
	tg := termGroups{base: base, stride: stride, nrows: nrows, rows: rows, a: a}
	for tg.next() {
		p, pre, c := &tg.p, &tg.pre, &tg.c
		if nb > 0 {
			ks.axpy4[d](&dst[0], p[0], p[1], p[2], p[3], pre[0], pre[1], pre[2], pre[3], c[0], c[1], c[2], c[3], nb)
		}
		if nb < n {
			o := nb * es
			genericSet.axpy4[d](&dst[nb], unsafe.Add(p[0], o), unsafe.Add(p[1], o), unsafe.Add(p[2], o), unsafe.Add(p[3], o),
				nil, nil, nil, nil, c[0], c[1], c[2], c[3], n-nb)
		}
	}
	for i := 0; i < tg.n; i++ {
		if nb > 0 {
			ks.axpy1[d](&dst[0], tg.p[i], tg.c[i], nb)
		}
		if nb < n {
			genericSet.axpy1[d](&dst[nb], unsafe.Add(tg.p[i], nb*es), tg.c[i], n-nb)
		}
	}
}

// termGroups walks the nonzero terms a[j] of a row sum four at a time: row
// j at base + r·stride bytes, r = rows[j] (or j when rows is nil), r <
// nrows, checked. After next returns true, p and c hold a group of four and
// pre the next group's rows (for prefetching; the group's own where fewer
// follow); after it returns false, the last n < 4 terms are in p and c.
type termGroups struct {
	base          unsafe.Pointer
	stride, nrows int
	rows          []int32
	a             []float32
	j, n          int
	started       bool
	p, pre        [4]unsafe.Pointer
	c, cn         [4]float32
}

// fill collects the next (up to) four nonzero terms into p, c.
func (g *termGroups) fill(p *[4]unsafe.Pointer, c *[4]float32) int {
	k := 0
	for ; g.j < len(g.a) && k < 4; g.j++ {
		if g.a[g.j] != 0 {
			p[k] = unsafe.Add(g.base, rowIndex(g.rows, g.j, g.nrows)*g.stride)
			c[k] = g.a[g.j]
			k++
		}
	}
	return k
}

func (g *termGroups) next() bool {
	if !g.started {
		g.started = true
		g.n = g.fill(&g.pre, &g.cn)
	}
	if g.n < 4 { // the last, partial group
		g.p, g.c = g.pre, g.cn
		return false
	}
	g.p, g.c = g.pre, g.cn
	nc := g.fill(&g.pre, &g.cn)
	for i := nc; i < 4; i++ {
		g.pre[i] = g.p[i]
	}
	g.n = nc
	return true
}

// gemmBlockBytes is the size of the block of weight rows MatMul keeps in cache
// while it runs every token over it.
const gemmBlockBytes = 64 << 10

// matMulRange computes dst[t, r] for rows r in [lo, hi) and every token t.
// Rows are taken in blocks of about gemmBlockBytes; within a block the gr×gt
// micro-kernel runs over every group of gt tokens, so each weight is read from
// memory once and converted once per gt tokens.
func matMulRange(ks *kernelSet, dst []float32, w Mat, x []float32, T, lo, hi int, s *scratch, xq []int8, xd []float32) {
	if xq != nil {
		qmatMulInt(ks, dst, w, T, lo, hi, s, xq, xd)
		return
	}
	if w.DType.Interleaved() {
		xmatMulRange(ks, dst, w, x, T, lo, hi, s)
		return
	}
	if w.DType.Quantized() {
		qmatMulRange(ks, dst, w, x, T, lo, hi, s)
		return
	}
	matMulRows(ks, dst, w.Rows, w, 0, x, T, lo, hi)
}

// matMulRows is matMulRange for rows r in [lo, hi) of a matrix with R rows
// (dst's row stride), whose rows from first on are those of w (w's row 0 is
// row first).
func matMulRows(ks *kernelSet, dst []float32, R int, w Mat, first int, x []float32, T, lo, hi int) {
	d, es, C, rb := dtIndex(w.DType), w.DType.Size(), w.Cols, w.RowBytes()
	for t := 0; t < T; t++ {
		clear(dst[t*R+lo : t*R+hi]) // the micro-kernel adds to dst
	}
	if C == 0 {
		return
	}
	gr, gt := ks.gr, ks.gt
	nb := C &^ (ks.blk - 1)
	gnb := C &^ (ks.gblk - 1)
	base := dataPtr(w)
	row := func(r int) unsafe.Pointer { return unsafe.Add(base, (r-first)*rb) }
	block := max(gr, gemmBlockBytes/rb/gr*gr)
	for r0 := lo; r0 < hi; r0 += block {
		r1 := min(r0+block, hi)
		t := 0
		for ; t+gt <= T; t += gt {
			r := r0
			for ; r+gr <= r1; r += gr {
				if gnb > 0 {
					ks.gemm[d](row(r), rb, &x[t*C], 4*C, gnb, &dst[t*R+r], 4*R)
				}
				for i := 0; gnb < C && i < gr; i++ { // the reduction tail
					for u := t; u < t+gt; u++ {
						dst[u*R+r+i] += genericSet.dot1[d](unsafe.Add(row(r+i), gnb*es), &x[u*C+gnb], C-gnb)
					}
				}
			}
			for ; r < r1; r++ {
				for u := t; u < t+gt; u++ {
					dst[u*R+r] = dot(ks, d, es, row(r), x[u*C:(u+1)*C], C, nb)
				}
			}
		}
		for ; t < T; t++ {
			xt, dt := x[t*C:(t+1)*C], dst[t*R:(t+1)*R]
			r := r0
			for ; r+4 <= r1; r += 4 {
				p := [4]unsafe.Pointer{row(r), row(r + 1), row(r + 2), row(r + 3)}
				dt[r], dt[r+1], dt[r+2], dt[r+3] = dot4(ks, d, es, &p, &p, xt, C, nb)
			}
			for ; r < r1; r++ {
				dt[r] = dot(ks, d, es, row(r), xt, C, nb)
			}
		}
	}
}

// MatMulRowsT blocking: a block of gemmKC weight rows × cb columns is decoded
// to float32 in panels of tc columns (panel-major: gemmKC×tc floats each, one
// contiguous run for the micro-kernel), cb keeping the block within
// gemmPackBytes. At the shapes we run that is the worker's whole range of
// columns, so weights are read in long runs of whole rows (it lives in L3):
// on Zen 3 this measured faster than L2-sized blocks of 240 columns, whose
// short strided runs stall the decode. While it decodes a block, it
// prefetches the next one into L2.
var (
	gemmKC        = 256
	gemmPackBytes = 4 << 20
)

// PackScratchBytes is the GEMM packing buffer each of threads kernel threads
// holds once a prefill multiplies a matrix of rows rows of cols columns:
// a panel of its chunk of rows (4 chunks per thread), at most
// gemmPackBytes. runtime.EstimateMemory counts it.
func PackScratchBytes(threads, rows, cols int) int64 {
	th := max(threads, 1)
	chunk := (rows + 4*th - 1) / (4 * th)
	return int64(th) * min(int64(gemmPackBytes), int64(chunk)*int64(min(cols, gemmKC))*4)
}

// matMulTBlock returns the columns that matMulTRange takes at a time (cb)
// and the panels that holds (npMax), whatever the chunk: a chunk narrower
// than cb takes fewer, so the scratch sized from them (scratchNeed) serves
// every chunk of the call.
func matMulTBlock(ks *kernelSet, w Mat, T, chunk int) (cb, npMax int) {
	tc, kc := ks.tc, min(w.Rows, gemmKC)
	cb = max(tc, gemmPackBytes/(4*max(kc, 1))/tc*tc)
	a := tc // a whole number of panels (and, quantized, of blocks)
	if w.DType.Quantized() {
		for a%qBlockElems[qIndex(w.DType)] != 0 {
			a += tc
		}
		cb = max(a, cb/a*a)
	}
	// no wider than the pool's chunks: a small matrix reserves no more
	cb = min(cb, (max(chunk, 1)+a-1)/a*a)
	return cb, (cb + tc - 1) / tc
}

// matMulTRange computes dst[t, c] for columns c in [lo, hi) and every token t.
// Tokens go tt at a time through the tt×tc micro-kernel; the last partial
// group and the last partial panel of a block go through zero-padded scratch.
func matMulTRange(ks *kernelSet, dst []float32, w Mat, a []float32, T, lo, hi, chunk int, s *scratch) {
	K, C, rb := w.Rows, w.Cols, w.RowBytes()
	// Block-quantized rows are dequantized, a row's columns of the block at
	// a time, to float32 in s.qw (their dtype index d is then F32's); the
	// pool splits their columns at whole blocks and cb keeps to them too.
	quant := w.DType.Quantized()
	d, es, be := 0, 4, 1
	if !quant {
		d, es = dtIndex(w.DType), w.DType.Size()
	} else {
		be = qBlockElems[qIndex(w.DType)]
	}
	for t := 0; t < T; t++ {
		clear(dst[t*C+lo : t*C+hi])
	}
	if K == 0 || lo >= hi {
		return
	}
	base := dataPtr(w)
	tt, tc := ks.tt, ks.tc
	if T < tt {
		// Too few tokens to pay for the float32 copy: accumulate straight from
		// the weights, a block of kb rows × cb columns at a time so that it
		// stays in L2 while each token goes over it.
		const kb, cb = 64, 2048
		for c0 := lo; c0 < hi; c0 += cb {
			c1 := min(c0+cb, hi)
			for k0 := 0; k0 < K; k0 += kb {
				k1 := min(k0+kb, K)
				for t := 0; t < T; t++ {
					if quant {
						qaccumRows(ks, qIndex(w.DType), dst[t*C+c0:t*C+c1], unsafe.Add(base, k0*rb+w.colBytes(c0)), rb, k1-k0, nil, a[t*K+k0:t*K+k1])
						continue
					}
					accumRows(ks, d, es, dst[t*C+c0:t*C+c1], unsafe.Add(base, k0*rb+c0*es), rb, k1-k0, nil, a[t*K+k0:t*K+k1], false)
				}
			}
		}
		return
	}
	groups, rem := T/tt, T%tt
	kc := min(K, gemmKC)
	cbMax, npMax := matMulTBlock(ks, w, T, chunk)
	cb := min(hi-lo, cbMax)
	pstride := kc * tc // floats per panel
	buf := s.pack
	pack, buf := buf[:npMax*pstride], buf[npMax*pstride:]
	apad, buf := buf[:tt*kc], buf[tt*kc:]              // the last group's coefficients
	ttail, buf := buf[:tt*npMax*tc], buf[tt*npMax*tc:] // the last group's sums
	dtail := buf[:groups*tt*tc]                        // the last panel's sums
	clear(apad)
	for c0 := lo; c0 < hi; c0 += cb {
		c1 := min(c0+cb, hi)
		bw := c1 - c0
		np, full := (bw+tc-1)/tc, bw/tc
		clear(ttail)
		clear(dtail)
		if full < np {
			clear(pack[full*pstride : np*pstride])
		}
		for k0 := 0; k0 < K; k0 += kc {
			n := min(kc, K-k0)
			for k := 0; k < n; k++ {
				src := unsafe.Add(base, (k0+k)*rb+w.colBytes(c0))
				pre := src // the same row of the next block, else of the next column block
				if k0+kc+k < K {
					pre = unsafe.Add(src, kc*rb)
				} else if k0+kc >= K && c1 < hi {
					pre = unsafe.Add(base, k*rb+w.colBytes(c1))
				}
				if quant {
					ks.qcvt[qIndex(w.DType)](&s.qw[0], src, bw/be)
					src = unsafe.Pointer(&s.qw[0])
				}
				if full > 0 {
					ks.cvtPanels[d](&pack[k*tc], 4*pstride, src, full*tc, pre)
				}
				if full < np {
					genericSet.cvt[d](&pack[full*pstride+k*tc], unsafe.Add(src, full*tc*es), bw-full*tc)
				}
			}
			for u := 0; u < rem; u++ {
				copy(apad[u*kc:u*kc+n], a[(groups*tt+u)*K+k0:][:n])
			}
			for p := 0; p < np; p++ {
				wp := unsafe.Pointer(&pack[p*pstride])
				for g := 0; g < groups; g++ {
					t := g * tt
					if p < full {
						ks.gemmT(wp, 4*tc, &a[t*K+k0], 4*K, &dst[t*C+c0+p*tc], 4*C, n)
					} else {
						ks.gemmT(wp, 4*tc, &a[t*K+k0], 4*K, &dtail[t*tc], 4*tc, n)
					}
				}
				if rem > 0 {
					ks.gemmT(wp, 4*tc, &apad[0], 4*kc, &ttail[p*tc], 4*npMax*tc, n)
				}
			}
		}
		if full < np {
			for t := 0; t < groups*tt; t++ {
				copy(dst[t*C+c0+full*tc:t*C+c1], dtail[t*tc:])
			}
		}
		for u := 0; u < rem; u++ {
			t := groups*tt + u
			copy(dst[t*C+c0:t*C+c1], ttail[u*npMax*tc:])
		}
	}
}

// rowRange returns the row list of the row kernels for rows [lo, hi) of a
// MatVec: w's data and &rows[lo] (checked), or for contiguous rows (rows
// nil) row lo's address and nil.
func rowRange(w Mat, rows []int32, lo, hi int) (unsafe.Pointer, *int32) {
	if rows != nil {
		checkRows(rows[lo:hi], w.Rows)
		return dataPtr(w), &rows[lo]
	}
	return unsafe.Add(dataPtr(w), lo*w.RowBytes()), nil
}

// qmatVecRange is matVecRange for block-quantized rows: x comes quantized
// to int8 blocks (xq, xd), and the rows of [lo, hi) go in one call.
func qmatVecRange(ks *kernelSet, dst []float32, w Mat, rows []int32, xq []int8, xd []float32, lo, hi int) {
	q := qIndex(w.DType)
	nb, rb := w.Cols/qBlockElems[q], w.RowBytes()
	if nb == 0 {
		clear(dst[lo:hi])
		return
	}
	base, idx := rowRange(w, rows, lo, hi)
	ks.qdotRows[q](base, rb, idx, &xq[0], &xd[0], nb, hi-lo, &dst[lo], rowsAhead(idx, rb))
}

// qaccumRows adds Σ_j a[j]·row(j)[:len(dst)] to dst for rows of the block
// dtype of q table index q (len(dst) a multiple of its block), row(j) at base +
// r·stride bytes, r = rows[j] (rows nil: r = j), r < nrows. Terms with
// a[j] == 0 are skipped. The rows go four at a time (qaxpy4), so dst is
// loaded and stored once per four: hot in cache (256 rows of 2048, one
// thread, Zen 3), Q8_0 went from 9.4 to 12.0 G weights/s against one row at a
// time; Q4_0, bound by its nibble unpacking, from 7.6 to 7.9, and to
// 10.4–11.3 with qaxpy4's VPMOVZXBD unpacking.
func qaccumRows(ks *kernelSet, q int, dst []float32, base unsafe.Pointer, stride, nrows int, rows []int32, a []float32) {
	if len(dst) == 0 || len(a) == 0 {
		return
	}
	nb := len(dst) / qBlockElems[q]
	// Groups of four through qaxpy4 (dst loaded and stored once per group);
	// the last one to three terms too, padded with zero terms.
	tg := termGroups{base: base, stride: stride, nrows: nrows, rows: rows, a: a}
	for tg.next() {
		p, pre, c := &tg.p, &tg.pre, &tg.c
		ks.qaxpy4[q](&dst[0], p[0], p[1], p[2], p[3], pre[0], pre[1], pre[2], pre[3], c[0], c[1], c[2], c[3], nb)
	}
	if tg.n > 0 {
		for i := tg.n; i < 4; i++ {
			tg.p[i], tg.c[i] = tg.p[0], 0
		}
		p, c := &tg.p, &tg.c
		ks.qaxpy4[q](&dst[0], p[0], p[1], p[2], p[3], p[0], p[1], p[2], p[3], c[0], c[1], c[2], c[3], nb)
	}
}
