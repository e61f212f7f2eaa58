package kernels

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// DefaultThreads returns the thread count a pool takes when none is given:
// the physical cores this process may run on. That is the CPUs in its
// affinity mask (runtime.NumCPU), counted once per core where the kernel
// reports SMT siblings (/sys/devices/system/cpu/cpuN/topology), and at most
// GOMAXPROCS, which Go sets from a cgroup CPU quota (container limits).
// A decode step reads the weights once across its threads, so a second
// thread on a core's sibling adds no bandwidth but does add a worker to wait for.
func DefaultThreads() int {
	n := physicalCores("/sys/devices/system/cpu", allowedCPUs())
	return max(1, min(n, runtime.GOMAXPROCS(0)))
}

// MaxThreads is the most threads a command accepts: four per CPU the process
// may use. More cannot run at once, and each costs a goroutine that must be
// scheduled before its chunks are done.
func MaxThreads() int { return 4 * runtime.NumCPU() }

// allowedCPUs lists the CPUs of this process's affinity mask, from
// /proc/self/status (Linux); nil where that is unreadable.
func allowedCPUs() []int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return parseCPUList(strings.TrimSpace(v))
		}
	}
	return nil
}

// parseCPUList parses the kernel's CPU list format ("0-3,8,10-11"); nil when
// it is malformed.
func parseCPUList(s string) []int {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// physicalCores counts the distinct cores among cpus by their sibling lists
// in sysfs (sys: /sys/devices/system/cpu); it returns runtime.NumCPU() when
// cpus is nil or a CPU's topology is unreadable (not Linux, or a restricted
// sysfs).
func physicalCores(sys string, cpus []int) int {
	if cpus == nil {
		return runtime.NumCPU()
	}
	cores := map[string]bool{}
	for _, c := range cpus {
		dir := sys + "/cpu" + strconv.Itoa(c) + "/topology/"
		b, err := os.ReadFile(dir + "core_cpus_list")
		if err != nil {
			if b, err = os.ReadFile(dir + "thread_siblings_list"); err != nil {
				return runtime.NumCPU()
			}
		}
		cores[strings.TrimSpace(string(b))] = true
	}
	return len(cores)
}
