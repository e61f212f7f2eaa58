//go:build purego || !(amd64 || arm64)

package kernels

func cpuPause() {}
