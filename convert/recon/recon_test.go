package recon

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrorMatchesResiduals: the held-out error computed from a fold's
// moments (Error) equals the residual Σ‖y_ℛ − Δ·a_𝒦 − b‖² summed token by
// token, for the fit Solve returns, within 1e-9 relative; Bias is the mean
// of y_ℛ; and Both never does worse in sample than Bias.
func TestErrorMatchesResiduals(t *testing.T) {
	const H, N, T = 5, 9, 200
	rng := rand.New(rand.NewPCG(1, 2))
	down := make([]float32, H*N)
	for i := range down {
		down[i] = float32(rng.NormFloat64())
	}
	kept := []int32{7, 0, 3, 5, 1}
	l, err := NewLayer(kept, down, H, N)
	require.NoError(t, err)
	acts := make([][]float32, T)
	for t := range acts {
		acts[t] = make([]float32, N)
		for n := range acts[t] {
			acts[t][n] = float32(rng.NormFloat64() + 0.3*float64(n%3))
		}
		acts[t][2] = 0.5*acts[t][7] - acts[t][0] // a dropped neuron the kept ones predict
		l.Observe(t%2, acts[t], 1)
	}
	fit, err := l.Solve(Both)
	require.NoError(t, err)
	K := len(kept)
	direct := func(fold int, delta, bias []float64) (e, mean float64) {
		for t, a := range acts {
			if t%2 != fold {
				continue
			}
			for h := 0; h < H; h++ {
				var y float64
				for n := 0; n < N; n++ {
					if n != 7 && n != 0 && n != 3 && n != 5 && n != 1 {
						y += float64(a[n]) * float64(down[h*N+n])
					}
				}
				mean += y
				d := y
				if bias != nil {
					d -= bias[h]
				}
				for j, n := range kept {
					if delta != nil {
						d -= delta[h*K+j] * float64(a[n])
					}
				}
				e += d * d
			}
		}
		return e, mean
	}
	for fold := 0; fold < 2; fold++ {
		want, _ := direct(fold, fit.Delta, fit.Bias)
		require.InEpsilon(t, want, Error(&l.Folds[fold], fit.Delta, fit.Bias, K), 1e-9)
		plain, _ := direct(fold, nil, nil)
		require.InEpsilon(t, plain, Error(&l.Folds[fold], nil, nil, K), 1e-9)
	}
	b, err := l.Solve(Bias)
	require.NoError(t, err)
	var sum [H]float64
	for _, a := range acts {
		for h := 0; h < H; h++ {
			for n := 0; n < N; n++ {
				if n == 2 || n == 4 || n == 6 || n == 8 {
					sum[h] += float64(a[n]) * float64(down[h*N+n])
				}
			}
		}
	}
	for h := range sum {
		require.InDelta(t, sum[h]/T, b.Bias[h], 1e-9*math.Max(1, math.Abs(sum[h]/T)))
	}
	var both, bias float64
	for fold := 0; fold < 2; fold++ {
		e1, _ := direct(fold, fit.Delta, fit.Bias)
		e2, _ := direct(fold, nil, b.Bias)
		both, bias = both+e1, bias+e2
	}
	require.Less(t, both, bias)
}
