//go:build !cuda

package cuda

import "errors"

// Built reports whether this binary has the CUDA kernels (the cuda tag).
const Built = false

var errNotBuilt = errors.New("cuda: built without the cuda tag (build with make cuda: go build -tags cuda, after nvcc compiles cuda/build/libsinfcuda.a)")

// Available returns nil when a CUDA device can be used; in this build, an
// error saying the binary was built without the cuda tag.
func Available() error { return errNotBuilt }

// DeviceCount returns 0 and Available's error in this build.
func DeviceCount() (int, error) { return 0, errNotBuilt }

// CopyBandwidth is not available in this build.
func CopyBandwidth(ordinal, bytes, iters int) (float64, error) { return 0, errNotBuilt }

func newBackend(int) (backend, error) { return nil, errNotBuilt }
