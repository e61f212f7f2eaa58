//go:build unix

package sthead_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/internal/sharedtest"
)

// TestOpenRefusesFIFO (attacker pass): a FIFO as model.safetensors or
// config.json blocked hf.Open forever; it is refused at once.
func TestOpenRefusesFIFO(t *testing.T) {
	for _, name := range []string{"model.safetensors", "config.json"} {
		dir := t.TempDir()
		for _, f := range []string{"config.json", "model.safetensors"} {
			if f == name {
				require.NoError(t, syscall.Mkfifo(filepath.Join(dir, f), 0o644))
				continue
			}
			b, err := os.ReadFile(sharedtest.Path(t, "models", "stories260k", f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
		}
		_, err := hf.Open(dir)
		require.EqualError(t, err, filepath.Join(dir, name)+": is a FIFO (named pipe), not a regular file")
	}
}
