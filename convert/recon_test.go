package convert_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/recon"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
)

// TestReconstructionMatchesFloat64 checks convert --reconstruct both on
// tinystories-656k (γ=0.7 random neurons over both layers, 8 synthetic
// prompts) against an independent float64 reference: the activations come
// from the float64 forward pass (ref64: the dense model for layer 0; for
// layer 1 the model whose layer 0 is the file's reconstructed layer, as the
// sequential calibration sees it), and each fit is solved from the explicit
// per-token data as one augmented ridge system in [Δ, b] (uncentred, the
// intercept unpenalised; Gaussian elimination), not from the package's
// centred moments and Cholesky. The held-out errors of every ridge c are
// summed residuals over the other fold's tokens. Δ and b agree within 1e-3
// relative (Frobenius), the held-out errors within 1e-3, the chosen c is
// the reference's best, and the file stores D_𝒦 + Δ and b exactly as
// float32, with FlagFFNBias and the selection's reconstruction record.
func TestReconstructionMatchesFloat64(t *testing.T) {
	ck, hm := openHF(t, "tinystories-656k")
	c := hm.Config
	N, H := c.Intermediate, c.Hidden
	var prompts [][]int
	for p := 0; p < 8; p++ {
		ids := []int{1}
		for i := 0; i < 50+4*p; i++ {
			ids = append(ids, (97*p+31*i+7)%c.Vocab)
		}
		prompts = append(prompts, ids)
	}
	opt := allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true, Seed: 3,
		Reconstruct: convert.Reconstruct{Method: recon.Both, Prompts: prompts, Tasks: []string{"synthetic"}}})
	f, m, rep := convertFile(t, ck, opt)
	require.NotZero(t, f.Flags&format.FlagFFNBias)
	rec := f.Metadata().Selection.Reconstruction
	require.NotNil(t, rec)
	require.True(t, rec.Bias && rec.Refit)
	var tokens int64
	for _, p := range prompts {
		tokens += int64(len(p))
	}
	require.Equal(t, tokens, rec.Tokens)

	ref := *hm // layers replaced by the file's as the calibration goes
	ref.Layers = append([]runtime.Layer(nil), hm.Layers...)
	for l := 0; l < c.Layers; l++ {
		fit := rep.Fits[l]
		require.NotNil(t, fit, "layer %d", l)
		kept := m.Layers[l].MLP.Index
		K := len(kept)
		in := make([]bool, N)
		for _, n := range kept {
			in[n] = true
		}
		down := make([][]float64, H) // HF down_proj [H, N]
		for h := range down {
			down[h] = row64(hm.Layers[l].MLP.Down, N, h)
		}
		// Per token: a_𝒦 and y_ℛ = Σ_dropped a_n·D[:, n], with its fold.
		type sample struct {
			a, y []float64
			fold int
		}
		var data []sample
		for p, ids := range prompts {
			r := newRef64(&ref)
			r.forward(ids, nil, func(i int, a, g, u []float64) {
				if i != l {
					return
				}
				s := sample{a: make([]float64, K), y: make([]float64, H), fold: p % 2}
				for j, n := range kept {
					s.a[j] = a[n]
				}
				for n := 0; n < N; n++ {
					if !in[n] {
						for h := 0; h < H; h++ {
							s.y[h] += a[n] * down[h][n]
						}
					}
				}
				data = append(data, s)
			})
		}
		// solve fits [Δ, b] on the tokens of fold (−1: all) with ridge c.
		solve := func(fold int, cr float64) (delta [][]float64, bias []float64) {
			var pts []sample
			for _, s := range data {
				if fold < 0 || s.fold == fold {
					pts = append(pts, s)
				}
			}
			n := float64(len(pts))
			mean := make([]float64, K)
			for _, s := range pts {
				for j, v := range s.a {
					mean[j] += v / n
				}
			}
			var tr float64 // trace of the centred covariance
			for _, s := range pts {
				for j, v := range s.a {
					tr += (v - mean[j]) * (v - mean[j]) / n
				}
			}
			lambda := cr * tr / float64(K)
			// Augmented normal equations, unknowns z = [δ_h; b_h] for every
			// h at once: A [K+1, K+1], B [K+1, H].
			A := make([][]float64, K+1)
			B := make([][]float64, K+1)
			for i := range A {
				A[i], B[i] = make([]float64, K+1), make([]float64, H)
			}
			for _, s := range pts {
				x := append(append([]float64(nil), s.a...), 1)
				for i, xi := range x {
					for j, xj := range x {
						A[i][j] += xi * xj
					}
					for h, yh := range s.y {
						B[i][h] += xi * yh
					}
				}
			}
			for i := 0; i < K; i++ {
				A[i][i] += n * lambda
			}
			Z := gauss(A, B)
			delta = make([][]float64, H)
			bias = make([]float64, H)
			for h := 0; h < H; h++ {
				delta[h] = make([]float64, K)
				for j := 0; j < K; j++ {
					delta[h][j] = Z[j][h]
				}
				bias[h] = Z[K][h]
			}
			return delta, bias
		}
		residual := func(fold int, delta [][]float64, bias []float64) (e, plain float64) {
			for _, s := range data {
				if s.fold != fold {
					continue
				}
				for h := 0; h < H; h++ {
					d := s.y[h] - bias[h]
					for j, v := range s.a {
						d -= delta[h][j] * v
					}
					e += d * d
					plain += s.y[h] * s.y[h]
				}
			}
			return e, plain
		}
		best, bestC := math.Inf(1), 0.0
		for i, cr := range recon.Ridges {
			var e, plain float64
			for _, fold := range []int{0, 1} {
				d, b := solve(fold, cr)
				ef, pf := residual(1-fold, d, b)
				e, plain = e+ef, plain+pf
			}
			require.InDelta(t, e/plain, fit.HeldOut[i], 1e-3*max(e/plain, 1e-3), "layer %d c %g held-out error", l, cr)
			if e/plain < best {
				best, bestC = e/plain, cr
			}
		}
		require.Equal(t, bestC, fit.C, "layer %d: chosen ridge", l)
		delta, bias := solve(-1, fit.C)
		var dd, dn, bd, bn float64
		for h := 0; h < H; h++ {
			for j := 0; j < K; j++ {
				e := delta[h][j] - fit.Delta[h*K+j]
				dd, dn = dd+e*e, dn+delta[h][j]*delta[h][j]
			}
			e := bias[h] - fit.Bias[h]
			bd, bn = bd+e*e, bn+bias[h]*bias[h]
		}
		require.Less(t, math.Sqrt(dd/dn), 1e-3, "layer %d: Δ against the float64 reference", l)
		require.Less(t, math.Sqrt(bd/bn), 1e-3, "layer %d: b against the float64 reference", l)
		// The file: row j of down_proj.weight_t is float32(D[:, kept j] + Δ[:, j]).
		f32 := make([]float32, H)
		for j, n := range kept {
			m.Layers[l].MLP.DownT.RowF32(f32, j)
			for h := 0; h < H; h++ {
				require.Equal(t, float32(down[h][n]+fit.Delta[h*K+j]), f32[h], "layer %d row %d col %d", l, j, h)
			}
		}
		for h, b := range fit.Bias {
			require.Equal(t, float32(b), m.Layers[l].MLP.DownBias[h], "layer %d bias %d", l, h)
		}
		require.Less(t, fit.HeldOutBest(), fit.BiasOnly, "layer %d: the refit beats the bias alone", l)
		ref.Layers[l].MLP = m.Layers[l].MLP
	}
}

// gauss solves A·Z = B (A [n, n], B [n, m]) by Gaussian elimination with
// partial pivoting, in float64; A and B are overwritten.
func gauss(A, B [][]float64) [][]float64 {
	n := len(A)
	for col := 0; col < n; col++ {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(A[r][col]) > math.Abs(A[p][col]) {
				p = r
			}
		}
		A[col], A[p] = A[p], A[col]
		B[col], B[p] = B[p], B[col]
		for r := col + 1; r < n; r++ {
			f := A[r][col] / A[col][col]
			if f == 0 {
				continue
			}
			for c := col; c < n; c++ {
				A[r][c] -= f * A[col][c]
			}
			for c := range B[r] {
				B[r][c] -= f * B[col][c]
			}
		}
	}
	for r := n - 1; r >= 0; r-- {
		for c := range B[r] {
			s := B[r][c]
			for k := r + 1; k < n; k++ {
				s -= A[r][k] * B[k][c]
			}
			B[r][c] = s / A[r][r]
		}
	}
	return B
}

// TestReconstructGenerate: with Reconstruct.Generate the calibration takes
// each prompt followed by the tokens the unsliced model samples after it
// (temperature 1, seed convert.ReconstructSeed): the reconstructed tensors
// equal, bit for bit, those of a conversion calibrated on the prompts
// extended beforehand by runtime's own sampling of the HF model; the file
// records the count, and the calibration tokens include them.
func TestReconstructGenerate(t *testing.T) {
	ck, hm := openHF(t, "tinystories-656k")
	var prompts [][]int
	for p := 0; p < 4; p++ {
		ids := []int{1}
		for i := 0; i < 20+3*p; i++ {
			ids = append(ids, (97*p+31*i+7)%hm.Config.Vocab)
		}
		prompts = append(prompts, ids)
	}
	const gen = 16
	opt := func(p [][]int, g int) convert.Options {
		return allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true, Seed: 3,
			Reconstruct: convert.Reconstruct{Method: recon.Both, Prompts: p, Tasks: []string{"synthetic"}, Generate: g}})
	}
	f, _, _ := convertFile(t, ck, opt(prompts, gen))
	rec := f.Metadata().Selection.Reconstruction
	require.Equal(t, gen, rec.Generated)

	s := hm.NewSession(pool(t), 0)
	smp := runtime.NewSampler(1, 0, 1, convert.ReconstructSeed)
	var extended [][]int
	var tokens int64
	for _, p := range prompts {
		s.Reset()
		res, err := s.Generate(p, runtime.GenerateOptions{MaxTokens: gen, Sampler: smp})
		require.NoError(t, err)
		require.Len(t, res.IDs, gen)
		extended = append(extended, append(append([]int(nil), p...), res.IDs...))
		tokens += int64(len(p) + gen)
	}
	require.Equal(t, tokens, rec.Tokens)
	want, _, _ := convertFile(t, ck, opt(extended, 0))
	require.Zero(t, want.Metadata().Selection.Reconstruction.Generated)
	for l := 0; l < hm.Config.Layers; l++ {
		for _, name := range []string{format.DownTName(l), format.DownBiasName(l)} {
			a, err := f.Tensor(name)
			require.NoError(t, err)
			b, err := want.Tensor(name)
			require.NoError(t, err)
			require.Equal(t, b.Data, a.Data, name)
		}
	}
}
