package format

import (
	"errors"
	"fmt"
)

// FormatError reports a malformed .sinf file: which file, which field of the
// layout (spec/sinf.md §3–§5) and the byte offset of that field or region.
// Every check that Open, NewFile, Verify and ValidateSelection make returns
// one, so callers can tell a damaged file from an I/O error with errors.As.
type FormatError struct {
	Path  string // the file's path, or the name given to NewFile
	Off   int64  // byte offset in the file of the field or region at fault
	Field string // the field at fault, e.g. "version" or `tensor "lm_head.weight" offset`
	Msg   string // what is wrong, with the values found and expected
}

// Error returns "PATH: FIELD at offset OFF: MSG".
func (e *FormatError) Error() string {
	return fmt.Sprintf("%s: %s at offset %d: %s", e.Path, e.Field, e.Off, e.Msg)
}

// ErrNotFound is wrapped by the error that (*File).Tensor and VerifyTensor
// return for a name the directory does not hold; test it with errors.Is.
var ErrNotFound = errors.New("tensor not found")

// ErrClosed is returned by the methods of a File after Close.
var ErrClosed = errors.New("sinf file is closed")

// errorf builds a *FormatError.
func errorf(path string, off int64, field, format string, args ...any) *FormatError {
	return &FormatError{Path: path, Off: off, Field: field, Msg: fmt.Sprintf(format, args...)}
}
