// Package recon reconstructs, at convert time, what a sliced FFN layer's
// dropped neurons gave (beyond the paper; training-free, from profiled text).
//
// A layer's output is y = D·a, D = down_proj [hidden, N], a = silu(gate·x)⊙
// (up·x) [N]. Slicing keeps K neurons (set 𝒦) and drops R = N − K (set ℛ),
// so plain slicing computes D_𝒦·a_𝒦 and loses y_ℛ = D_ℛ·a_ℛ. Over profiled
// tokens t this package fits
//
//	ŷ_ℛ(t) = Δ·a_𝒦(t) + b,   Δ [hidden, K], b [hidden],
//
// and the file stores the kept columns D_𝒦 + Δ (down_proj.weight_t) and b
// (down_proj.bias, spec §6.2). Three fits (Method):
//
//   - Bias: Δ = 0, b = E[y_ℛ] = Σ_ℛ E[a_n]·D[:, n], the dropped neurons'
//     mean output;
//   - Refit: b = 0, Δ = E[y_ℛ a_𝒦ᵀ]·(E[a_𝒦 a_𝒦ᵀ] + λI)⁻¹, ridge least
//     squares of y_ℛ on the raw kept activations;
//   - Both: least squares with an intercept: Δ = Cov(y_ℛ, a_𝒦)·(Cov(a_𝒦) +
//     λI)⁻¹, b = E[y_ℛ] − Δ·E[a_𝒦]. Its λ → ∞ limit is Bias.
//
// The regulariser is a ridge toward the original columns (it penalises
// ‖Δ‖²_F, the change to D_𝒦), scaled to the activations: λ = c·trace(C)/K
// with C the K×K second-moment matrix the fit inverts (centred for Both).
// c is chosen per layer by two-fold cross-validation over the calibration
// prompts (even against odd prompts, each fold fitted on one and scored on
// the other, the error summed) among Ridges, then the fit is redone on all
// tokens.
//
// The statistics are the sufficient ones for every fit and for the held-out
// error, per fold: the token count, Σa_𝒦 [K], Σy_ℛ [hidden], the Gram
// Σa_𝒦a_𝒦ᵀ [K, K], the cross moment Σy_ℛa_𝒦ᵀ [hidden, K] and Σ‖y_ℛ‖².
// Projecting the dropped activations through D_ℛ while accumulating replaces
// the K×R cross moment E[a_𝒦 a_ℛᵀ] by a hidden×K one (hidden < R for real
// models' N ≈ 4·hidden), and the N×N Gram of the score files by K×K: float64,
// 2·(K² + hidden·K)·8 bytes per layer, 0.70 GiB at the Llama-3.2-1B shape
// (hidden 2048, K 5734). The converter (convert.Calibrate) holds one
// layer's at a time.
package recon

import (
	"errors"
	"fmt"
	"math"

	"github.com/selectinfer/sinf/runtime"
)

// Method is which reconstruction a file gets.
type Method int

const (
	None  Method = iota
	Bias         // the dropped neurons' mean output as an output bias
	Refit        // ridge refit of the kept columns, no bias
	Both         // refit with an intercept: refitted columns and a bias
)

var methodNames = [...]string{"none", "bias", "refit", "both"}

func (m Method) String() string { return methodNames[m] }

// ParseMethod parses "none", "bias", "refit" or "both".
func ParseMethod(s string) (Method, error) {
	for i, n := range methodNames {
		if s == n {
			return Method(i), nil
		}
	}
	return None, fmt.Errorf("reconstruction %q: want none, bias, refit or both", s)
}

// HasBias reports whether the method stores an output bias; HasRefit whether
// it changes the kept columns.
func (m Method) HasBias() bool  { return m == Bias || m == Both }
func (m Method) HasRefit() bool { return m == Refit || m == Both }

// Ridges are the c of λ = c·trace(C)/K that cross-validation chooses among.
var Ridges = []float64{1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1}

// Moments are one fold's sums over calibration tokens (float64).
type Moments struct {
	N    float64   // tokens
	SumA []float64 // [K] Σ a_𝒦
	SumY []float64 // [H] Σ y_ℛ
	G    []float64 // [K, K] Σ a_𝒦 a_𝒦ᵀ (upper triangle while accumulating; Finish mirrors it)
	X    []float64 // [H, K] Σ y_ℛ a_𝒦ᵀ
	Q    float64   // Σ ‖y_ℛ‖²
}

func newMoments(K, H int) Moments {
	return Moments{SumA: make([]float64, K), SumY: make([]float64, H), G: make([]float64, K*K), X: make([]float64, H*K)}
}

func (m *Moments) add(o *Moments) {
	m.N += o.N
	m.Q += o.Q
	for i, v := range o.SumA {
		m.SumA[i] += v
	}
	for i, v := range o.SumY {
		m.SumY[i] += v
	}
	for i, v := range o.G {
		m.G[i] += v
	}
	for i, v := range o.X {
		m.X[i] += v
	}
}

// Layer is one sliced layer's calibration.
type Layer struct {
	Kept        []int32   // [K] original ids of the stored rows, in kept order
	Dropped     []int32   // [R] the other neurons
	DownDropped []float32 // [R, H]: row r is column Dropped[r] of down_proj
	H           int
	Folds       [2]Moments // even and odd calibration prompts

	aK []float64 // [K] one token's kept activations (scratch)
	y  []float64 // [H] one token's y_ℛ (scratch)
}

// NewLayer prepares a layer keeping kept of N neurons; down is HF's
// down_proj [H, N] row-major (float32).
func NewLayer(kept []int32, down []float32, H, N int) (*Layer, error) {
	if len(down) != H*N {
		return nil, fmt.Errorf("recon: down_proj has %d values, want %d·%d", len(down), H, N)
	}
	in := make([]bool, N)
	for _, n := range kept {
		if n < 0 || int(n) >= N || in[n] {
			return nil, fmt.Errorf("recon: kept neuron %d outside [0, %d) or repeated", n, N)
		}
		in[n] = true
	}
	l := &Layer{Kept: kept, H: H, aK: make([]float64, len(kept)), y: make([]float64, H)}
	for n := 0; n < N; n++ {
		if !in[n] {
			l.Dropped = append(l.Dropped, int32(n))
		}
	}
	l.DownDropped = make([]float32, len(l.Dropped)*H)
	for r, n := range l.Dropped {
		for h := 0; h < H; h++ {
			l.DownDropped[r*H+h] = down[h*N+int(n)]
		}
	}
	for f := range l.Folds {
		l.Folds[f] = newMoments(len(kept), H)
	}
	return l, nil
}

// Bytes returns the memory the layer's statistics take.
func (l *Layer) Bytes() int64 {
	K := int64(len(l.Kept))
	return 2*8*(K*K+int64(l.H)*K+K+int64(l.H)) + 4*int64(len(l.DownDropped))
}

// Observe adds T tokens of the full layer's activations act [T, N] (every
// neuron, original order) to fold f.
func (l *Layer) Observe(f int, act []float32, T int) {
	m := &l.Folds[f]
	K, H := len(l.Kept), l.H
	N := len(act) / T
	for t := 0; t < T; t++ {
		a := act[t*N : (t+1)*N]
		for j, n := range l.Kept {
			l.aK[j] = float64(a[n])
		}
		clear(l.y)
		for r, n := range l.Dropped {
			v := float64(a[n])
			if v == 0 {
				continue
			}
			for h, d := range l.DownDropped[r*H : (r+1)*H] {
				l.y[h] += v * float64(d)
			}
		}
		m.N++
		for j, v := range l.aK {
			m.SumA[j] += v
			row := m.G[j*K : (j+1)*K]
			for i := j; i < K; i++ {
				row[i] += v * l.aK[i]
			}
		}
		for h, yv := range l.y {
			m.SumY[h] += yv
			m.Q += yv * yv
			row := m.X[h*K : (h+1)*K]
			for j, v := range l.aK {
				row[j] += yv * v
			}
		}
	}
}

// finish mirrors each fold's Gram into its lower triangle.
func (l *Layer) finish() {
	K := len(l.Kept)
	for f := range l.Folds {
		G := l.Folds[f].G
		for j := 0; j < K; j++ {
			for i := j + 1; i < K; i++ {
				G[i*K+j] = G[j*K+i]
			}
		}
	}
}

// Fit is a layer's reconstruction: Delta [H, K] (nil: none) is added to the
// kept columns, Bias [H] (nil: none) is the output bias.
type Fit struct {
	Delta []float64
	Bias  []float64
	C     float64 // the chosen ridge c (0 without a refit)
	// HeldOut[i] is the cross-validated error of Ridges[i], and Plain and
	// BiasOnly those of plain slicing and of Bias, each relative to plain
	// slicing's Σ‖y_ℛ‖² (1 = no better than dropping).
	HeldOut         []float64
	Plain, BiasOnly float64
}

// HeldOutBest returns the cross-validated relative error of the fit: the
// chosen ridge's, BiasOnly for Bias, Plain for None.
func (f *Fit) HeldOutBest() float64 {
	if len(f.HeldOut) == 0 {
		if f.Bias != nil {
			return f.BiasOnly
		}
		return f.Plain
	}
	best := math.Inf(1)
	for _, e := range f.HeldOut {
		best = min(best, e)
	}
	return best
}

// Solve fits the layer by method (cross-validating c over Ridges when it
// refits), from the statistics of both folds.
func (l *Layer) Solve(method Method) (*Fit, error) {
	l.finish()
	a, b := &l.Folds[0], &l.Folds[1]
	if a.N == 0 || b.N == 0 {
		return nil, errors.New("recon: each calibration fold needs tokens (give at least two prompts)")
	}
	all := newMoments(len(l.Kept), l.H)
	all.add(a)
	all.add(b)
	fit := &Fit{Plain: 1}
	bias := func(m *Moments) []float64 {
		out := make([]float64, l.H)
		for h, v := range m.SumY {
			out[h] = v / m.N
		}
		return out
	}
	cv := func(delta func(*Moments) ([]float64, []float64, error)) (float64, error) {
		var e float64
		for _, p := range [][2]*Moments{{a, b}, {b, a}} {
			d, bs, err := delta(p[0])
			if err != nil {
				return 0, err
			}
			e += Error(p[1], d, bs, len(l.Kept))
		}
		return e / (a.Q + b.Q), nil
	}
	var err error
	if fit.BiasOnly, err = cv(func(m *Moments) ([]float64, []float64, error) { return nil, bias(m), nil }); err != nil {
		return nil, err
	}
	switch method {
	case None:
		return fit, nil
	case Bias:
		fit.Bias = bias(&all)
		return fit, nil
	}
	best := math.Inf(1)
	for _, c := range Ridges {
		e, err := cv(func(m *Moments) ([]float64, []float64, error) { return ridge(m, method, c, len(l.Kept), l.H) })
		if err != nil {
			return nil, err
		}
		fit.HeldOut = append(fit.HeldOut, e)
		if e < best {
			best, fit.C = e, c
		}
	}
	if fit.Delta, fit.Bias, err = ridge(&all, method, fit.C, len(l.Kept), l.H); err != nil {
		return nil, err
	}
	return fit, nil
}

// ridge solves the Refit or Both least squares on m with λ = c·trace(C)/K.
func ridge(m *Moments, method Method, c float64, K, H int) (delta, bias []float64, err error) {
	n := m.N
	C := make([]float64, K*K) // per-token second moments of a_𝒦, centred for Both
	X := make([]float64, H*K) // per-token cross moments of y_ℛ and a_𝒦, centred for Both
	muA := make([]float64, K)
	muY := make([]float64, H)
	for j := range muA {
		muA[j] = m.SumA[j] / n
	}
	for h := range muY {
		muY[h] = m.SumY[h] / n
	}
	centre := method == Both
	for i := 0; i < K; i++ {
		for j := 0; j < K; j++ {
			v := m.G[i*K+j] / n
			if centre {
				v -= muA[i] * muA[j]
			}
			C[i*K+j] = v
		}
	}
	for h := 0; h < H; h++ {
		for j := 0; j < K; j++ {
			v := m.X[h*K+j] / n
			if centre {
				v -= muY[h] * muA[j]
			}
			X[h*K+j] = v
		}
	}
	var tr float64
	for i := 0; i < K; i++ {
		tr += C[i*K+i]
	}
	lambda := c * tr / float64(K)
	if !(lambda > 0) {
		lambda = c // every kept activation is constant: any positive ridge
	}
	for i := 0; i < K; i++ {
		C[i*K+i] += lambda
	}
	if err := cholesky(C, K); err != nil {
		return nil, nil, fmt.Errorf("recon: ridge c %g: %w", c, err)
	}
	// Δ·(C + λI) = X: each row of Δ solves (C + λI)·δ_h = x_h.
	delta = X
	for h := 0; h < H; h++ {
		cholSolve(C, K, delta[h*K:(h+1)*K])
	}
	if centre {
		bias = muY
		for h := 0; h < H; h++ {
			bias[h] -= dot(delta[h*K:(h+1)*K], muA)
		}
	}
	return delta, bias, nil
}

// Error returns Σ_t ‖y_ℛ(t) − Δ·a_𝒦(t) − b‖² over the tokens of m, from its
// moments (delta or bias nil: zero).
func Error(m *Moments, delta, bias []float64, K int) float64 {
	e := m.Q
	H := len(m.SumY)
	if delta != nil {
		v := make([]float64, K)
		for h := 0; h < H; h++ {
			d := delta[h*K : (h+1)*K]
			e -= 2 * dot(d, m.X[h*K:(h+1)*K])
			for i := 0; i < K; i++ {
				v[i] = dot(m.G[i*K:(i+1)*K], d)
			}
			e += dot(d, v)
			if bias != nil {
				e += 2 * bias[h] * dot(d, m.SumA)
			}
		}
	}
	if bias != nil {
		for h, bv := range bias {
			e += -2*bv*m.SumY[h] + m.N*bv*bv
		}
	}
	return e
}

func dot(a, b []float64) float64 {
	var s float64
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

// cholesky factors the symmetric positive definite A [n, n] in place into
// its lower triangle L (A = L·Lᵀ).
func cholesky(A []float64, n int) error {
	for j := 0; j < n; j++ {
		d := A[j*n+j] - dot(A[j*n:j*n+j], A[j*n:j*n+j])
		if !(d > 0) {
			return fmt.Errorf("matrix not positive definite at row %d", j)
		}
		d = math.Sqrt(d)
		A[j*n+j] = d
		for i := j + 1; i < n; i++ {
			A[i*n+j] = (A[i*n+j] - dot(A[i*n:i*n+j], A[j*n:j*n+j])) / d
		}
	}
	return nil
}

// cholSolve solves L·Lᵀ·x = b in place (b becomes x), L from cholesky.
func cholSolve(L []float64, n int, b []float64) {
	for i := 0; i < n; i++ {
		b[i] = (b[i] - dot(L[i*n:i*n+i], b[:i])) / L[i*n+i]
	}
	for i := n - 1; i >= 0; i-- {
		s := b[i]
		for k := i + 1; k < n; k++ {
			s -= L[k*n+i] * b[k]
		}
		b[i] = s / L[i*n+i]
	}
}

// Calibrator is the runtime.Observer of a calibration pass over the full
// (unsliced) model: it adds each observed sliced layer's activations to the
// fold of the current prompt (Prompt).
type Calibrator struct {
	Layers map[int]*Layer
	fold   int
	Tokens int64
}

// Prompt sets the fold of the next observations: prompt i's parity.
func (c *Calibrator) Prompt(i int) { c.fold = i % 2 }

// ObserveFFN implements runtime.Observer (rows must be nil: a whole layer).
func (c *Calibrator) ObserveFFN(layer int, act []float32, T int, rows []int32) {
	if l := c.Layers[layer]; l != nil && rows == nil {
		l.Observe(c.fold, act, T)
	}
}

// Run feeds every prompt through s's model (one prefill each, prompts longer than
// the context cut to its first positions) with c observing, and counts the
// tokens.
func (c *Calibrator) Run(s *runtime.Session, prompts [][]int) error {
	if len(prompts) < 2 {
		return errors.New("recon: calibration needs at least two prompts (two folds)")
	}
	s.Observe = c
	defer func() { s.Observe = nil }()
	for i, p := range prompts {
		if len(p) > s.Context() {
			p = p[:s.Context()]
		}
		if len(p) == 0 {
			continue
		}
		s.Reset()
		c.Prompt(i)
		if _, err := s.Forward(p, false); err != nil {
			return fmt.Errorf("recon: calibration prompt %d: %w", i, err)
		}
		c.Tokens += int64(len(p))
	}
	return nil
}
