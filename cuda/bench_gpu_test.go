//go:build cuda

package cuda

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
)

// Kernel benchmarks at Llama-3.2-1B decode shapes (hidden 2048, N 8192,
// 32 heads / 8 KV heads of 64, vocab 128256; F16 weights; φ = 0.4 of N for
// the gathered FFN kernels). Each reports the bytes it must move per call
// divided by the device time (GB/s) and that as a fraction of the measured
// device-to-device copy bandwidth (of-copy-bw): the roofline of a
// bandwidth-bound decode kernel.
//
//	go test -tags cuda -run '^$' -bench . ./cuda/

var (
	copyBWOnce sync.Once
	copyBW     float64
	copyBWErr  error
)

func copyBandwidth(b *testing.B) float64 {
	copyBWOnce.Do(func() { copyBW, copyBWErr = CopyBandwidth(0, 1<<30, 10) })
	require.NoError(b, copyBWErr)
	return copyBW
}

// benchKernel times b.N launches of run on the device and reports GB/s for
// bytes moved per launch.
func benchKernel(b *testing.B, d *device, bytes float64, run func()) (seconds float64) {
	bw := copyBandwidth(b)
	run() // warm up
	require.NoError(b, d.sync())
	b.ResetTimer()
	require.NoError(b, d.timerStart())
	for i := 0; i < b.N; i++ {
		run()
	}
	sec, err := d.timerStop()
	require.NoError(b, err)
	b.StopTimer()
	per := sec / float64(b.N)
	gbps := bytes / per / 1e9
	b.ReportMetric(per*1e6, "us/call")
	b.ReportMetric(gbps, "GB/s")
	b.ReportMetric(gbps*1e9/bw, "of-copy-bw")
	return per
}

func BenchmarkCopyBandwidth(b *testing.B) {
	if err := Available(); err != nil {
		b.Skipf("no GPU: %v", err)
	}
	for i := 0; i < b.N; i++ {
		_ = i
	}
	b.ReportMetric(copyBandwidth(b)/1e9, "GB/s")
}

func BenchmarkKernels(b *testing.B) {
	p := newPair(b)
	d := p.gpu
	rng := rand.New(rand.NewPCG(1, 2))
	const (
		H, N, V       = 2048, 8192, 128256
		heads, kv, hd = 32, 8, 64
		ctx           = 1024
	)
	f16 := format.F16
	alloc := func(n int) Ptr {
		ptr, err := d.alloc(4 * n)
		require.NoError(b, err)
		b.Cleanup(func() { d.free(ptr) })
		return ptr
	}
	upload := func(v []float32) Ptr {
		ptr := alloc(len(v))
		require.NoError(b, d.upload(ptr, f32Bytes(v)))
		return ptr
	}
	w := func(rows, cols int) weight { return p.weights(rng, f16, rows, cols).g }
	phiN := 3277 // round(0.4·8192)
	rows := alloc(phiN)
	require.NoError(b, d.upload(rows, i32Bytes(randRows(rng, phiN, N))))
	x, xN := upload(randVec(rng, H, 1)), upload(randVec(rng, N, 1))
	out := alloc(max(V, N))
	qkv, wo := w(H, H), w(H, H)
	gate, up, downT := w(N, H), w(N, H), w(N, H)
	head := w(V, H)
	const h2 = 2 // bytes per F16 weight

	b.Run("matvec-q-2048x2048", func(b *testing.B) {
		benchKernel(b, d, float64(H*H*h2+4*H+4*H), func() { d.matvec(out, qkv, 0, H, x, 0, false) })
	})
	b.Run("matvec-o-accumulate", func(b *testing.B) {
		benchKernel(b, d, float64(H*H*h2+4*H+8*H), func() { d.matvec(out, wo, 0, H, x, 0, true) })
	})
	b.Run("matvec-lmhead-128256x2048", func(b *testing.B) {
		benchKernel(b, d, float64(V*H*h2+4*H+4*V), func() { d.matvec(out, head, 0, V, x, 0, false) })
	})
	b.Run("gate-up-dense-8192", func(b *testing.B) {
		benchKernel(b, d, float64(2*N*H*h2+4*H+4*N), func() { d.gateUp(out, gate, up, 0, N, x) })
	})
	b.Run("gate-up-gathered-phi0.4", func(b *testing.B) {
		benchKernel(b, d, float64(2*phiN*H*h2+4*H+8*phiN), func() { d.gateUp(out, gate, up, rows, phiN, x) })
	})
	b.Run("add-rows-dense-8192", func(b *testing.B) {
		benchKernel(b, d, float64(N*H*h2+4*N+8*H), func() { d.addRows(out, downT, 0, N, xN, true) })
	})
	b.Run("add-rows-gathered-phi0.4", func(b *testing.B) {
		benchKernel(b, d, float64(phiN*H*h2+8*phiN+8*H), func() { d.addRows(out, downT, rows, phiN, xN, true) })
	})
	// The block dtypes' decode products: bytes are the rows' blocks (34 or
	// 18 per 32 weights) plus x, its int8 blocks (written and read) and the
	// output.
	for _, dt := range []format.DType{format.Q8_0, format.Q4_0} {
		_, bb := dt.Block()
		rowBytes := float64(H / 32 * bb)
		qw := func(rows int) weight { return p.weights(rng, dt, rows, H).g }
		qkvQ, gateQ, upQ, downQ := qw(H), qw(N), qw(N), qw(N)
		xq := float64(4*H + 2*(H+4*H/32))
		b.Run("matvec-q-2048x2048-"+dt.String(), func(b *testing.B) {
			benchKernel(b, d, float64(H)*rowBytes+xq+4*H, func() { d.matvec(out, qkvQ, 0, H, x, 0, false) })
		})
		b.Run("gate-up-gathered-phi0.4-"+dt.String(), func(b *testing.B) {
			benchKernel(b, d, 2*float64(phiN)*rowBytes+xq+8*float64(phiN), func() { d.gateUp(out, gateQ, upQ, rows, phiN, x) })
		})
		b.Run("add-rows-gathered-phi0.4-"+dt.String(), func(b *testing.B) {
			benchKernel(b, d, float64(phiN)*rowBytes+8*float64(phiN)+8*H, func() { d.addRows(out, downQ, rows, phiN, xN, true) })
		})
	}
	kc, vc := upload(randVec(rng, ctx*kv*hd, 1)), upload(randVec(rng, ctx*kv*hd, 1))
	q := upload(randVec(rng, heads*hd, 1))
	b.Run("attention-decode-ctx1024", func(b *testing.B) {
		benchKernel(b, d, float64(2*ctx*kv*hd*4+8*heads*hd), func() { d.attention(out, q, kc, vc, ctx-1, 1, heads, kv, hd) })
	})
	norm := upload(randVec(rng, H, 1))
	b.Run("rmsnorm-2048", func(b *testing.B) {
		benchKernel(b, d, float64(3*4*H), func() { d.rmsnorm(out, x, norm, 1, H, 1e-5) })
	})
	logits := upload(randVec(rng, V, 1))
	b.Run("argmax-128256", func(b *testing.B) {
		benchKernel(b, d, float64(4*V), func() { d.argmax(out, logits, V) })
	})
	const T = 128
	xT := upload(randVec(rng, T*H, 1))
	yT := alloc(T * N)
	b.Run("gemm-prefill-T128-8192x2048", func(b *testing.B) {
		per := benchKernel(b, d, float64(N*H*h2+4*T*H+4*T*N), func() { d.gemm(yT, gate, xT, T, 0, false) })
		b.ReportMetric(2*T*N*H/per/1e12, "TFLOP/s")
	})
	act := upload(randVec(rng, T*N, 1))
	counts := alloc(N)
	b.Run("count-top-T128-8192", func(b *testing.B) {
		benchKernel(b, d, float64(4*T*N), func() { d.countTop(counts, act, T, N, 0.2) })
	})
	b.Run("select-top-8192", func(b *testing.B) {
		benchKernel(b, d, float64(4*N+4*phiN), func() { d.selectTop(rows, counts, N, 2458, phiN) })
	})
}
