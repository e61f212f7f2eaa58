//go:build cuda

package runcmd

import (
	"github.com/selectinfer/sinf/cuda"
)

// --device cuda for sinf, sinf-run and any command using NewGenerator: the
// GPU backend of the cuda package, linked only with the cuda build tag
// (make cuda).
func init() {
	RegisterDevice("cuda", func(l *Loaded, o DeviceOptions) (Backend, DeviceInfo, error) {
		s, err := cuda.Open(l.Model, cuda.Options{Context: o.Context, Mapped: o.Mapped})
		if err != nil {
			return nil, DeviceInfo{}, err
		}
		info := s.Info()
		return s, DeviceInfo{Name: "cuda", GPU: info.GPU, Weights: info.Weights}, nil
	})
}
