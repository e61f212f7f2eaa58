//go:build cuda && cudaemu && asan

package cuda

// The CPU emulation under AddressSanitizer and UndefinedBehaviorSanitizer
// (go test -asan; make cuda-emu): cuda/build/emu-asan/libsinfcuda.a, the
// kernels and the emulator compiled with -fsanitize=address,undefined.

/*
#cgo LDFLAGS: -L${SRCDIR}/build/emu-asan -lsinfcuda -fsanitize=undefined -lstdc++ -lm -lpthread
*/
import "C"
