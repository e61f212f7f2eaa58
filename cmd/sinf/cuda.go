//go:build cuda

package main

import (
	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/cuda"
)

// --device cuda for sinf run (and any command using runcmd.NewGenerator):
// the GPU backend of the cuda package (make cuda).
func init() {
	runcmd.RegisterDevice("cuda", func(l *runcmd.Loaded, o runcmd.DeviceOptions) (runcmd.Backend, runcmd.DeviceInfo, error) {
		s, err := cuda.Open(l.Model, cuda.Options{Context: o.Context, Mapped: o.Mapped})
		if err != nil {
			return nil, runcmd.DeviceInfo{}, err
		}
		info := s.Info()
		return s, runcmd.DeviceInfo{Name: "cuda", GPU: info.GPU, Weights: info.Weights}, nil
	})
}
