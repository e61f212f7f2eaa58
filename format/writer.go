package format

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"
)

// Writer streams a .sinf file to disk (spec/sinf.md §3, §6). It holds one
// tensor's bookkeeping at a time, never the tensors: data goes through a
// buffer to a temporary file in the destination's folder while its CRC-32C
// is computed; Close appends the directory, fills in the header, syncs and
// renames the temporary file over the destination. Until Close succeeds the
// destination is untouched, so a failed or interrupted write leaves no
// partial file and any older file at the path intact.
//
// Any error from a method is sticky: the temporary file is removed at once
// and every later call returns the same error. A Writer is not safe for
// concurrent use.
type Writer struct {
	path  string
	tmp   *os.File
	buf   *bufio.Writer
	align int64
	pos   int64 // bytes written so far: the offset of the next byte

	// release drops path's write lock (CreateTemp) once the temporary file
	// is renamed or removed.
	release func()

	hdr     Header
	entries []TensorInfo
	names   map[string]struct{}
	cur     *tensorWriter // the tensor being written, or nil
	err     error
	closed  bool
	// sliced is the metadata's selection range [lo, hi) (empty: none), for
	// FlagFFNBias.
	sliced [2]int
}

// writeChunk is the Writer's buffer: the file goes out in writes of 4 MiB at
// offsets that are multiples of 4 MiB (but the last), so on a Linux whose
// filesystem caches files in large folios (ext4 and xfs since 6.x) the
// pages just written are 2 MiB folios, which a runtime mapping the file
// right after conversion maps with one TLB entry each (see mmap_linux.go).
// Written in 1 MiB writes, the same Llama-3.2-1B-shape Q4_0 file decoded at
// 23.5 tokens/s before it was read back from disk and 31.3 after (1 thread,
// AMD EPYC Zen 5, kernel 6.18, ext4); written in 4 MiB writes, 28.4 at once.
const writeChunk = 4 << 20

// Create starts writing a .sinf file that will appear at path when Close
// succeeds. meta is validated (Metadata.Validate) and written first. align is
// the tensor data alignment in bytes: 0 means DefaultAlignment (64);
// otherwise a power of two in [MinAlignment, MaxWriteAlignment].
// The temporary file is ".NAME.<digits>.tmp" in path's folder, and path's
// write lock is held until Close or the first error (CreateTemp: a second
// writer of the same path fails with ErrBusy).
func Create(path string, meta Metadata, align int) (*Writer, error) {
	if align == 0 {
		align = DefaultAlignment
	}
	if align < MinAlignment || align > MaxWriteAlignment || align&(align-1) != 0 {
		return nil, fmt.Errorf("sinf create %s: alignment %d is not a power of two in [%d, %d]", path, align, MinAlignment, MaxWriteAlignment)
	}
	mb, err := MarshalMetadata(meta)
	if err != nil {
		return nil, fmt.Errorf("sinf create %s: %w", path, err)
	}
	tmp, release, err := CreateTemp(path)
	if err != nil {
		return nil, fmt.Errorf("sinf create %s: %w", path, err)
	}
	w := &Writer{
		path:  path,
		tmp:   tmp,
		buf:   bufio.NewWriterSize(tmp, writeChunk),
		align: int64(align),
		names: make(map[string]struct{}),
		hdr: Header{
			Version:        Version,
			Alignment:      uint32(align),
			MetadataOffset: HeaderSize,
			MetadataLength: uint64(len(mb)),
			MetadataCRC:    Checksum(mb),
		},
		release: release,
	}
	if sel := meta.Selection; sel != nil {
		w.sliced = [2]int{sel.FirstLayer, sel.LastLayer}
	}
	// The header is written as zeros now and filled in by Close, so a file
	// cut short before Close fails the magic check.
	if err := w.write(make([]byte, HeaderSize)); err != nil {
		return nil, err
	}
	if err := w.write(mb); err != nil {
		return nil, err
	}
	return w, nil
}

// write appends b to the file, failing the Writer on error.
func (w *Writer) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	n, err := w.buf.Write(b)
	w.pos += int64(n)
	if err != nil {
		return w.fail(fmt.Errorf("sinf write %s: %w", w.path, err))
	}
	return nil
}

// fail records err as the Writer's sticky error and removes the temporary
// file. It returns the sticky error.
func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	w.cleanup()
	return w.err
}

// cleanup closes and removes the temporary file, once.
func (w *Writer) cleanup() {
	if w.tmp != nil {
		name := w.tmp.Name()
		w.tmp.Close()
		os.Remove(name)
		w.tmp = nil
		w.release()
	}
}

// BeginTensor starts a tensor: the caller writes exactly
// product(shape)·dtype.Size() bytes of little-endian row-major data to the
// returned io.Writer, in as many calls as it likes, then calls EndTensor.
// name must be unique, valid UTF-8 of 1..MaxNameLen bytes; dtype known;
// shape at most MaxDims non-negative dimensions (empty for a scalar) whose
// byte size fits an int64. Writing more bytes than the shape holds is an
// error. Tensors are stored in the order they are begun, each at an offset
// that is a multiple of the alignment.
func (w *Writer) BeginTensor(name string, dtype DType, shape []int) (io.Writer, error) {
	if err := w.usable(); err != nil {
		return nil, err
	}
	if w.cur != nil {
		return nil, w.fail(fmt.Errorf("sinf write %s: tensor %q begun before tensor %q ended", w.path, name, w.cur.info.Name))
	}
	size, err := checkTensor(name, dtype, shape)
	if err != nil {
		return nil, w.fail(fmt.Errorf("sinf write %s: %w", w.path, err))
	}
	if _, dup := w.names[name]; dup {
		return nil, w.fail(fmt.Errorf("sinf write %s: tensor %q: duplicate name", w.path, name))
	}
	if pad := alignUp(w.pos, w.align) - w.pos; pad > 0 {
		if err := w.write(make([]byte, pad)); err != nil {
			return nil, err
		}
	}
	w.names[name] = struct{}{}
	w.cur = &tensorWriter{w: w, want: size, info: TensorInfo{
		Name: name, DType: dtype, Shape: append([]int(nil), shape...), Offset: w.pos, Length: size,
	}}
	return w.cur, nil
}

// checkTensor validates a tensor's name, dtype and shape for writing and
// returns its byte length.
func checkTensor(name string, dtype DType, shape []int) (int64, error) {
	if len(name) == 0 || len(name) > MaxNameLen || !utf8.ValidString(name) {
		return 0, fmt.Errorf("tensor %q: name must be valid UTF-8 of 1 to %d bytes", name, MaxNameLen)
	}
	if !dtype.Known() {
		return 0, fmt.Errorf("tensor %q: unknown dtype %v", name, dtype)
	}
	if len(shape) > MaxDims {
		return 0, fmt.Errorf("tensor %q: %d dimensions, at most %d allowed", name, len(shape), MaxDims)
	}
	dims := make([]uint64, len(shape))
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("tensor %q: negative dimension in shape %v", name, shape)
		}
		dims[i] = uint64(d)
	}
	size, why := byteSize(dims, dtype)
	if why != "" {
		return 0, fmt.Errorf("tensor %q: shape %v of %v: %s", name, shape, dtype, why)
	}
	return size, nil
}

// tensorWriter is the io.Writer BeginTensor returns.
type tensorWriter struct {
	w    *Writer
	want int64 // bytes the shape holds
	info TensorInfo
	n    int64 // bytes written so far
}

// Write appends p to the tensor's data, updating its checksum.
func (t *tensorWriter) Write(p []byte) (int, error) {
	w := t.w
	if err := w.usable(); err != nil {
		return 0, err
	}
	if w.cur != t {
		return 0, w.fail(fmt.Errorf("sinf write %s: tensor %q written after EndTensor", w.path, t.info.Name))
	}
	if int64(len(p)) > t.want-t.n {
		return 0, w.fail(fmt.Errorf("sinf write %s: tensor %q: more than the %d bytes shape %v of %v holds",
			w.path, t.info.Name, t.want, t.info.Shape, t.info.DType))
	}
	if err := w.write(p); err != nil {
		return 0, err
	}
	t.info.CRC32C = crc32.Update(t.info.CRC32C, castagnoli, p)
	t.n += int64(len(p))
	return len(p), nil
}

// EndTensor finishes the tensor BeginTensor started; it fails when fewer
// bytes were written than its shape holds.
func (w *Writer) EndTensor() error {
	if err := w.usable(); err != nil {
		return err
	}
	t := w.cur
	if t == nil {
		return w.fail(fmt.Errorf("sinf write %s: EndTensor without BeginTensor", w.path))
	}
	if t.n != t.want {
		return w.fail(fmt.Errorf("sinf write %s: tensor %q: %d bytes written, shape %v of %v holds %d",
			w.path, t.info.Name, t.n, t.info.Shape, t.info.DType, t.want))
	}
	w.entries = append(w.entries, t.info)
	w.cur = nil
	return nil
}

// AddTensor writes one whole tensor: data is product(shape)·dtype.Size()
// bytes of little-endian row-major elements (see BeginTensor for the rules).
func (w *Writer) AddTensor(name string, dtype DType, shape []int, data []byte) error {
	tw, err := w.BeginTensor(name, dtype, shape)
	if err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	return w.EndTensor()
}

// usable returns the sticky error, or an error after Close or Abort.
func (w *Writer) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return fmt.Errorf("sinf write %s: writer is closed", w.path)
	}
	return nil
}

// Close finishes the file: it writes the tensor directory after the last
// tensor, fills in the header, syncs the data to disk and atomically renames
// the temporary file over path (then syncs the folder). On any error, or if a
// tensor is still open, the temporary file is removed, path is untouched and
// the error is returned. Close after Close or Abort returns an error.
func (w *Writer) Close() error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.cur != nil {
		return w.fail(fmt.Errorf("sinf write %s: Close with tensor %q still open", w.path, w.cur.info.Name))
	}
	if uint64(len(w.entries)) > 1<<32-1 {
		return w.fail(fmt.Errorf("sinf write %s: %d tensors, at most %d allowed", w.path, len(w.entries), uint32(1<<32-1)))
	}
	var dir []byte
	for i := range w.entries {
		dir = encodeEntry(dir, &w.entries[i])
	}
	h := &w.hdr
	for i := range w.entries {
		if l, ok := downBiasLayer(w.entries[i].Name); ok && l >= w.sliced[0] && l < w.sliced[1] {
			h.Flags |= FlagFFNBias // a sliced layer's output bias (spec §6.2)
		}
	}
	h.DirectoryOffset = uint64(w.pos)
	h.DirectoryLength = uint64(len(dir))
	h.DirectoryCRC = Checksum(dir)
	h.TensorCount = uint32(len(w.entries))
	if err := w.write(dir); err != nil {
		return err
	}
	h.FileSize = uint64(w.pos)
	if err := w.buf.Flush(); err != nil {
		return w.fail(fmt.Errorf("sinf write %s: %w", w.path, err))
	}
	if _, err := w.tmp.WriteAt(h.encode(), 0); err != nil {
		return w.fail(fmt.Errorf("sinf write %s: header: %w", w.path, err))
	}
	if err := w.tmp.Chmod(0o644); err != nil {
		return w.fail(fmt.Errorf("sinf write %s: %w", w.path, err))
	}
	if err := w.tmp.Sync(); err != nil {
		return w.fail(fmt.Errorf("sinf write %s: sync: %w", w.path, err))
	}
	name := w.tmp.Name()
	if err := w.tmp.Close(); err != nil {
		return w.fail(fmt.Errorf("sinf write %s: %w", w.path, err))
	}
	w.tmp = nil
	err := os.Rename(name, w.path)
	if err != nil {
		os.Remove(name)
	}
	w.release()
	if err != nil {
		return w.fail(fmt.Errorf("sinf write %s: %w", w.path, err))
	}
	w.closed = true
	syncDir(filepath.Dir(w.path))
	return nil
}

// syncDir makes a rename in dir durable where the platform allows it; errors
// are ignored (some file systems refuse to sync a folder).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// Abort abandons the file: the temporary file is removed and path is left as
// it was. It is safe to call at any time, more than once, and after Close
// (when it does nothing), so `defer w.Abort()` after Create is the idiom.
func (w *Writer) Abort() {
	if w.closed {
		return
	}
	if w.err == nil {
		w.err = errors.New("sinf write " + w.path + ": aborted")
	}
	w.cleanup()
}

// Len returns the number of bytes written so far, i.e. the file offset the
// next byte would get.
func (w *Writer) Len() int64 { return w.pos }
