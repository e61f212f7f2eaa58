// Package sinftest writes altered copies of .sinf files for tests: a file
// whose metadata says something its tensors do not, with checksums that
// match its bytes, so that only the check under test can refuse it. It is
// imported by tests only.
package sinftest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
)

// RewriteMetadata writes src's tensors, unchanged, to a new file out whose
// metadata is src's after edit (spec/sinf.md §4; format.Create computes the
// checksums of the new bytes). It fails the test on any error.
func RewriteMetadata(t testing.TB, src, out string, edit func(*format.Metadata)) {
	t.Helper()
	f, err := format.Open(src)
	require.NoError(t, err)
	defer f.Close()
	meta := f.Metadata()
	edit(&meta)
	w, err := format.Create(out, meta, 0)
	require.NoError(t, err)
	for _, ti := range f.Tensors() {
		tt, err := f.Tensor(ti.Name)
		require.NoError(t, err)
		require.NoError(t, w.AddTensor(tt.Name, tt.DType, tt.Shape, tt.Data))
	}
	require.NoError(t, w.Close())
}
