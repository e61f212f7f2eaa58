//go:build !unix

package format

import "fmt"

// Open reads the .sinf file at path into memory (this platform has no mmap
// support here) and validates it as the unix Open does.
func Open(path string) (*File, error) { return ReadFile(path) }

// Advice is a hint about how mapped pages will be used; ignored here.
type Advice int

const (
	AdviceNormal Advice = iota
	AdviceSequential
	AdviceRandom
	AdviceWillNeed
	AdviceDontNeed
)

// Advise does nothing on this platform.
func (f *File) Advise(a Advice) error { return nil }

// AdviseTensor does nothing on this platform beyond checking the name.
func (f *File) AdviseTensor(name string, a Advice) error {
	if !f.Has(name) {
		return fmt.Errorf("%s: tensor %q: %w", f.path, name, ErrNotFound)
	}
	return nil
}
