package format

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestOpenAdvisesHugePages: Open's mapping carries MADV_HUGEPAGE (the "hg"
// flag of its /proc/self/smaps entry), so a kernel with large folios maps
// the weights it reads from disk with 2 MiB pages (mmap_linux.go).
func TestOpenAdvisesHugePages(t *testing.T) {
	path := writeFile(t, t.TempDir(), "h.sinf", testMeta(), 0, samples())
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.NotNil(t, f.unmap, "mapped")
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(f.data)))
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
			require.Contains(t, strings.Fields(flags), "hg", "VmFlags of the mapping at %#x: %s", addr, flags)
			return
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("no /proc/self/smaps entry holds the mapping at %#x", addr)
}
