package runtime

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PeakRSS returns the process's peak resident set size in bytes (VmHWM of
// /proc/self/status, Linux), or 0 where that is not available.
func PeakRSS() int64 { return statusBytes("VmHWM:") }

// RSS returns the process's resident set size now in bytes (VmRSS of
// /proc/self/status, Linux), or 0 where that is not available.
func RSS() int64 { return statusBytes("VmRSS:") }

// AnonRSS returns the process's anonymous resident memory in bytes (RssAnon
// of /proc/self/status, Linux: the heap and stacks, without the pages of
// mapped files such as a .sinf), or 0 where that is not available.
func AnonRSS() int64 { return statusBytes("RssAnon:") }

// statusBytes reads a "NAME: N kB" line of /proc/self/status.
func statusBytes(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// ResetPeakRSS resets the process's VmHWM to its current RSS (Linux ≥ 4.0,
// /proc/self/clear_refs); it reports whether that worked.
func ResetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// HumanBytes formats a byte count with a binary unit ("2.22 MiB").
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
