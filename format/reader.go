package format

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"sort"
	"unicode/utf8"
)

// File is an open .sinf file: the validated header (embedded, as in
// debug/elf), metadata and tensor directory, and the file's bytes, memory
// mapped read-only by Open or given to NewFile. Tensor views alias those
// bytes and are valid until Close. The read methods are safe for concurrent
// use; Close is not.
type File struct {
	Header

	path    string
	data    []byte // the whole file; nil after Close
	unmap   func([]byte) error
	meta    Metadata
	tensors []TensorInfo
	byName  map[string]int
	info    os.FileInfo // the descriptor's stat at open; nil for NewFile
}

// Stat returns the file's stat taken at open from the descriptor it mapped
// or read (so it describes those bytes even if the path is replaced
// later), or nil for a File made by NewFile.
func (f *File) Stat() os.FileInfo { return f.info }

// NewFile validates data as a whole .sinf file (every check of spec §7) and
// returns a File whose tensor views alias data. name labels errors. It
// never panics, whatever data holds; a malformed file yields a *FormatError.
func NewFile(data []byte, name string) (*File, error) {
	return parse(data, name)
}

// ReadFile reads the whole .sinf file at path into memory and validates it
// as NewFile does: the reader for filesystems where a mapping is unsafe
// (sinf run --no-mmap, as llama.cpp's --no-mmap). It costs the file's size
// in resident memory, and a change to the file afterwards cannot affect the
// process. Errors are those of Open.
func ReadFile(path string) (*File, error) {
	if err := CheckRegular(path); err != nil {
		return nil, err
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(fd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f, err := parse(data, path)
	if err != nil {
		return nil, err
	}
	f.info = st
	return f, nil
}

// ReadRegularFile is os.ReadFile for a file named by a user or by another
// file: it refuses what is not a regular file (after symlinks) before
// opening it, since opening a FIFO blocks until a writer comes and a
// character device such as /dev/zero never ends. The error names the path
// and what it is.
func ReadRegularFile(path string) ([]byte, error) {
	if err := CheckRegular(path); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// CheckRegular returns an error naming path when it is not a regular file
// (after symlinks): a folder, a FIFO, a device or a socket. A missing file
// is the os.Stat error (errors.Is(err, fs.ErrNotExist)).
func CheckRegular(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		return nil
	case m.IsDir():
		return fmt.Errorf("%s: is a folder, not a regular file", path)
	case m&os.ModeNamedPipe != 0:
		return fmt.Errorf("%s: is a FIFO (named pipe), not a regular file", path)
	case m&os.ModeDevice != 0:
		return fmt.Errorf("%s: is a device, not a regular file", path)
	}
	return fmt.Errorf("%s: not a regular file (%v)", path, fi.Mode().Type())
}

// parse runs the reader checks of spec §7 in order.
func parse(data []byte, path string) (*File, error) {
	size := int64(len(data))
	// §7.1–7.2: magic and version come before any other field, since a later
	// version may lay out the rest of the header differently.
	if size >= 4 && string(data[:4]) != Magic {
		return nil, errorf(path, offMagic, "magic", "found %q, want %q: not a sinf file", data[:4], Magic)
	}
	if size < offVersion+4 {
		return nil, errorf(path, 0, "header", "file is %d bytes, too short for magic and version (truncated)", size)
	}
	le := binary.LittleEndian
	if v := le.Uint32(data[offVersion:]); v == 0 || v > Version {
		if v == 0 {
			return nil, errorf(path, offVersion, "version", "version 0 is invalid")
		}
		return nil, errorf(path, offVersion, "version",
			"file format version %d is newer than version %d, the newest this reader supports: upgrade sinf", v, Version)
	}
	if size < HeaderSize {
		return nil, errorf(path, 0, "header", "file is %d bytes, shorter than the %d-byte header (truncated)", size, HeaderSize)
	}
	h := decodeHeader(data)
	if sum := Checksum(data[:offHeaderCRC]); sum != h.HeaderCRC {
		return nil, errorf(path, offHeaderCRC, "header_crc32c", "header checksum 0x%08x does not match stored 0x%08x", sum, h.HeaderCRC)
	}
	if unknown := h.Flags & IncompatibleFlags &^ KnownFlags; unknown != 0 {
		return nil, errorf(path, offFlags, "flags", "unknown incompatible flags 0x%08x", unknown)
	}
	if a := h.Alignment; a < MinAlignment || a&(a-1) != 0 {
		return nil, errorf(path, offAlignment, "alignment", "%d is not a power of two ≥ %d", a, MinAlignment)
	}
	if h.FileSize != uint64(size) {
		what := "truncated"
		if h.FileSize < uint64(size) {
			what = "trailing bytes"
		}
		return nil, errorf(path, offFileSize, "file_size", "header records %d bytes, file has %d (%s)", h.FileSize, size, what)
	}
	if err := checkRegion(path, offMetaOff, "metadata", h.MetadataOffset, h.MetadataLength, size); err != nil {
		return nil, err
	}
	if err := checkRegion(path, offDirOff, "directory", h.DirectoryOffset, h.DirectoryLength, size); err != nil {
		return nil, err
	}
	mb := data[h.MetadataOffset : h.MetadataOffset+h.MetadataLength]
	if sum := Checksum(mb); sum != h.MetadataCRC {
		return nil, errorf(path, offMetaCRC, "metadata_crc32c", "metadata checksum 0x%08x does not match stored 0x%08x", sum, h.MetadataCRC)
	}
	db := data[h.DirectoryOffset : h.DirectoryOffset+h.DirectoryLength]
	if sum := Checksum(db); sum != h.DirectoryCRC {
		return nil, errorf(path, offDirCRC, "directory_crc32c", "directory checksum 0x%08x does not match stored 0x%08x", sum, h.DirectoryCRC)
	}

	f := &File{Header: h, path: path, data: data}
	if err := f.parseMetadata(mb); err != nil {
		return nil, err
	}
	if err := f.parseDirectory(db); err != nil {
		return nil, err
	}
	if err := f.checkOverlaps(); err != nil {
		return nil, err
	}
	return f, nil
}

// checkRegion checks that [off, off+n) lies within [HeaderSize, size),
// without overflow. field names the header field at fieldOff.
func checkRegion(path string, fieldOff int64, field string, off, n uint64, size int64) error {
	if off < HeaderSize || off > uint64(size) || n > uint64(size)-off {
		return errorf(path, fieldOff, field+"_offset",
			"region [%d, +%d) is not within [%d, %d), the file after the header", off, n, HeaderSize, size)
	}
	return nil
}

// shallowKeys are the metadata keys whose values repeatedKey checks at their
// top level only.
var shallowKeys = map[string]bool{"tokenizer": true, "tokenizer_config": true}

// parseMetadata decodes the metadata block (spec §4, §7.5).
func (f *File) parseMetadata(mb []byte) error {
	off := int64(f.MetadataOffset)
	if !utf8.Valid(mb) {
		return errorf(f.path, off, "metadata", "not valid UTF-8")
	}
	if t := bytes.TrimLeft(mb, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return errorf(f.path, off, "metadata", "not a JSON object")
	}
	if err := json.Unmarshal(mb, &f.meta); err != nil { // validates the whole block first
		return errorf(f.path, off, "metadata", "%v", err)
	}
	if k, err := repeatedKey(mb, shallowKeys); err != nil || k != "" {
		if err != nil {
			return errorf(f.path, off, "metadata", "%v", err)
		}
		return errorf(f.path, off, "metadata", "key %s repeats (spec §4: keys must not repeat within an object)", k)
	}
	if err := f.meta.Validate(); err != nil {
		return errorf(f.path, off, "metadata", "%v", err)
	}
	return nil
}

// parseDirectory decodes and checks every directory entry (spec §5, §7.6).
func (f *File) parseDirectory(db []byte) error {
	base := int64(f.DirectoryOffset)
	if uint64(f.TensorCount) > uint64(len(db))/minEntrySize {
		return errorf(f.path, offTensorCount, "tensor_count",
			"%d entries cannot fit in a %d-byte directory", f.TensorCount, len(db))
	}
	f.tensors = make([]TensorInfo, 0, f.TensorCount)
	f.byName = make(map[string]int, f.TensorCount)
	le := binary.LittleEndian
	p := 0 // read position in db
	// need reports a truncated entry when fewer than n bytes remain.
	need := func(i int, what string, n uint64) error {
		if uint64(len(db)-p) < n {
			return errorf(f.path, base+int64(p), fmt.Sprintf("directory[%d] %s", i, what),
				"entry runs past the end of the directory (%d bytes left, %d needed)", len(db)-p, n)
		}
		return nil
	}
	for i := 0; i < int(f.TensorCount); i++ {
		entryOff := base + int64(p)
		if err := need(i, "name_length", 4); err != nil {
			return err
		}
		nameLen := uint64(le.Uint32(db[p:]))
		p += 4
		if nameLen == 0 || nameLen > MaxNameLen {
			return errorf(f.path, entryOff, fmt.Sprintf("directory[%d] name_length", i), "%d is not in [1, %d]", nameLen, MaxNameLen)
		}
		if err := need(i, "name", nameLen); err != nil {
			return err
		}
		name := string(db[p : p+int(nameLen)])
		p += int(nameLen)
		if !utf8.ValidString(name) {
			return errorf(f.path, entryOff+4, fmt.Sprintf("directory[%d] name", i), "%q is not valid UTF-8", name)
		}
		field := func(s string) string { return fmt.Sprintf("tensor %q %s", name, s) }
		if _, dup := f.byName[name]; dup {
			return errorf(f.path, entryOff, field("name"), "duplicate name (also directory[%d])", f.byName[name])
		}
		if err := need(i, "dtype", 8); err != nil {
			return err
		}
		dtype := le.Uint32(db[p:])
		if dtype > math.MaxUint8 || !DType(dtype).Known() {
			return errorf(f.path, base+int64(p), field("dtype"), "unknown dtype code %d", dtype)
		}
		ndim := uint64(le.Uint32(db[p+4:]))
		p += 8
		if ndim > MaxDims {
			return errorf(f.path, base+int64(p-4), field("ndim"), "%d dimensions, at most %d allowed", ndim, MaxDims)
		}
		if err := need(i, "shape", ndim*8+8+8+4); err != nil {
			return err
		}
		dims := make([]uint64, ndim)
		for d := range dims {
			dims[d] = le.Uint64(db[p:])
			p += 8
		}
		t := TensorInfo{Name: name, DType: DType(dtype), Shape: make([]int, ndim), entryOff: entryOff}
		want, why := byteSize(dims, t.DType)
		if why != "" {
			return errorf(f.path, base+int64(p)-int64(8*ndim), field("shape"), "shape %v of %v: %s", dims, t.DType, why)
		}
		for d, v := range dims {
			t.Shape[d] = int(v)
		}
		off, n := le.Uint64(db[p:]), le.Uint64(db[p+8:])
		t.CRC32C = le.Uint32(db[p+16:])
		if off%uint64(f.Alignment) != 0 {
			return errorf(f.path, base+int64(p), field("offset"), "data offset %d is not a multiple of the alignment %d", off, f.Alignment)
		}
		if n != uint64(want) {
			return errorf(f.path, base+int64(p+8), field("length"), "%d bytes, but shape %v of %v holds %d", n, t.Shape, t.DType, want)
		}
		if off < HeaderSize || off > f.FileSize || n > f.FileSize-off {
			return errorf(f.path, base+int64(p), field("offset"), "data [%d, +%d) is not within [%d, %d), the file after the header",
				off, n, HeaderSize, f.FileSize)
		}
		t.Offset, t.Length = int64(off), int64(n)
		p += 8 + 8 + 4
		f.byName[name] = len(f.tensors)
		f.tensors = append(f.tensors, t)
	}
	if p != len(db) {
		return errorf(f.path, base+int64(p), "directory_length", "%d bytes follow the last of %d entries", len(db)-p, f.TensorCount)
	}
	return nil
}

// checkOverlaps checks that the header, metadata, directory and the tensors'
// data are pairwise disjoint (spec §7.7). Empty regions overlap nothing.
func (f *File) checkOverlaps() error {
	type region struct {
		off, end int64
		what     string
		at       int64 // offset of the field that placed it
	}
	rs := []region{
		{0, HeaderSize, "the header", 0},
		{int64(f.MetadataOffset), int64(f.MetadataOffset + f.MetadataLength), "the metadata", offMetaOff},
		{int64(f.DirectoryOffset), int64(f.DirectoryOffset + f.DirectoryLength), "the directory", offDirOff},
	}
	for _, t := range f.tensors {
		rs = append(rs, region{t.Offset, t.Offset + t.Length, fmt.Sprintf("tensor %q", t.Name), t.entryOff})
	}
	kept := rs[:0]
	for _, r := range rs {
		if r.end > r.off {
			kept = append(kept, r)
		}
	}
	rs = kept
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].off < rs[j].off })
	for i := 1; i < len(rs); i++ {
		if a, b := rs[i-1], rs[i]; b.off < a.end {
			return errorf(f.path, b.at, b.what+" region", "[%d, %d) overlaps %s at [%d, %d)", b.off, b.end, a.what, a.off, a.end)
		}
	}
	return nil
}

// Path returns the path given to Open, or the name given to NewFile.
func (f *File) Path() string { return f.path }

// Size returns the file's length in bytes.
func (f *File) Size() int64 { return int64(f.FileSize) }

// Bytes returns the whole file as mapped (or as given to NewFile): read-only,
// valid until Close. Its length is what the file contributes to mapped
// memory; its address range is what a GPU runtime registers.
func (f *File) Bytes() []byte { return f.data }

// Metadata returns the decoded metadata block. Its raw JSON fields are copies
// and stay valid after Close.
func (f *File) Metadata() Metadata { return f.meta }

// RawMetadata returns a copy of the metadata block's JSON bytes.
func (f *File) RawMetadata() []byte {
	if f.data == nil {
		return nil
	}
	return bytes.Clone(f.data[f.MetadataOffset : f.MetadataOffset+f.MetadataLength])
}

// Tensors returns the directory in file order: each tensor's name, dtype,
// shape, data offset and length in bytes, and CRC-32C. The slice is a copy.
func (f *File) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(f.tensors))
	for i, t := range f.tensors {
		t.Shape = append([]int(nil), t.Shape...)
		out[i] = t
	}
	return out
}

// Info returns the directory entry of the named tensor; ok is false when the
// file holds none.
func (f *File) Info(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	t := f.tensors[i]
	t.Shape = append([]int(nil), t.Shape...)
	return t, true
}

// Has reports whether the file holds a tensor of that name.
func (f *File) Has(name string) bool { _, ok := f.byName[name]; return ok }

// Tensor returns a zero-copy view of the named tensor: Data aliases the
// mapped file (read-only; writing to it faults), valid until Close. The
// checksum is not verified (see VerifyTensor). A missing name gives an error
// wrapping ErrNotFound that names the tensor and the file.
func (f *File) Tensor(name string) (Tensor, error) {
	if f.data == nil {
		return Tensor{}, fmt.Errorf("%s: tensor %q: %w", f.path, name, ErrClosed)
	}
	i, ok := f.byName[name]
	if !ok {
		return Tensor{}, fmt.Errorf("%s: tensor %q: %w", f.path, name, ErrNotFound)
	}
	t := &f.tensors[i]
	end := t.Offset + t.Length
	return Tensor{
		Name:  t.Name,
		DType: t.DType,
		Shape: append([]int(nil), t.Shape...),
		Data:  f.data[t.Offset:end:end],
	}, nil
}

// VerifyTensor recomputes the named tensor's CRC-32C over its data (reading
// it all from disk) and returns a *FormatError naming it on a mismatch.
func (f *File) VerifyTensor(name string) error {
	if f.data == nil {
		return fmt.Errorf("%s: tensor %q: %w", f.path, name, ErrClosed)
	}
	i, ok := f.byName[name]
	if !ok {
		return fmt.Errorf("%s: tensor %q: %w", f.path, name, ErrNotFound)
	}
	return f.verify(&f.tensors[i])
}

func (f *File) verify(t *TensorInfo) error {
	if sum := Checksum(f.data[t.Offset : t.Offset+t.Length]); sum != t.CRC32C {
		return errorf(f.path, t.Offset, fmt.Sprintf("tensor %q data", t.Name),
			"checksum 0x%08x does not match stored 0x%08x: the data is corrupt", sum, t.CRC32C)
	}
	return nil
}

// Verify recomputes every tensor's CRC-32C in directory order and returns a
// *FormatError naming the first tensor whose data does not match. It reads
// the whole file; Open does not (spec §7).
//
// A memory fault while reading (the mapped file was truncated underneath)
// is an error saying so, not a crash.
func (f *File) Verify() (err error) {
	if f.data == nil {
		return fmt.Errorf("%s: %w", f.path, ErrClosed)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%s: file changed or was truncated while mapped (a read at address %#x faulted)", f.path, a.Addr())
		}
	}()
	for i := range f.tensors {
		if err := f.verify(&f.tensors[i]); err != nil {
			return err
		}
	}
	return nil
}

// Close releases the file's mapping (for a File from Open); tensor views
// must not be used afterwards. Closing twice is harmless.
func (f *File) Close() error {
	data := f.data
	f.data = nil
	if data == nil || f.unmap == nil {
		return nil
	}
	if err := f.unmap(data); err != nil {
		return fmt.Errorf("%s: unmap: %w", f.path, err)
	}
	return nil
}
