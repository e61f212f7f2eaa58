package kernels

import (
	"fmt"
	"testing"

	"github.com/selectinfer/sinf/format"
)

func BenchmarkCallCost(b *testing.B) {
	for _, sh := range []benchShape{{"k", 192, 576}, {"q", 576, 576}, {"gate", 1536, 576}} {
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/t%d", sh.name, th), func(b *testing.B) {
				p := NewPool(th)
				defer p.Close()
				w := benchMat(sh, format.Q5_0)
				x, dst := benchVec(w.Cols), make([]float32, w.Rows)
				for b.Loop() {
					MatVec(p, dst, w, x)
				}
			})
		}
	}
}
