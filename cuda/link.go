//go:build cuda && !cudaportable && !cudaemu

package cuda

// Link libsinfcuda (make cuda: cuda/build/libsinfcuda.a) with the shared CUDA
// runtime and cuBLAS (Debian's nvidia-cuda-dev, or /usr/local/cuda).

/*
#cgo LDFLAGS: -L${SRCDIR}/build -lsinfcuda -L/usr/local/cuda/lib64 -lcublas -lcudart -lstdc++ -lm
*/
import "C"
