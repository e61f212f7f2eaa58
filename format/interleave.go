package format

import "fmt"

// Interleaved rows (spec/sinf.md §5.4). Q8_0X16 and Q4_0X16 store the blocks
// of a Q8_0 or Q4_0 matrix [R, C] with each group of InterleaveRows rows laid
// out block column by block column, as a decode kernel consumes them with
// one row per 32-bit lane; the last R mod 16 rows follow the groups as plain
// rows of the base dtype. A tensor's bytes are the same in number as the
// base dtype's and its values the same: only their order differs.

// InterleaveRows is the number of rows of one interleaved group (spec §5.4).
const InterleaveRows = 16

// Base returns the row-major dtype whose blocks an interleaved dtype holds:
// Q8_0 for Q8_0X16, Q4_0 for Q4_0X16, and d itself for every other dtype.
func (d DType) Base() DType {
	switch d {
	case Q8_0X16:
		return Q8_0
	case Q4_0X16:
		return Q4_0
	}
	return d
}

// Interleaved reports whether d is an interleaved-rows dtype (spec §5.4).
func (d DType) Interleaved() bool { return d.Base() != d }

// InterleavedOf returns the interleaved dtype of the base dtype d (Q8_0X16
// for Q8_0, Q4_0X16 for Q4_0) and whether there is one.
func InterleavedOf(d DType) (DType, bool) {
	switch d {
	case Q8_0:
		return Q8_0X16, true
	case Q4_0:
		return Q4_0X16, true
	}
	return 0, false
}

// Interleave writes the [rows, cols] matrix src, stored row-major in the
// base dtype d (Q8_0 or Q4_0), to dst in the layout of d's interleaved
// dtype (spec §5.4). dst and src have the same length and must not overlap.
// It returns an error for another dtype or lengths that do not hold the
// shape.
func Interleave(dst, src []byte, d DType, rows, cols int) error {
	x, ok := InterleavedOf(d)
	if !ok {
		return fmt.Errorf("dtype %v has no interleaved form (Q8_0 and Q4_0 do)", d)
	}
	return interleave(dst, src, x, rows, cols, true)
}

// Deinterleave is Interleave's inverse: src holds a [rows, cols] matrix of
// the interleaved dtype d (Q8_0X16 or Q4_0X16), dst gets it row-major in
// d.Base().
func Deinterleave(dst, src []byte, d DType, rows, cols int) error {
	if !d.Interleaved() {
		return fmt.Errorf("dtype %v is not an interleaved dtype", d)
	}
	return interleave(src, dst, d, rows, cols, false)
}

// interleave copies between the row-major bytes rm and the interleaved
// bytes il of a [rows, cols] matrix of dtype x (Q8_0X16 or Q4_0X16): rm to
// il when toIL, else il to rm.
func interleave(il, rm []byte, x DType, rows, cols int, toIL bool) error {
	_, bb := x.Block()
	rb, err := x.RowBytes(cols)
	if err != nil {
		return err
	}
	if rows < 0 || len(il) != rows*rb || len(rm) != rows*rb {
		return fmt.Errorf("%v: %d and %d bytes do not both hold a [%d, %d] matrix (%d bytes)", x, len(il), len(rm), rows, cols, rows*rb)
	}
	const L = InterleaveRows
	nb, groups := cols/BlockElems, rows/L
	var lv [L][BlockElems]byte // levels (Q4_0) or values (Q8_0) of the group's rows
	for g := range groups {
		for b := range nb {
			blk := il[(g*nb+b)*L*bb:][:L*bb]
			row := func(i int) []byte { return rm[(g*L+i)*rb+b*bb:][:bb] }
			if toIL {
				for i := range L {
					r := row(i)
					copy(blk[2*i:2*i+2], r[:2])
					levels(&lv[i], r, x)
				}
				packGroup(blk[2*L:], &lv, x)
				continue
			}
			unpackGroup(&lv, blk[2*L:], x)
			for i := range L {
				r := row(i)
				copy(r[:2], blk[2*i:2*i+2])
				setLevels(r, &lv[i], x)
			}
		}
	}
	tail := groups * L * rb // the last rows mod 16: plain rows
	if toIL {
		copy(il[tail:], rm[tail:])
	} else {
		copy(rm[tail:], il[tail:])
	}
	return nil
}

// levels sets lv to the 32 values of the base block blk of x: Q8_0's int8
// bytes, Q4_0's levels 0–15 (element e < 16 the low nibble of qs[e], e ≥ 16
// the high nibble of qs[e−16]).
func levels(lv *[BlockElems]byte, blk []byte, x DType) {
	if x == Q8_0X16 {
		copy(lv[:], blk[2:34])
		return
	}
	for e, q := range blk[2:18] {
		lv[e], lv[e+16] = q&15, q>>4
	}
}

// setLevels is levels' inverse: it writes lv into the base block blk.
func setLevels(blk []byte, lv *[BlockElems]byte, x DType) {
	if x == Q8_0X16 {
		copy(blk[2:34], lv[:])
		return
	}
	for e := range 16 {
		blk[2+e] = lv[e] | lv[e+16]<<4
	}
}

// packGroup writes the values after the scales of one interleaved block
// column (spec §5.4): Q8_0X16, for k < 8, 64 bytes whose byte 4i+m is
// element 4k+m of row i; Q4_0X16, for j < 4, 64 bytes whose byte 4i+m holds
// element 8j+m of row i in its low nibble and element 8j+4+m in its high one.
func packGroup(dst []byte, lv *[InterleaveRows][BlockElems]byte, x DType) {
	for i := range InterleaveRows {
		for m := range 4 {
			if x == Q8_0X16 {
				for k := range 8 {
					dst[64*k+4*i+m] = lv[i][4*k+m]
				}
				continue
			}
			for j := range 4 {
				dst[64*j+4*i+m] = lv[i][8*j+m] | lv[i][8*j+4+m]<<4
			}
		}
	}
}

// unpackGroup is packGroup's inverse.
func unpackGroup(lv *[InterleaveRows][BlockElems]byte, src []byte, x DType) {
	for i := range InterleaveRows {
		for m := range 4 {
			if x == Q8_0X16 {
				for k := range 8 {
					lv[i][4*k+m] = src[64*k+4*i+m]
				}
				continue
			}
			for j := range 4 {
				v := src[64*j+4*i+m]
				lv[i][8*j+m], lv[i][8*j+4+m] = v&15, v>>4
			}
		}
	}
}
