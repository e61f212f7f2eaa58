package kernels

import (
	"fmt"
	"github.com/selectinfer/sinf/format"
	"testing"
)

func BenchmarkZZCall(b *testing.B) {
	for _, rows := range []int{16, 64} {
		for _, n := range []int{1, 2} {
			p := NewPool(n)
			w := make([]float32, rows*576)
			_ = w
			m := Mat{DType: format.F32, Rows: rows, Cols: 576, Data: make([]byte, rows*576*4)}
			x := make([]float32, 576)
			dst := make([]float32, rows)
			b.Run(fmt.Sprintf("rows=%d/t=%d", rows, n), func(b *testing.B) {
				for range b.N {
					MatVec(p, dst, m, x)
				}
			})
			p.Close()
		}
	}
}
