package format

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
)

// On-disk constants (spec/sinf.md §3).
const (
	// Magic is the file's first four bytes.
	Magic = "SINF"
	// Version is the format version this package writes and the newest it
	// reads; a file with a larger version is rejected (spec §2).
	Version = 1
	// HeaderSize is the size in bytes of the fixed version-1 header.
	HeaderSize = 80
	// DefaultAlignment is the tensor data alignment in bytes that Create uses
	// when given 0 (spec §3.4).
	DefaultAlignment = 64
	// MinAlignment is the smallest alignment a file may record; every
	// alignment is a power of two of at least this size.
	MinAlignment = 64
	// MaxWriteAlignment is the largest alignment Create accepts (1 GiB).
	// Readers accept any power of two up to 2^31.
	MaxWriteAlignment = 1 << 30
	// MaxDims is the largest number of dimensions a tensor may have.
	MaxDims = 8
	// MaxNameLen is the longest tensor name in bytes.
	MaxNameLen = 4096

	// IncompatibleFlags are the header flag bits a reader must understand:
	// a file with any set bit that the reader does not know is rejected.
	// Bits 0–15 are compatible flags that readers ignore when unknown.
	IncompatibleFlags = 0xffff0000
	// FlagFFNBias (bit 16, incompatible; spec §2, §6.2) says that sliced
	// layers may store an FFN output bias, down_proj.bias (DownBiasName),
	// which a reader must add to the layer's output: a reader that does not
	// know it would run another function than the file's, so it rejects
	// the file. Writers set it exactly when such a bias is stored.
	FlagFFNBias = 1 << 16
	// KnownFlags are the flags this reader understands.
	KnownFlags = FlagFFNBias

	// minEntrySize is the smallest encoded directory entry: a 1-byte name,
	// no dimensions (spec §5).
	minEntrySize = 4 + 1 + 4 + 4 + 8 + 8 + 4
)

// Header field offsets (spec §3.1).
const (
	offMagic       = 0
	offVersion     = 4
	offFlags       = 8
	offAlignment   = 12
	offFileSize    = 16
	offMetaOff     = 24
	offMetaLen     = 32
	offDirOff      = 40
	offDirLen      = 48
	offTensorCount = 56
	offMetaCRC     = 60
	offDirCRC      = 64
	offReserved    = 68
	offHeaderCRC   = 76
)

// castagnoli is the CRC-32C table (polynomial 0x1EDC6F41, reflected
// 0x82F63B78) used for every checksum in the format.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C (Castagnoli) of b, the checksum every header,
// metadata, directory and tensor checksum in a .sinf file uses (spec §3.3).
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Header mirrors the fixed 80-byte header at offset 0 (spec §3.1). All
// offsets and lengths are in bytes from the start of the file.
type Header struct {
	Version         uint32 // format version; 1
	Flags           uint32 // feature bits: 0 or FlagFFNBias in version 1
	Alignment       uint32 // tensor data alignment in bytes, a power of two ≥ 64
	FileSize        uint64 // total file length in bytes
	MetadataOffset  uint64 // start of the metadata JSON
	MetadataLength  uint64 // length of the metadata JSON
	DirectoryOffset uint64 // start of the tensor directory
	DirectoryLength uint64 // length of the tensor directory
	TensorCount     uint32 // number of directory entries
	MetadataCRC     uint32 // CRC-32C of the metadata bytes
	DirectoryCRC    uint32 // CRC-32C of the directory bytes
	HeaderCRC       uint32 // CRC-32C of header bytes [0, 76)
}

// encode returns the header's 80 bytes with HeaderCRC computed from the rest.
func (h *Header) encode() []byte {
	b := make([]byte, HeaderSize)
	le := binary.LittleEndian
	copy(b[offMagic:], Magic)
	le.PutUint32(b[offVersion:], h.Version)
	le.PutUint32(b[offFlags:], h.Flags)
	le.PutUint32(b[offAlignment:], h.Alignment)
	le.PutUint64(b[offFileSize:], h.FileSize)
	le.PutUint64(b[offMetaOff:], h.MetadataOffset)
	le.PutUint64(b[offMetaLen:], h.MetadataLength)
	le.PutUint64(b[offDirOff:], h.DirectoryOffset)
	le.PutUint64(b[offDirLen:], h.DirectoryLength)
	le.PutUint32(b[offTensorCount:], h.TensorCount)
	le.PutUint32(b[offMetaCRC:], h.MetadataCRC)
	le.PutUint32(b[offDirCRC:], h.DirectoryCRC)
	h.HeaderCRC = Checksum(b[:offHeaderCRC])
	le.PutUint32(b[offHeaderCRC:], h.HeaderCRC)
	return b
}

// decodeHeader reads the fields of b (at least HeaderSize bytes) without
// checking them.
func decodeHeader(b []byte) Header {
	le := binary.LittleEndian
	return Header{
		Version:         le.Uint32(b[offVersion:]),
		Flags:           le.Uint32(b[offFlags:]),
		Alignment:       le.Uint32(b[offAlignment:]),
		FileSize:        le.Uint64(b[offFileSize:]),
		MetadataOffset:  le.Uint64(b[offMetaOff:]),
		MetadataLength:  le.Uint64(b[offMetaLen:]),
		DirectoryOffset: le.Uint64(b[offDirOff:]),
		DirectoryLength: le.Uint64(b[offDirLen:]),
		TensorCount:     le.Uint32(b[offTensorCount:]),
		MetadataCRC:     le.Uint32(b[offMetaCRC:]),
		DirectoryCRC:    le.Uint32(b[offDirCRC:]),
		HeaderCRC:       le.Uint32(b[offHeaderCRC:]),
	}
}

// TensorInfo is one tensor directory entry (spec §5): where a tensor's data
// lies in the file and what it holds.
type TensorInfo struct {
	Name   string // UTF-8, 1..MaxNameLen bytes, unique in the file
	DType  DType  // element type
	Shape  []int  // row-major, outermost first; empty for a scalar
	Offset int64  // byte offset of the data from the start of the file, a multiple of the alignment
	Length int64  // data length in bytes: product(Shape) * DType.Size()
	CRC32C uint32 // CRC-32C (Castagnoli) of the Length data bytes

	entryOff int64 // offset of this entry in the file, for error messages
}

// encodeEntry appends the directory entry for t to b.
func encodeEntry(b []byte, t *TensorInfo) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(len(t.Name)))
	b = append(b, t.Name...)
	b = le.AppendUint32(b, uint32(t.DType))
	b = le.AppendUint32(b, uint32(len(t.Shape)))
	for _, d := range t.Shape {
		b = le.AppendUint64(b, uint64(d))
	}
	b = le.AppendUint64(b, uint64(t.Offset))
	b = le.AppendUint64(b, uint64(t.Length))
	b = le.AppendUint32(b, t.CRC32C)
	return b
}

// byteSize returns the data length of a tensor of dtype d and shape: the
// product of the dimensions times the element size, or for a block dtype
// (spec §5.2) the product of the outer dimensions times the bytes of a row of
// the last. why says what is wrong, and is empty when nothing is: the
// product of max(dim, 1) times the element (block) size exceeds math.MaxInt
// (2⁶³ − 1, the limit of spec §5, on 64-bit platforms; the platform's int on
// 32-bit ones, so that no consumer computing a partial product in int can
// overflow), or a block dtype's shape is a scalar or has a last dimension
// that is not a multiple of the block.
func byteSize(shape []uint64, d DType) (n int64, why string) {
	elems, size := d.Block()
	if elems == 0 {
		return 0, "unknown dtype"
	}
	if elems > 1 {
		if len(shape) == 0 {
			return 0, fmt.Sprintf("a %v tensor needs at least one dimension (its rows are blocks of %d)", d, elems)
		}
		if d.Interleaved() && len(shape) != 2 {
			return 0, fmt.Sprintf("a %v tensor is a matrix (2 dimensions): its rows are interleaved by %d", d, InterleaveRows)
		}
		if last := shape[len(shape)-1]; last%uint64(elems) != 0 {
			return 0, fmt.Sprintf("the last dimension %d is not a multiple of the %v block size %d", last, d, elems)
		}
	}
	whole := uint64(size) // product of max(d, 1): bounds every partial product
	zero := false
	for i, v := range shape {
		if v > uint64(math.MaxInt) {
			return 0, "too large"
		}
		if elems > 1 && i == len(shape)-1 {
			v /= uint64(elems) // blocks per row
		}
		if v == 0 {
			zero = true
			continue
		}
		hi, lo := bits.Mul64(whole, v)
		if hi != 0 || lo > uint64(math.MaxInt) {
			return 0, "too large"
		}
		whole = lo
	}
	if zero {
		return 0, ""
	}
	return int64(whole), ""
}

// alignUp rounds n up to a multiple of a (a power of two).
func alignUp(n, a int64) int64 { return (n + a - 1) &^ (a - 1) }
