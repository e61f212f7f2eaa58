package kernels

// MatVec computes dst[r] = Σ_c W[r,c]·x[c] for every row r of w.
// Shapes: dst [w.Rows], x [w.Cols]. Rows are split across the pool's workers.
func MatVec(p *Pool, dst []float32, w Mat, x []float32) {
	p.run(job{op: opMatVec, w: w, dst: dst, x: x}, w.Rows)
}

// MatVecRows computes dst[j] = W[rows[j],:]·x for j < len(rows): the gathered
// form for the selected neuron rows of gate_proj / up_proj (paper §5).
// Shapes: dst [len(rows)], x [w.Cols]; rows index [0, w.Rows).
func MatVecRows(p *Pool, dst []float32, w Mat, rows []int32, x []float32) {
	p.run(job{op: opMatVecRows, w: w, dst: dst, x: x, rows: rows}, len(rows))
}

// AddRows computes dst[c] += Σ_j a[j]·W[rows[j],c]: the neuron-row form of the
// transposed down_proj ([kept, hidden], spec/sinf.md) over selected neurons.
// rows nil means rows 0..len(a)-1. Shapes: dst [w.Cols], a [len(rows)].
// Columns are split across workers, so each worker writes its own slice of dst.
func AddRows(p *Pool, dst []float32, w Mat, rows []int32, a []float32) {
	p.run(job{op: opAddRows, w: w, dst: dst, x: a, rows: rows}, w.Cols)
}

// MatMul computes dst[t,r] = Σ_c W[r,c]·X[t,c] for t < T: the prefill form of
// MatVec. Shapes: x [T, w.Cols], dst [T, w.Rows], both row-major.
func MatMul(p *Pool, dst []float32, w Mat, x []float32, T int) {
	p.run(job{op: opMatMul, w: w, dst: dst, x: x, t: T}, w.Rows)
}

// MatMulRowsT computes dst[t,c] = Σ_k A[t,k]·W[k,c] for t < T, with W = w
// of shape [K, C] (the transposed down_proj) and A [T, K] row-major; dst [T, C].
// It overwrites dst.
func MatMulRowsT(p *Pool, dst []float32, w Mat, a []float32, T int) {
	p.run(job{op: opMatMulT, w: w, dst: dst, x: a, t: T}, w.Cols)
}

const (
	opMatVec = iota
	opMatVecRows
	opAddRows
	opMatMul
	opMatMulT
)

// job is one kernel call, split by the pool into [lo, hi) ranges of its
// parallel dimension. Passing it by value keeps dispatch allocation-free.
type job struct {
	op   int
	w    Mat
	dst  []float32
	x    []float32
	rows []int32
	t    int
}

// do runs the part [lo, hi) of the job's parallel dimension.
func (j *job) do(lo, hi int) {
	w := j.w
	switch j.op {
	case opMatVec:
		for r := lo; r < hi; r++ {
			j.dst[r] = w.dotRow(r, j.x)
		}
	case opMatVecRows:
		for k := lo; k < hi; k++ {
			j.dst[k] = w.dotRow(int(j.rows[k]), j.x)
		}
	case opAddRows:
		if j.rows == nil {
			for k, a := range j.x {
				if a != 0 {
					w.axpyRow(j.dst, k, a, lo, hi)
				}
			}
			return
		}
		for k, r := range j.rows {
			if a := j.x[k]; a != 0 {
				w.axpyRow(j.dst, int(r), a, lo, hi)
			}
		}
	case opMatMul:
		// Block over rows of W so each block of weights is read once from
		// memory and reused for every token while it is in cache.
		const block = 16
		for r0 := lo; r0 < hi; r0 += block {
			r1 := min(r0+block, hi)
			for t := 0; t < j.t; t++ {
				x := j.x[t*w.Cols : (t+1)*w.Cols]
				d := j.dst[t*w.Rows : (t+1)*w.Rows]
				for r := r0; r < r1; r++ {
					d[r] = w.dotRow(r, x)
				}
			}
		}
	case opMatMulT:
		K := w.Rows
		for t := 0; t < j.t; t++ {
			d := j.dst[t*w.Cols : (t+1)*w.Cols]
			clear(d[lo:hi])
			a := j.x[t*K : (t+1)*K]
			for k := 0; k < K; k++ {
				if a[k] != 0 {
					w.axpyRow(d, k, a[k], lo, hi)
				}
			}
		}
	}
}
