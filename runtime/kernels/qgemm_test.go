package kernels

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// qpackGo is the portable qpack of table index q (Q4_K, Q5_K) for groups
// of L rows, the reference of the assembly packers: the nb blocks of 32 of
// rows w, w+stride, … at dst, 40·L bytes a block (the layout of
// internal/asmgen/qgemm.go), four levels to a 32-bit word.
func qpackGo(q, L int, dst *byte, w unsafe.Pointer, stride, nb int) {
	bb, bs := qBlockBytes[q], 40*L
	out := unsafe.Slice(dst, nb*bs)
	le := binary.LittleEndian
	for i := range L {
		row := unsafe.Slice((*byte)(unsafe.Add(w, i*stride)), nb*32*bb/qBlockElems[q])
		for b := range nb {
			o := out[b*bs:]
			var lv [8]uint32
			sb, j := b/8, b%8 // sub-block j of a super-block
			blk := row[sb*bb : (sb+1)*bb]
			sc, m := scaleMinK4(j, blk[4:16])
			dw := f16Table[le.Uint16(blk)] * float32(sc)
			mw := f16Table[le.Uint16(blk[2:])] * float32(m) / 8
			qs := blk[bb-128+32*(j/2):]
			for g := range 8 {
				lv[g] = le.Uint32(qs[4*g:]) >> (4 * (j % 2)) & 0x0F0F0F0F
				if bb == 176 { // Q5_K: bit j of qh[l] is element l's fifth
					lv[g] |= le.Uint32(blk[16+4*g:]) >> j & 0x01010101 << 4
				}
			}
			le.PutUint32(o[4*i:], math.Float32bits(dw))
			le.PutUint32(o[4*L+4*i:], math.Float32bits(mw))
			for g, v := range lv {
				le.PutUint32(o[8*L+4*L*g+4*i:], v)
			}
		}
	}
}
