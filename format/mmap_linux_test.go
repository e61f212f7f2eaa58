package format

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestOpenAdvisesHugePages: Open's mapping carries MADV_HUGEPAGE (the "hg"
// flag of its /proc/self/smaps entry), so a kernel with large folios maps
// the weights it reads from disk with 2 MiB pages (mmap_linux.go). Where
// the advice shows on no mapping (qemu-user passes it to no kernel; a
// kernel without THP refuses it), an anonymous probe mapping says so and
// the test skips.
func TestOpenAdvisesHugePages(t *testing.T) {
	probe, err := unix.Mmap(-1, 0, 1<<21, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer unix.Munmap(probe)
	if err := unix.Madvise(probe, unix.MADV_HUGEPAGE); err != nil || !slices.Contains(vmFlags(t, probe), "hg") {
		t.Skipf("MADV_HUGEPAGE does not show on an anonymous mapping here (madvise: %v)", err)
	}
	path := writeFile(t, t.TempDir(), "h.sinf", testMeta(), 0, samples())
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.NotNil(t, f.unmap, "mapped")
	require.Contains(t, vmFlags(t, f.data), "hg")
}

// vmFlags returns the VmFlags of the /proc/self/smaps entry of the mapping
// that holds b ("rd", "mr", "hg", …; proc(5)).
func vmFlags(t *testing.T, b []byte) []string {
	t.Helper()
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	sm, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer sm.Close()
	sc := bufio.NewScanner(sm)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if fs := strings.Fields(line); len(fs) > 0 && !strings.HasSuffix(fs[0], ":") { // "lo-hi perms ...": a mapping's first line
			var lo, hi uintptr
			_, err := fmt.Sscanf(fs[0], "%x-%x", &lo, &hi)
			require.NoError(t, err, line)
			in = lo <= addr && addr < hi
			continue
		}
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok && in {
			return strings.Fields(flags)
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("no /proc/self/smaps entry holds the mapping at %#x", addr)
	return nil
}
