package format

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireOnly asserts that dir holds exactly the named files (no temporary
// files left behind).
func requireOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	require.ElementsMatch(t, names, got)
}

func TestAbortKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "m.sinf", testMeta(), 0, samples())
	old, err := os.ReadFile(path)
	require.NoError(t, err)

	w, err := Create(path, Metadata{}, 0)
	require.NoError(t, err)
	require.NoError(t, w.AddTensor("x", F32, []int{2}, make([]byte, 8)))
	tw, err := w.BeginTensor("y", F32, []int{4})
	require.NoError(t, err)
	_, err = tw.Write(make([]byte, 8)) // interrupted mid-tensor
	require.NoError(t, err)
	w.Abort()
	w.Abort() // idempotent

	now, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, old, now, "old file intact")
	requireOnly(t, dir, "m.sinf")
	require.Error(t, w.Close(), "Close after Abort fails")
	require.Error(t, w.AddTensor("z", F32, nil, make([]byte, 4)))
	_, err = Open(path)
	require.NoError(t, err)
}

func TestAbortLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "new.sinf")
	w, err := Create(path, testMeta(), 0)
	require.NoError(t, err)
	require.NoError(t, w.AddTensor("x", BF16, []int{3}, make([]byte, 6)))
	w.Abort()
	requireOnly(t, dir)
}

func TestWriterErrorsLeaveNoFile(t *testing.T) {
	cases := []struct {
		name string
		msg  string
		run  func(w *Writer) error
	}{
		{"too many bytes", "more than the 8 bytes", func(w *Writer) error {
			return w.AddTensor("x", F32, []int{2}, make([]byte, 12))
		}},
		{"too few bytes", "4 bytes written", func(w *Writer) error {
			return w.AddTensor("x", F32, []int{2}, make([]byte, 4))
		}},
		{"duplicate name", "duplicate", func(w *Writer) error {
			if err := w.AddTensor("x", F32, []int{1}, make([]byte, 4)); err != nil {
				return err
			}
			return w.AddTensor("x", F32, []int{1}, make([]byte, 4))
		}},
		{"unknown dtype", "unknown dtype", func(w *Writer) error {
			return w.AddTensor("x", DType(16), []int{1}, make([]byte, 4))
		}},
		{"negative dim", "negative", func(w *Writer) error {
			return w.AddTensor("x", F32, []int{-1}, nil)
		}},
		{"too many dims", "dimensions", func(w *Writer) error {
			return w.AddTensor("x", F32, make([]int, 9), nil)
		}},
		{"huge shape", "too large", func(w *Writer) error {
			return w.AddTensor("x", F32, []int{huge, huge, 4}, nil)
		}},
		{"empty name", "name", func(w *Writer) error {
			return w.AddTensor("", F32, []int{1}, make([]byte, 4))
		}},
		{"nested begin", "begun before", func(w *Writer) error {
			if _, err := w.BeginTensor("a", F32, []int{1}); err != nil {
				return err
			}
			_, err := w.BeginTensor("b", F32, []int{1})
			return err
		}},
		{"end without begin", "without BeginTensor", func(w *Writer) error { return w.EndTensor() }},
		{"close with open tensor", "still open", func(w *Writer) error {
			if _, err := w.BeginTensor("a", F32, []int{1}); err != nil {
				return err
			}
			return w.Close()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, "m.sinf", Metadata{}, 0, samples()[:2])
			old, _ := os.ReadFile(path)

			w, err := Create(path, testMeta(), 0)
			require.NoError(t, err)
			err = c.run(w)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.msg)
			require.Contains(t, err.Error(), path)
			// The error is sticky and the temporary file already gone.
			requireOnly(t, dir, "m.sinf")
			require.Equal(t, err, w.Close())
			now, _ := os.ReadFile(path)
			require.Equal(t, old, now)
		})
	}
}

func TestCreateErrors(t *testing.T) {
	dir := t.TempDir()
	for _, a := range []int{-64, 1, 32, 63, 96, MaxWriteAlignment + 64, math.MaxInt} {
		_, err := Create(filepath.Join(dir, "x.sinf"), Metadata{}, a)
		require.Error(t, err, "alignment %d", a)
		require.Contains(t, err.Error(), "alignment")
	}
	_, err := Create(filepath.Join(dir, "no", "such", "x.sinf"), Metadata{}, 0)
	require.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
	requireOnly(t, dir)
}

func TestWriterLen(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "x.sinf"), Metadata{}, 0)
	require.NoError(t, err)
	defer w.Abort()
	start := w.Len()
	require.NoError(t, w.AddTensor("a", F32, []int{3}, make([]byte, 12)))
	require.Equal(t, alignUp(start, 64)+12, w.Len())
}

func TestOpenNotRegular(t *testing.T) {
	_, err := Open(t.TempDir())
	require.ErrorContains(t, err, "not a regular file")
}
