package format

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHoldWriter is the child process of TestKilledWriter: it starts a
// .sinf file at $SINF_HOLD_PATH, says "ready" and waits to be killed.
func TestHoldWriter(t *testing.T) {
	path := os.Getenv("SINF_HOLD_PATH")
	if path == "" {
		t.Skip("child process of TestKilledWriter")
	}
	w, err := Create(path, testMeta(), 0)
	require.NoError(t, err)
	_ = w
	os.Stdout.WriteString("ready\n")
	select {}
}

// TestKilledWriter: while a writer of a path lives, a second writer of the
// same path fails naming the lock; once it is SIGKILLed (no cleanup runs),
// the next writer removes the temporary file it left and writes the path.
func TestKilledWriter(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.sinf")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldWriter$")
	cmd.Env = append(os.Environ(), "SINF_HOLD_PATH="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	if err := cmd.Start(); errors.Is(err, syscall.ENOEXEC) {
		t.Skipf("the test binary cannot start itself here (%v: an emulator such as qemu-user without binfmt)", err)
	} else {
		require.NoError(t, err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	left, err := filepath.Glob(filepath.Join(dir, ".m.sinf.*.tmp"))
	require.NoError(t, err)
	require.Len(t, left, 1, "the child's temporary file")

	_, err = Create(path, testMeta(), 0)
	require.EqualError(t, err, "sinf create "+path+": another process is writing this file (it holds "+filepath.Join(dir, ".m.sinf.lock")+
		"): wait for it to finish, or write to another path")
	require.ErrorIs(t, err, ErrBusy)

	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	_, err = os.Stat(left[0])
	require.NoError(t, err, "a SIGKILLed writer leaves its temporary file")

	// A file of another path whose name shares the prefix is not touched.
	other := filepath.Join(dir, ".m.sinf.5.123.tmp")
	require.NoError(t, os.WriteFile(other, nil, 0o644))
	w, err := Create(path, testMeta(), 0)
	require.NoError(t, err)
	_, err = os.Stat(left[0])
	require.True(t, os.IsNotExist(err), "the stale temporary file was not removed")
	require.NoError(t, w.Close())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{".m.sinf.5.123.tmp", "m.sinf"}, names, "no lock or temporary file is left")
	_, err = Open(path)
	require.NoError(t, err)
}

// TestCreateMissingFolder: a path in a folder that does not exist fails
// naming the path and its folder, not the lock file CreateTemp would take
// there.
func TestCreateMissingFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none", "m.sinf")
	_, err := Create(path, testMeta(), 0)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "writing "+path+": its folder: ")
	require.NotContains(t, err.Error(), ".lock")
}
