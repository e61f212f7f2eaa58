package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// Sketch is a row-major SK2 matrix [Rows, Cols] viewed over stored bytes
// (spec §5.2): GateFirst's 2-bit sketch of a sliced layer's up_proj rows
// (spec §6.2 up_proj.sketch). Cols is a multiple of 32; a row is Cols/32
// blocks of 10 bytes. Data is never written.
type Sketch struct {
	Rows, Cols int
	Data       []byte
}

// NewSketch views a 2-D SK2 tensor as a Sketch. It returns an error naming
// the tensor when it is not 2-D, not SK2, its rows are not whole blocks, or
// its length disagrees with its shape.
func NewSketch(t format.Tensor) (Sketch, error) {
	if len(t.Shape) != 2 || t.DType != format.SK2 {
		return Sketch{}, fmt.Errorf("tensor %s: want a 2-D SK2 tensor, found %v %v", t.Name, t.DType, t.Shape)
	}
	rb, err := format.SK2.RowBytes(t.Shape[1])
	if err != nil {
		return Sketch{}, fmt.Errorf("tensor %s: shape %v: %w", t.Name, t.Shape, err)
	}
	if len(t.Data) != t.Shape[0]*rb {
		return Sketch{}, fmt.Errorf("tensor %s: %d bytes do not hold shape %v of SK2", t.Name, len(t.Data), t.Shape)
	}
	return Sketch{Rows: t.Shape[0], Cols: t.Shape[1], Data: t.Data}, nil
}

// Bytes returns the size of the sketch's data in bytes.
func (s Sketch) Bytes() int { return len(s.Data) }

// sk2Levels maps a byte of SK2 codes to its four levels 2q − 3, element
// j%8 + 8·k of the block at index k.
var sk2Levels = func() (t [256][4]float32) {
	for v := range t {
		for k := range 4 {
			t[v][k] = float32(2*(v>>(2*k)&3) - 3)
		}
	}
	return
}()

// SketchMatVec computes dst[r] ≈ S[r,:]·x for r < s.Rows on p's threads,
// over x quantized to int8 blocks of 32 as the block-quantized MatVec
// quantizes it (quantizeX): each SK2 block's Σ_j (2q_j − 3)·q_x[j] summed in
// integers, times d_w·d_x. Shapes: dst [s.Rows], x [s.Cols], float32;
// s.Cols a multiple of 32. AVX2 on amd64 (every x86 set), NEON (SDOT with
// dotprod) on arm64, portable Go with purego.
func SketchMatVec(p *Pool, dst []float32, s Sketch, x []float32) {
	checkLen("SketchMatVec x", x, s.Cols)
	checkLen("SketchMatVec dst", dst, s.Rows)
	if s.Cols%format.BlockElems != 0 || len(s.Data) < s.Rows*s.Cols/format.BlockElems*10 {
		panic(fmt.Sprintf("kernels: %d bytes do not hold a [%d, %d] SK2 sketch", len(s.Data), s.Rows, s.Cols))
	}
	j := job{op: opSketch, ks: active, w: Mat{DType: format.SK2, Rows: s.Rows, Cols: s.Cols, Data: s.Data}, dst: dst, x: x}
	p.quantizeX(&j)
	// quantizeX leaves 8·d_x·Σq_x at xd[nb+b]; the kernels subtract
	// t[b] = 3·d_x·Σq_x/16 from each of a block's 8 lanes (sketchAVX2).
	nb := s.Cols / format.BlockElems
	for b, c := range j.xd[nb : 2*nb] {
		j.xd[nb+b] = c * (3.0 / 128)
	}
	p.run(j, s.Rows)
}

// sketchRange is SketchMatVec over rows [lo, hi), with ks's kernel.
func sketchRange(ks *kernelSet, dst []float32, w Mat, xq []int8, xd []float32, lo, hi int) {
	nb := w.Cols / format.BlockElems
	if nb == 0 {
		clear(dst[lo:hi])
		return
	}
	ks.sketch(&dst[lo], unsafe.Pointer(&w.Data[lo*nb*10]), &xq[0], &xd[nb], hi-lo, nb)
}

// sketchGo is the portable kernelSet.sketch: the arithmetic of sketchAVX2,
// the lanes summed in another order.
func sketchGo(dst *float32, w unsafe.Pointer, xq *int8, t *float32, rows, nb int) {
	ws := unsafe.Slice((*byte)(w), rows*nb*10)
	xs := unsafe.Slice(xq, 64*nb)
	ts := unsafe.Slice(t, nb)
	out := unsafe.Slice(dst, rows)
	for r := range out {
		row := ws[r*nb*10 : (r+1)*nb*10]
		var sum float32
		for b := range nb {
			blk := row[b*10 : b*10+10]
			q := xs[64*b : 64*b+32]
			var v int32
			for i, c := range blk[2:10] {
				v += int32(c&3)*int32(q[i]) + int32(c>>2&3)*int32(q[i+8]) +
					int32(c>>4&3)*int32(q[i+16]) + int32(c>>6)*int32(q[i+24])
			}
			dx := math.Float32frombits(binary.LittleEndian.Uint32(unsafe.Slice((*byte)(unsafe.Pointer(&xs[64*b+32])), 4)))
			sum += format.F16ToF32(binary.LittleEndian.Uint16(blk)) * (dx*float32(v) - 8*ts[b])
		}
		out[r] = 2 * sum
	}
}
