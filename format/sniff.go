package format

import (
	"io"
	"os"
)

// IsSinf reports whether the file at path starts with the .sinf magic
// (spec §3.1): commands use it to name a .sinf file given where another kind
// of input was expected, by its first four bytes rather than by reading it.
// Only a regular file is opened (a FIFO would block the open).
func IsSinf(path string) bool {
	if CheckRegular(path) != nil {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [len(Magic)]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == Magic
}
