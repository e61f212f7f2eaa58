// Package kernels holds the numeric kernels of the forward pass: dense and
// gathered matrix-vector products for decode, matrix-matrix products for
// prefill, and the neuron-row accumulation of the transposed down_proj. Weights
// are stored F32, F16 or BF16 (little-endian, read in place from the mapped
// file); activations and accumulation are float32.
package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// Mat is a row-major weight matrix [Rows, Cols] viewed over stored bytes.
// Data holds Rows·Cols elements of DType and is never written.
type Mat struct {
	DType      format.DType
	Rows, Cols int
	Data       []byte
}

// NewMat views a 2-D tensor as a Mat. It returns an error naming the tensor
// when it is not 2-D, not F32/F16/BF16, or its length disagrees with its shape.
func NewMat(t format.Tensor) (Mat, error) {
	if len(t.Shape) != 2 {
		return Mat{}, fmt.Errorf("tensor %s: want 2 dimensions, found shape %v", t.Name, t.Shape)
	}
	switch t.DType {
	case format.F32, format.F16, format.BF16:
	default:
		return Mat{}, fmt.Errorf("tensor %s: dtype %v is not a weight dtype (F32, F16, BF16)", t.Name, t.DType)
	}
	if len(t.Data) != t.Shape[0]*t.Shape[1]*t.DType.Size() {
		return Mat{}, fmt.Errorf("tensor %s: %d bytes do not hold shape %v of %v", t.Name, len(t.Data), t.Shape, t.DType)
	}
	return Mat{DType: t.DType, Rows: t.Shape[0], Cols: t.Shape[1], Data: t.Data}, nil
}

// Bytes returns the size of the matrix's data in bytes.
func (m Mat) Bytes() int { return len(m.Data) }

// RowBytes returns the size of one row in bytes.
func (m Mat) RowBytes() int { return m.Cols * m.DType.Size() }

// row returns the bytes of row r.
func (m Mat) row(r int) []byte {
	n := m.RowBytes()
	return m.Data[r*n : (r+1)*n]
}

// RowF32 decodes row r into dst[:Cols] (used by embedding lookup).
func (m Mat) RowF32(dst []float32, r int) {
	b := m.row(r)
	switch m.DType {
	case format.F32:
		for i := range dst[:m.Cols] {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case format.F16:
		for i := range dst[:m.Cols] {
			dst[i] = f16Table[binary.LittleEndian.Uint16(b[2*i:])]
		}
	case format.BF16:
		for i := range dst[:m.Cols] {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	}
}

// f16Table maps every binary16 bit pattern to its float32 value (256 KiB).
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = format.F16ToF32(uint16(i))
	}
	return &t
}()

// asF32 reinterprets little-endian float32 bytes in place (amd64 and arm64 are
// little-endian; the data is 4-byte aligned in .sinf files and in safetensors
// files whose header length keeps it so, else a copy is made by the loader).
func asF32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func asU16(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// Aligned reports whether m's data can be read in place: its first byte is
// aligned to the element size.
func (m Mat) Aligned() bool {
	return len(m.Data) == 0 || uintptr(unsafe.Pointer(&m.Data[0]))%uintptr(m.DType.Size()) == 0
}

// dotRow returns row r of m dotted with x[:Cols], accumulated in float32.
func (m Mat) dotRow(r int, x []float32) float32 {
	b := m.row(r)
	switch m.DType {
	case format.F32:
		return dotF32(asF32(b), x)
	case format.F16:
		return dotF16(asU16(b), x)
	default:
		return dotBF16(asU16(b), x)
	}
}

// axpyRow adds a·(row r of m) to dst[:Cols].
func (m Mat) axpyRow(dst []float32, r int, a float32, lo, hi int) {
	b := m.row(r)
	switch m.DType {
	case format.F32:
		axpyF32(dst[lo:hi], asF32(b)[lo:hi], a)
	case format.F16:
		axpyF16(dst[lo:hi], asU16(b)[lo:hi], a)
	default:
		axpyBF16(dst[lo:hi], asU16(b)[lo:hi], a)
	}
}

func dotF32(w, x []float32) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		s0 += w[i] * x[i]
		s1 += w[i+1] * x[i+1]
		s2 += w[i+2] * x[i+2]
		s3 += w[i+3] * x[i+3]
	}
	for ; i < len(w); i++ {
		s0 += w[i] * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotF16(w []uint16, x []float32) float32 {
	x = x[:len(w)]
	t := f16Table
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		s0 += t[w[i]] * x[i]
		s1 += t[w[i+1]] * x[i+1]
		s2 += t[w[i+2]] * x[i+2]
		s3 += t[w[i+3]] * x[i+3]
	}
	for ; i < len(w); i++ {
		s0 += t[w[i]] * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func bf(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func dotBF16(w []uint16, x []float32) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		s0 += bf(w[i]) * x[i]
		s1 += bf(w[i+1]) * x[i+1]
		s2 += bf(w[i+2]) * x[i+2]
		s3 += bf(w[i+3]) * x[i+3]
	}
	for ; i < len(w); i++ {
		s0 += bf(w[i]) * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyF32(dst, w []float32, a float32) {
	w = w[:len(dst)]
	for i := range dst {
		dst[i] += a * w[i]
	}
}

func axpyF16(dst []float32, w []uint16, a float32) {
	w = w[:len(dst)]
	t := f16Table
	for i := range dst {
		dst[i] += a * t[w[i]]
	}
}

func axpyBF16(dst []float32, w []uint16, a float32) {
	w = w[:len(dst)]
	for i := range dst {
		dst[i] += a * bf(w[i])
	}
}
