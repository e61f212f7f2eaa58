// Package sharedtest locates the read-only ../shared material (models,
// tokenizers, data, golden values) for tests. It is imported by tests only.
package sharedtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Root returns the absolute path of the shared folder: $SINF_SHARED when set,
// else ../shared beside the repository root. When it does not exist the test
// is skipped with a message (a newcomer's checkout has no ../shared; CI does).
func Root(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SINF_SHARED")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "..", "..", "shared")
	}
	dir, _ = filepath.Abs(dir)
	if _, err := os.Stat(filepath.Join(dir, "models")); err != nil {
		t.Skipf("shared material not found at %s (set SINF_SHARED): %v", dir, err)
	}
	return dir
}

// Path joins elements onto Root.
func Path(t testing.TB, elem ...string) string {
	t.Helper()
	return filepath.Join(append([]string{Root(t)}, elem...)...)
}
