//go:build unix && !linux

package format

// adviseHuge does nothing outside Linux (see mmap_linux.go).
func adviseHuge([]byte) {}
