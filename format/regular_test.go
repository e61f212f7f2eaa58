//go:build unix

package format

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenRefusesSpecialFiles (attacker pass): a FIFO given as a .sinf file
// blocked Open forever (os.Open waits for a writer); it, a folder and a
// device are refused at once, naming the path.
func TestOpenRefusesSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "m.sinf")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, err := Open(fifo)
	require.EqualError(t, err, fifo+": is a FIFO (named pipe), not a regular file")
	_, err = ReadFile(fifo)
	require.EqualError(t, err, fifo+": is a FIFO (named pipe), not a regular file")
	dir := t.TempDir()
	_, err = Open(dir)
	require.EqualError(t, err, dir+": is a folder, not a regular file")
	_, err = ReadRegularFile("/dev/zero")
	require.EqualError(t, err, "/dev/zero: is a device, not a regular file")
	_, err = Open(filepath.Join(dir, "missing.sinf"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
