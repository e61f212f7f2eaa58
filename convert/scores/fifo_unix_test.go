//go:build unix

package scores

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadRefusesFIFO: a FIFO given as a score file is refused at once
// (opening it would block until a writer came).
func TestReadRefusesFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(p, 0o644))
	_, err := Read(p)
	require.EqualError(t, err, p+": is a FIFO (named pipe), not a regular file")
}
