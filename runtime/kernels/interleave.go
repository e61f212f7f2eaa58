package kernels

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// Interleaved rows (Q8_0X16, Q4_0X16; spec/sinf.md §5.4): each group of
// sixteen rows of a Q8_0 or Q4_0 matrix is stored block column by block
// column, a 32-bit lane of a 64-byte chunk per row, so a decode kernel
// multiplies sixteen rows by four broadcast x at once and sums no lanes
// horizontally (qdotX16*: ZMM with AVX512-VNNI, two YMM halves with AVX-VNNI
// or AVX2, SDOT by element on arm64 dotprod; portable Go on the neon and
// generic sets). The last Rows mod 16 rows follow
// the groups as plain rows. MatVec, MatVecBatch and MatMul take them, and
// MatVecRows (a sliced layer's gate_proj, which gatefirst reads whole and
// the prompt-selected modes gather, may be interleaved); the neuron-row
// products (AddRows, MatMulRowsT) do not: up_proj and down_proj.weight_t of a
// sliced layer stay row-major.

// xrows is the rows of an interleaved group.
const xrows = format.InterleaveRows

// checkMatX is checkMat for the products that take interleaved rows.
func checkMatX(w Mat) {
	if w.DType.Interleaved() {
		w.DType = w.DType.Base() // same bytes per row
	}
	checkMat("", w)
}

// xdot returns the set's interleaved decode kernel for base table index q,
// or the portable one.
func (ks *kernelSet) xdot(q int) qdotXFunc {
	if f := ks.qdotX[q]; f != nil {
		return f
	}
	return genericSet.qdotX[q]
}

// xmatVecRange is matVecRange on interleaved w: rows [lo, hi) (rows nil,
// lo a multiple of sixteen), whole groups through the set's qdotX and the
// tail rows (from Rows/16·16 on) through qdotRows of the base dtype; or the
// gathered rows[lo:hi], where a row in a whole group takes the group's
// sixteen dots (the same sums as MatVec's), kept while the next rows fall in
// the same group, and a tail row the base dtype's single-row dot.
func xmatVecRange(ks *kernelSet, dst []float32, w Mat, rows []int32, xq []int8, xd []float32, lo, hi int) {
	q := qIndex(w.DType.Base())
	nb, rb := w.Cols/32, w.RowBytes()
	full := w.Rows / xrows * xrows
	if nb == 0 {
		clear(dst[lo:hi])
		return
	}
	base := dataPtr(w)
	if rows == nil {
		if g := min(hi, full); lo < g {
			ks.xdot(q)(unsafe.Add(base, lo*rb), nb, &xq[0], &xd[0], (g-lo)/xrows, &dst[lo])
		}
		if t := max(lo, full); t < hi {
			ks.qdotRows[q](unsafe.Add(base, t*rb), rb, nil, &xq[0], &xd[0], nb, hi-t, &dst[t], 0)
		}
		return
	}
	checkRows(rows[lo:hi], w.Rows)
	var g [xrows]float32
	cur := -1 // the group in g
	for k := lo; k < hi; k++ {
		r := int(rows[k])
		if r >= full {
			ks.qdotRows[q](unsafe.Add(base, r*rb), rb, nil, &xq[0], &xd[0], nb, 1, &dst[k], 0)
			continue
		}
		if r/xrows != cur {
			cur = r / xrows
			ks.xdot(q)(unsafe.Add(base, cur*xrows*rb), nb, &xq[0], &xd[0], 1, &g[0])
		}
		dst[k] = g[r%xrows]
	}
}

// xmatMulRange is matMulRange's float32 path on interleaved rows [lo, hi)
// (sets without qpackX): each group dequantized to float32 in scratch
// (xcvtGroup), then the float32 micro-kernel; the tail rows as the base
// dtype's.
func xmatMulRange(ks *kernelSet, dst []float32, w Mat, x []float32, T, lo, hi int, s *scratch) {
	C, R, rb := w.Cols, w.Rows, w.RowBytes()
	full := R / xrows * xrows
	base := dataPtr(w)
	for r0 := lo; r0 < min(hi, full); r0 += xrows {
		xcvtGroup(s.qw[:xrows*C], unsafe.Add(base, r0*rb), C/32, w.DType)
		f := Mat{DType: format.F32, Rows: xrows, Cols: C, Data: unsafe.Slice((*byte)(unsafe.Pointer(&s.qw[0])), 4*xrows*C)}
		matMulRows(ks, dst, R, f, r0, x, T, r0, r0+xrows)
	}
	if t := max(lo, full); t < hi {
		b := w
		b.DType = w.DType.Base()
		qmatMulRange(ks, dst, b, x, T, t, hi, s)
	}
}

// xcvtGroup dequantizes one interleaved group of nb block columns at w to
// sixteen float32 rows at dst (row i at dst[i·32·nb:]).
func xcvtGroup(dst []float32, w unsafe.Pointer, nb int, d format.DType) {
	_, bb := d.Block()
	grp := unsafe.Slice((*byte)(w), nb*xrows*bb)
	for i := range xrows {
		xgroupRow(dst[i*32*nb:][:32*nb], grp, i, d)
	}
}

// qdotX16Go is the portable qdotX of Q8_0X16 (q8) or Q4_0X16: per block,
// d_w·(d_x·Σ u·q_x − c) with u the level (Q4_0, c = xd[nb+b]) or the value
// + 128 (Q8_0, c = 16·xd[nb+b]), as the assembly computes it.
func qdotX16Go(q8 bool, w unsafe.Pointer, nb int, xq *int8, xd *float32, ng int, dst *float32) {
	bb := 18
	if q8 {
		bb = 34
	}
	xs := unsafe.Slice(xq, 64*nb)
	ds := unsafe.Slice(xd, 2*nb)
	out := unsafe.Slice(dst, xrows*ng)
	for g := range ng {
		var acc [xrows]float32
		for b := range nb {
			blk := unsafe.Slice((*byte)(unsafe.Add(w, (g*nb+b)*xrows*bb)), xrows*bb)
			x := xs[64*b:][:32]
			for i := range xrows {
				var su int32
				for m := range 4 {
					if q8 {
						for k := range 8 {
							su += int32(blk[2*xrows+64*k+4*i+m]^0x80) * int32(x[4*k+m])
						}
						continue
					}
					for j := range 4 {
						v := blk[2*xrows+64*j+4*i+m]
						su += int32(v&15)*int32(x[8*j+m]) + int32(v>>4)*int32(x[8*j+4+m])
					}
				}
				c := ds[nb+b]
				if q8 {
					c = 16 * c
				}
				dw := format.F16ToF32(binary.LittleEndian.Uint16(blk[2*i:]))
				acc[i] += dw * (float32(su)*ds[b] - c)
			}
		}
		copy(out[xrows*g:], acc[:])
	}
}

func qdotX16Q8_0Go(w unsafe.Pointer, nb int, xq *int8, xd *float32, ng int, dst *float32) {
	qdotX16Go(true, w, nb, xq, xd, ng, dst)
}

func qdotX16Q4_0Go(w unsafe.Pointer, nb int, xq *int8, xd *float32, ng int, dst *float32) {
	qdotX16Go(false, w, nb, xq, xd, ng, dst)
}

// refuseInterleaved panics for an interleaved w in a product that takes
// row-major rows only (gathered or neuron-row products).
func refuseInterleaved(op string, w Mat) {
	if w.DType.Interleaved() {
		panic(fmt.Sprintf("kernels: %s takes row-major rows, not %v (spec §5.4: a sliced layer's up_proj and down_proj.weight_t are not interleaved)", op, w.DType))
	}
}

// xrowF32 decodes row r of the interleaved m (r in a whole group) into dst
// (len m.Cols): the embedding lookup of a head tied to the embedding.
func xrowF32(dst []float32, m Mat, r int) {
	_, bb := m.DType.Block()
	n := m.Cols / 32 * xrows * bb // bytes of a group
	xgroupRow(dst, m.Data[r/xrows*n:][:n], r%xrows, m.DType)
}

// xgroupRow decodes row i of the interleaved group grp (dtype d) into dst,
// each value d·q or d·(level − 8), as the base dtype's decoding gives it.
func xgroupRow(dst []float32, grp []byte, i int, d format.DType) {
	_, bb := d.Block()
	for b := range len(dst) / 32 {
		blk := grp[b*xrows*bb:][:xrows*bb]
		sc := format.F16ToF32(binary.LittleEndian.Uint16(blk[2*i:]))
		out := dst[32*b:][:32]
		for m := range 4 {
			if d == format.Q8_0X16 {
				for k := range 8 {
					out[4*k+m] = float32(int8(blk[2*xrows+64*k+4*i+m])) * sc
				}
				continue
			}
			for j := range 4 {
				v := blk[2*xrows+64*j+4*i+m]
				out[8*j+m] = float32(int(v&15)-8) * sc
				out[8*j+4+m] = float32(int(v>>4)-8) * sc
			}
		}
	}
}

// xbatchRows is batchRows on interleaved rows [lo, hi) (lo a multiple of
// sixteen): the tokens the set's qdotXB kernels take, in batchT's groups,
// over the whole groups, and the plain tail rows of those tokens by
// qdotRows; it returns how many tokens it did.
func (j *job) xbatchRows(lo, hi int) int {
	w, B, ks := j.w, j.t, j.ks
	q := qIndex(w.DType.Base())
	R, nb, rb := w.Rows, w.Cols/32, w.RowBytes()
	full := R / xrows * xrows
	nq, nd := len(j.xq)/B, len(j.xd)/B
	done := 0
	for {
		T := batchT(B-done, func(T int) bool { return ks.qdotXB[T-2][q] != nil })
		if T == 0 {
			return done
		}
		if g := min(hi, full); lo < g {
			ks.qdotXB[T-2][q](unsafe.Add(dataPtr(w), lo*rb), nb, &j.xq[done*nq], nq, &j.xd[done*nd], 4*nd, (g-lo)/xrows, &j.dst[done*R+lo], 4*R)
		}
		for t := done; t < done+T; t++ { // the tail rows, by MatVec's path
			if r := max(lo, full); r < hi {
				xmatVecRange(ks, j.dst[t*R:(t+1)*R], w, nil, j.xq[t*nq:], j.xd[t*nd:], r, hi)
			}
		}
		done += T
	}
}
