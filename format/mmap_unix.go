//go:build unix

package format

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// Open maps the .sinf file at path read-only (one shared mapping of the
// whole file; pages load on first touch) and validates its header, metadata
// and directory (spec §7) before returning. It does not read tensor data or
// verify tensor checksums (see Verify). A malformed file gives a
// *FormatError naming the path, field and offset; Close unmaps.
func Open(path string) (*File, error) {
	if err := CheckRegular(path); err != nil { // before os.Open, which blocks on a FIFO
		return nil, err
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close() // the mapping outlives the descriptor
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	size := st.Size()
	if size < HeaderSize {
		// Too short to map usefully (and mmap refuses length 0): read it so
		// parse reports the exact problem.
		b := make([]byte, max(size, 0))
		if _, err := fd.ReadAt(b, 0); err != nil && size > 0 {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return parse(b, path)
	}
	if uint64(size) > math.MaxInt {
		return nil, &FormatError{Path: path, Field: "file_size", Msg: fmt.Sprintf("%d bytes cannot be mapped on this platform", size)}
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	adviseHuge(data)
	f, err := parse(data, path)
	if err != nil {
		unix.Munmap(data)
		return nil, err
	}
	f.unmap, f.info = unix.Munmap, st
	return f, nil
}

// Advice is a hint to the kernel about how mapped pages will be used.
type Advice int

const (
	AdviceNormal     Advice = iota // no special treatment (MADV_NORMAL)
	AdviceSequential               // read ahead aggressively (MADV_SEQUENTIAL)
	AdviceRandom                   // do not read ahead (MADV_RANDOM)
	AdviceWillNeed                 // start reading the pages in now (MADV_WILLNEED)
	AdviceDontNeed                 // drop the pages; they reload from the file on next touch (MADV_DONTNEED)
)

func (a Advice) flag() (int, error) {
	switch a {
	case AdviceNormal:
		return unix.MADV_NORMAL, nil
	case AdviceSequential:
		return unix.MADV_SEQUENTIAL, nil
	case AdviceRandom:
		return unix.MADV_RANDOM, nil
	case AdviceWillNeed:
		return unix.MADV_WILLNEED, nil
	case AdviceDontNeed:
		return unix.MADV_DONTNEED, nil
	}
	return 0, fmt.Errorf("unknown advice %d", a)
}

// Advise applies madvise(2) to the whole mapping. It does nothing for a File
// from NewFile.
func (f *File) Advise(a Advice) error {
	return f.advise(0, int64(len(f.data)), a)
}

// AdviseTensor applies madvise(2) to the pages that hold the named tensor's
// data (rounded out to whole pages). It does nothing for a File from NewFile.
func (f *File) AdviseTensor(name string, a Advice) error {
	i, ok := f.byName[name]
	if !ok {
		return fmt.Errorf("%s: tensor %q: %w", f.path, name, ErrNotFound)
	}
	t := &f.tensors[i]
	return f.advise(t.Offset, t.Offset+t.Length, a)
}

func (f *File) advise(off, end int64, a Advice) error {
	flag, err := a.flag()
	if err != nil {
		return err
	}
	if f.unmap == nil || f.data == nil || end <= off {
		return nil
	}
	page := int64(os.Getpagesize())
	off &^= page - 1
	end = min(alignUp(end, page), int64(len(f.data)))
	if err := unix.Madvise(f.data[off:end], flag); err != nil {
		return fmt.Errorf("%s: madvise: %w", f.path, err)
	}
	return nil
}
