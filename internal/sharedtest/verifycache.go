package sharedtest

import (
	"os"
	"path/filepath"
	"testing"
)

// MainWithVerifyCache is a TestMain body: it points $SINF_VERIFY_CACHE
// (runtime.DefaultVerifyCache) at a temporary folder, so that tests never
// write to the user's cache folder, runs the tests, removes the folder and
// exits with their code.
func MainWithVerifyCache(m *testing.M) {
	dir, err := os.MkdirTemp("", "sinf-verify-cache")
	if err != nil {
		panic(err)
	}
	os.Setenv("SINF_VERIFY_CACHE", filepath.Join(dir, "verified"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
