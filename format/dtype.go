// Package format reads and writes .sinf files (spec/sinf.md) and defines the
// typed, zero-copy tensor views that every weight source hands to the runtime.
// It knows bytes, dtypes and shapes; it holds no model logic.
package format

import (
	"fmt"
	"math"
	"strings"
)

// DType is the element type of a stored tensor. All multi-byte values are
// little-endian (spec/sinf.md §2). The numeric values are the dtype codes of
// the tensor directory (spec §5.1): they are part of the file format and must
// never be renumbered.
type DType uint8

const (
	// F32 is IEEE-754 binary32.
	F32 DType = iota + 1
	// F16 is IEEE-754 binary16.
	F16
	// BF16 is bfloat16: the upper 16 bits of a binary32.
	BF16
	// I32 is a two's-complement 32-bit integer (index maps).
	I32
	// F64 is IEEE-754 binary64 (score files).
	F64
	// Q8_0 is GGML's Q8_0 block quantization (spec §5.2): each run of 32
	// consecutive elements of a row is a 34-byte block, an F16 scale d then
	// 32 int8 values q; element = d·q.
	Q8_0
	// Q4_0 is GGML's Q4_0 block quantization (spec §5.2): each run of 32
	// consecutive elements of a row is an 18-byte block, an F16 scale d then
	// 16 bytes whose low nibbles hold elements 0–15 and high nibbles 16–31,
	// as unsigned q in 0–15; element = d·(q − 8).
	Q4_0
	// Q4_K is GGML's Q4_K super-block quantization (spec §5.3): each run of
	// 256 elements is a 144-byte block of eight 32-element sub-blocks, each
	// with a 6-bit scale and a 6-bit minimum; element = d·sc·q − dmin·m with
	// q in 0–15.
	Q4_K
	// Q5_K is GGML's Q5_K (spec §5.3): Q4_K's scales with 5-bit q (the fifth
	// bit in a 32-byte qh plane); 176 bytes per 256 elements.
	Q5_K
	// Q6_K is GGML's Q6_K (spec §5.3): 16 sub-blocks of 16 with an int8
	// scale each and 6-bit q − 32; element = d·sc·(q − 32); 210 bytes per 256.
	Q6_K
	// Q5_0 is GGML's Q5_0 (spec §5.2): Q4_0 with a fifth bit per element in
	// a 32-bit qh; element = d·(q − 16); 22 bytes per 32.
	Q5_0
	// Q5_1 is GGML's Q5_1 (spec §5.2): an F16 scale d and minimum m, 5-bit q;
	// element = d·q + m; 24 bytes per 32.
	Q5_1
	// SK2 is the 2-bit sketch of GateFirst's predictor (spec §5.2, §6.2
	// up_proj.sketch): each run of 32 elements is a 10-byte block, an F16
	// scale d then 8 bytes; element j is d·(2q − 3) with q the bits
	// 2·(j/8) … 2·(j/8)+1 of byte j%8. Not a weight dtype: only the sketch
	// tensor stores it.
	SK2
	// Q8_0X16 is Q8_0 with the rows interleaved by sixteen (spec §5.4): the
	// same blocks' scales and values, each group of 16 rows stored block
	// column by block column so that a register's 32-bit lanes are rows.
	Q8_0X16
	// Q4_0X16 is Q4_0 with the rows interleaved by sixteen (spec §5.4), the
	// nibbles paired so that one byte holds elements e and e+4 of a row.
	Q4_0X16
)

// BlockElems is the number of elements in one block of the 32-element block
// dtypes (Q8_0, Q4_0, Q5_0, Q5_1), along a tensor's last dimension (spec
// §5.2).
const BlockElems = 32

// SuperBlockElems is the number of elements in one super-block of the
// K-quant dtypes (Q4_K, Q5_K, Q6_K; spec §5.3), GGML's QK_K.
const SuperBlockElems = 256

// dtypeInfo is one row of the dtype table: the name of spec §5.1, the
// elements and bytes of one block (1 and the element size for the element
// dtypes), and whether the dtype may store a weight matrix.
type dtypeInfo struct {
	name         string
	elems, bytes int
	weight       bool
}

// dtypes is the dtype table of spec §5.1, indexed by code; a new dtype is one
// entry here (and its spec section), not a switch in every caller.
var dtypes = [...]dtypeInfo{
	F32:  {"F32", 1, 4, true},
	F16:  {"F16", 1, 2, true},
	BF16: {"BF16", 1, 2, true},
	I32:  {"I32", 1, 4, false},
	F64:  {"F64", 1, 8, false},
	Q8_0: {"Q8_0", BlockElems, 34, true},
	Q4_0: {"Q4_0", BlockElems, 18, true},
	Q4_K: {"Q4_K", SuperBlockElems, 144, true},
	Q5_K: {"Q5_K", SuperBlockElems, 176, true},
	Q6_K: {"Q6_K", SuperBlockElems, 210, true},
	Q5_0: {"Q5_0", BlockElems, 22, true},
	Q5_1: {"Q5_1", BlockElems, 24, true},
	SK2:  {"SK2", BlockElems, 10, false},

	Q8_0X16: {"Q8_0X16", BlockElems, 34, true},
	Q4_0X16: {"Q4_0X16", BlockElems, 18, true},
}

func (d DType) info() dtypeInfo {
	if int(d) < len(dtypes) {
		return dtypes[d]
	}
	return dtypeInfo{}
}

// Size returns the size of one element in bytes: 0 for a block-quantized
// dtype (whose sizes are per block, see Block) and for an unknown dtype.
func (d DType) Size() int {
	if i := d.info(); i.elems == 1 {
		return i.bytes
	}
	return 0
}

// Block returns the elements and bytes of one block: 32 and 34 for Q8_0,
// 32 and 18 for Q4_0, 32 and 22 for Q5_0, 32 and 24 for Q5_1, 32 and 10 for
// SK2, 256 and 144
// for Q4_K, 256 and 176 for Q5_K, 256 and 210 for Q6_K, and 1 and Size()
// for the element dtypes. Both are 0 for an unknown dtype.
func (d DType) Block() (elems, bytes int) { i := d.info(); return i.elems, i.bytes }

// Known reports whether d is a dtype code of spec §5.1.
func (d DType) Known() bool { e, _ := d.Block(); return e > 0 }

// Weight reports whether d can store a weight matrix: F32, F16, BF16 or a
// block-quantized dtype.
func (d DType) Weight() bool { return d.info().weight }

// Quantized reports whether d is a block-quantized dtype (Q8_0, Q4_0, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K, and the sketch dtype SK2).
func (d DType) Quantized() bool { e, _ := d.Block(); return e > 1 }

// KQuant reports whether d is a K-quant dtype of 256-element super-blocks
// (Q4_K, Q5_K, Q6_K; spec §5.3).
func (d DType) KQuant() bool { e, _ := d.Block(); return e == SuperBlockElems }

// RowBytes returns the bytes of n consecutive elements along the last
// dimension: n·Size() for an element dtype, n/elems blocks for a block dtype.
// It returns an error naming the dtype when n is not a whole number of
// blocks (or negative) or d is unknown.
func (d DType) RowBytes(n int) (int, error) {
	e, b := d.Block()
	switch {
	case e == 0:
		return 0, fmt.Errorf("unknown dtype %v", d)
	case n < 0:
		return 0, fmt.Errorf("negative length %d", n)
	case n%e != 0:
		return 0, fmt.Errorf("a row of %d elements is not a whole number of %v blocks of %d", n, d, e)
	}
	return n / e * b, nil
}

// String returns the dtype's name as spec §5.1 spells it ("F32", "BF16",
// "Q4_K", ...).
func (d DType) String() string {
	if i := d.info(); i.name != "" {
		return i.name
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// ParseDType parses a dtype name of spec §5.1, case-insensitively ("f16",
// "BF16", "q4_k", ...). It returns an error naming the value for anything
// else.
func ParseDType(s string) (DType, error) {
	u := strings.ToUpper(s)
	var names []string
	for c, i := range dtypes {
		if i.name == "" {
			continue
		}
		if i.name == u {
			return DType(c), nil
		}
		names = append(names, i.name)
	}
	return 0, fmt.Errorf("unknown dtype %q (want %s)", s, strings.Join(names, ", "))
}

// F16ToF32 converts an IEEE-754 binary16 bit pattern to float32 exactly,
// including subnormals, infinities and NaN.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: normalise.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 converts a float32 to the nearest binary16 (round to nearest even),
// saturating to infinity on overflow and keeping NaN a NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rounded := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && rounded&1 == 1) {
			rounded++
		}
		return sign | uint16(rounded)
	}
	rounded := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && rounded&1 == 1) {
		rounded++ // may carry into the exponent, which is correct (up to Inf)
	}
	return sign | uint16(rounded)
}

// BF16ToF32 converts a bfloat16 bit pattern to float32 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts a float32 to the nearest bfloat16 (round to nearest even),
// keeping NaN a NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// MarshalText encodes d as its name, so the metadata key "dtype" reads "BF16".
// It fails for an unknown dtype.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Known() {
		return nil, fmt.Errorf("unknown dtype %v", d)
	}
	return []byte(d.String()), nil
}

// UnmarshalText parses a dtype name as ParseDType does.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
