//go:build cuda && cudaportable && !cudaemu

package cuda

// The portable build (make cuda-portable): libsinfcuda built without cuBLAS
// (cuda/build/portable) and the CUDA runtime linked statically, so the
// binaries need only the NVIDIA driver (libcuda.so) where they run: they can
// be built on a machine with no GPU and carried to one with another CUDA
// version.

/*
#cgo LDFLAGS: -L${SRCDIR}/build/portable -lsinfcuda -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm
*/
import "C"
