package scores

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadChecksHeader (attacker pass, as issue 16 items 5 and 12 for
// checkpoints): a score file whose header repeats a layer's tensor name
// (the library kept the last entry) or that is another format is refused,
// naming the file, as ErrNotSafetensors.
func TestReadChecksHeader(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.scores")
	require.NoError(t, Write(p, rawFile(rand.New(rand.NewPCG(3, 4)), "t", "t", 2, 8, 10, 2, 1)))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	// Rename layer 1's tensor to layer 0's, in place: the header stays the
	// same length.
	l0, l1 := []byte(`"`+TensorName(0)+`"`), []byte(`"`+TensorName(1)+`"`)
	i := bytes.Index(b, l1)
	require.Positive(t, i)
	copy(b[i:], l0)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	_, err = Read(p)
	require.EqualError(t, err, p+`: header: tensor "`+TensorName(0)+`" is listed twice (a name must be unique; which entry holds the weights is ambiguous)`)
	require.True(t, errors.Is(err, ErrNotSafetensors))

	sinf := filepath.Join(dir, "m.sinf")
	require.NoError(t, os.WriteFile(sinf, append([]byte("SINF\x01\x00\x00\x00"), make([]byte, 64)...), 0o644))
	_, err = Read(sinf)
	require.EqualError(t, err, sinf+": not a score file: it is a .sinf model file (score files come from sinf profile and sinf merge)")
}
