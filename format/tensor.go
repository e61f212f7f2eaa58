package format

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// Tensor is a read-only, zero-copy view of one stored tensor: Data aliases the
// mapped file (or checkpoint) it came from and must not be written to.
// Shape is row-major, outermost dimension first, as in safetensors and PyTorch.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// Elems returns the number of elements the shape describes (1 for a scalar).
func (t Tensor) Elems() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// CheckShape returns an error naming the tensor, the expected and the found
// shape when t's shape differs from want.
func (t Tensor) CheckShape(want ...int) error {
	ok := len(t.Shape) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = t.Shape[i] == want[i]
	}
	if !ok {
		return fmt.Errorf("tensor %s: expected shape %v, found %v", t.Name, want, t.Shape)
	}
	return nil
}

// hostLittleEndian reports whether the machine stores integers little-endian,
// so that a stored buffer can be reinterpreted in place.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// F32s returns the data of an F32 tensor as a []float32 aliasing the stored
// bytes when the host is little-endian and the data 4-byte aligned, else a copy.
// It returns an error for another dtype.
func (t Tensor) F32s() ([]float32, error) {
	if t.DType != F32 {
		return nil, fmt.Errorf("tensor %s: dtype %v, want F32", t.Name, t.DType)
	}
	n := len(t.Data) / 4
	if n == 0 {
		return nil, nil
	}
	if hostLittleEndian && uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), n), nil
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// I32s returns the data of an I32 tensor as []int32, aliasing where possible
// (see F32s). It returns an error for another dtype.
func (t Tensor) I32s() ([]int32, error) {
	if t.DType != I32 {
		return nil, fmt.Errorf("tensor %s: dtype %v, want I32", t.Name, t.DType)
	}
	n := len(t.Data) / 4
	if n == 0 {
		return nil, nil
	}
	if hostLittleEndian && uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
		return unsafe.Slice((*int32)(unsafe.Pointer(&t.Data[0])), n), nil
	}
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// ToF32 decodes any float tensor (F32, F16, BF16, F64, and the block dtypes
// Q8_0, Q4_0, Q5_0, Q5_1 and the K-quants, dequantized) into a new []float32.
func (t Tensor) ToF32() ([]float32, error) {
	n := t.Elems()
	if t.DType.Quantized() {
		if _, why := byteSize(shapeU64(t.Shape), t.DType); why != "" {
			return nil, fmt.Errorf("tensor %s: shape %v of %v: %s", t.Name, t.Shape, t.DType, why)
		}
		out, data, d := make([]float32, n), t.Data, t.DType
		if d.Interleaved() {
			data, d = make([]byte, len(t.Data)), d.Base()
			if err := Deinterleave(data, t.Data, t.DType, t.Shape[0], t.Shape[1]); err != nil {
				return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
			}
		}
		if err := Dequantize(out, data, d); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		return out, nil
	}
	if t.DType.Size() == 0 || len(t.Data) != n*t.DType.Size() {
		return nil, fmt.Errorf("tensor %s: %d bytes do not hold %v of %v", t.Name, len(t.Data), t.Shape, t.DType)
	}
	out := make([]float32, n)
	d := t.Data
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = F16ToF32(binary.LittleEndian.Uint16(d[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = BF16ToF32(binary.LittleEndian.Uint16(d[2*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(d[8*i:])))
		}
	default:
		return nil, fmt.Errorf("tensor %s: dtype %v is not a float type", t.Name, t.DType)
	}
	return out, nil
}

// shapeU64 converts a shape for byteSize; a negative dimension becomes one
// byteSize rejects as too large.
func shapeU64(shape []int) []uint64 {
	dims := make([]uint64, len(shape))
	for i, d := range shape {
		dims[i] = uint64(d)
	}
	return dims
}
