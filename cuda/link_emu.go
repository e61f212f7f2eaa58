//go:build cuda && cudaemu && !asan

package cuda

// The CPU emulation (make cuda-emu): the kernels of cuda/kernels compiled as
// host C++ against cuda/emu (cuda/build/emu/libsinfcuda.a), no CUDA toolkit,
// no GPU. Device memory is host memory; see cuda/README.md.

/*
#cgo LDFLAGS: -L${SRCDIR}/build/emu -lsinfcuda -lstdc++ -lm -lpthread
*/
import "C"
