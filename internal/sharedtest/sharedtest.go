// Package sharedtest locates the read-only ../shared material (models,
// tokenizers, data, golden values) for tests. It is imported by tests only.
package sharedtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// repoRoot is the repository's top folder.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// dir returns the shared folder ($SINF_SHARED, else ../shared beside the
// repository) and whether it exists.
func dir() (string, bool) {
	d := os.Getenv("SINF_SHARED")
	if d == "" {
		d = filepath.Join(repoRoot(), "..", "shared")
	}
	d, _ = filepath.Abs(d)
	_, err := os.Stat(filepath.Join(d, "models"))
	return d, err == nil
}

// Root returns the absolute path of the shared folder, or skips the test with
// a message when it does not exist (a newcomer's checkout has no ../shared;
// CI does).
func Root(t testing.TB) string {
	t.Helper()
	d, ok := dir()
	if !ok {
		t.Skipf("shared material not found at %s (set SINF_SHARED)", d)
	}
	return d
}

// Path joins elem onto the shared folder. Without a shared folder it falls
// back to the same path under the repository's testdata/ (which holds
// models/tinystories-656k and data samples of tinystories, wikitext2 and
// xsum) for paths below a top-level folder, and skips the test when neither
// exists. A top-level folder alone ("data") never falls back: testdata holds
// only part of it.
func Path(t testing.TB, elem ...string) string {
	t.Helper()
	d, ok := dir()
	if ok {
		return filepath.Join(append([]string{d}, elem...)...)
	}
	if len(elem) < 2 {
		t.Skipf("shared material not found at %s (set SINF_SHARED); %s is only partly in testdata", d, filepath.Join(elem...))
	}
	p, _ := filepath.Abs(filepath.Join(append([]string{repoRoot(), "testdata"}, elem...)...))
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared material not found at %s (set SINF_SHARED) and %s is not in testdata", d, filepath.Join(elem...))
	}
	return p
}
