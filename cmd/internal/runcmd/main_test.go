package runcmd_test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain keeps the tests' verify cache (runtime.DefaultVerifyCache) out
// of the user's cache folder.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sinf-verify-cache")
	if err != nil {
		panic(err)
	}
	os.Setenv("SINF_VERIFY_CACHE", filepath.Join(dir, "verified"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
