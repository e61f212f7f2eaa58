package convert_test

import (
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/scores"
	"github.com/selectinfer/sinf/runtime"
)

// TestMassMatchesFloat64 checks the activation-mass report (runtime.MassMeter)
// against an independent float64 forward pass of the same slim file
// (tinystories-656k, γ=0.7 over both layers): the reference feeds the same
// tokens, computes decode's FFN over the runtime's active sets, and sums per
// layer, over every decoded token, |a| of the loaded neurons, of the active
// ones, and of the best len(active) per token. The sums agree within 1e-4
// relative (float32 against float64 arithmetic over 40 tokens). Dense layers
// and prefill are not counted; for gatefirst the reference also redoes the
// per-token pick, by |silu(g)|·‖up‖·‖down‖ from float64 norms.
func TestMassMatchesFloat64(t *testing.T) {
	ck, hm := openHF(t, "tinystories-656k")
	task := profileScores(t, ck, hm, "a", [][]int{{1, 5, 6, 7, 8, 9}, {1, 10, 11, 12}})
	other := profileScores(t, ck, hm, "b", [][]int{{1, 40, 41, 42}, {1, 3, 2, 4, 9}})
	model, err := scores.Merge([]*scores.File{task, other}, []string{"a", "b"})
	require.NoError(t, err)
	_, m, _ := convertFile(t, ck, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, TaskScores: task, ModelScores: model}))
	prompt := []int{1, 21, 22, 23, 24, 25, 26, 27}
	var cont []int
	for i := 0; i < 41; i++ {
		cont = append(cont, (37*i+11)%m.Config.Vocab)
	}
	for _, sp := range []runtime.Sparsity{{Mode: runtime.SelectInfer, Phi: 0.4, Alpha: 0.2}, {Mode: runtime.GateFirst, Phi: 0.25, Alpha: 0.2}} {
		t.Run(sp.Mode.String(), func(t *testing.T) {
			s := m.NewSession(pool(t), 0)
			meter := &runtime.MassMeter{}
			s.Mass(meter)
			_, err := s.Score(prompt, cont, sp)
			require.NoError(t, err)
			ref := newRef64(m)
			sumA, sumS := make([][]float64, len(m.Layers)), make([][]float64, len(m.Layers))
			ref.forward(prompt, nil, func(i int, a, g, u []float64) {
				if sumA[i] == nil {
					sumA[i], sumS[i] = make([]float64, len(a)), make([]float64, len(a))
				}
				for j := range a {
					sumA[i][j] += math.Abs(a[j])
					sumS[i][j] += math.Abs(g[j] / (1 + math.Exp(-g[j])))
				}
			})
			if sp.Mode == runtime.GateFirst {
				for i := range m.Layers {
					w := s.GateWeights(i)
					require.Len(t, w, m.Layers[i].MLP.Kept())
					down := ref.downNorms(i)
					for j := range w {
						want := sumA[i][j] / sumS[i][j] * down[j]
						require.InEpsilon(t, want, float64(w[j]), 1e-4, "layer %d row %d weight", i, j)
					}
				}
			}
			want := make([]runtime.LayerMass, len(m.Layers))
			for _, id := range cont[:len(cont)-1] {
				ref.forward([]int{id}, func(i int, a []float64, g []float64) []bool {
					keep := make([]bool, len(a))
					k := 0
					if sp.Mode == runtime.GateFirst {
						k = s.PerToken(i)
						w := make([]float64, len(g))
						for j, v := range s.GateWeights(i) {
							w[j] = float64(v)
						}
						keep = topByWeightedSiLU(g, w, k)
					} else {
						for _, r := range s.Active(i) {
							keep[r] = true
						}
						k = len(s.Active(i))
					}
					abs := make([]float64, len(a))
					w := &want[i]
					for j, v := range a {
						abs[j] = math.Abs(v)
						w.Total += abs[j]
						if keep[j] {
							w.Active += abs[j]
						}
					}
					sort.Sort(sort.Reverse(sort.Float64Slice(abs)))
					for _, v := range abs[:k] {
						w.Best += v
					}
					w.Tokens++
					return keep
				}, nil)
			}
			for i, w := range want {
				got := meter.Layers[i]
				require.Equal(t, w.Tokens, got.Tokens, "layer %d", i)
				require.InEpsilon(t, w.Total, got.Total, 1e-4, "layer %d total", i)
				require.InEpsilon(t, w.Active, got.Active, 1e-4, "layer %d active", i)
				require.InEpsilon(t, w.Best, got.Best, 1e-4, "layer %d best", i)
				a, b, _ := got.Fraction()
				t.Logf("layer %d: %d tokens, mass %.4f, best %.4f", i, got.Tokens, a, b)
			}
		})
	}
}

// topByWeightedSiLU marks the k entries with the largest |silu(g_j)|·w_j.
func topByWeightedSiLU(g, w []float64, k int) []bool {
	idx := make([]int, len(g))
	score := make([]float64, len(g))
	for j, v := range g {
		idx[j], score[j] = j, math.Abs(v/(1+math.Exp(-v)))*w[j]
	}
	sort.SliceStable(idx, func(x, y int) bool { return score[idx[x]] > score[idx[y]] })
	keep := make([]bool, len(g))
	for _, j := range idx[:k] {
		keep[j] = true
	}
	return keep
}

// ref64 is a float64 Llama forward pass (HF LlamaForCausalLM: RMSNorm,
// rotate-half RoPE, grouped-query causal attention, SwiGLU) over a model's
// weights, written apart from the runtime for this test. A sliced layer's
// FFN computes every loaded row, hands a and the gate to pick (decode), and
// sums only the rows pick keeps.
type ref64 struct {
	m    *runtime.Model
	k, v [][][]float64 // [layer][pos][kv·hd]
	pos  int
	xb   []float64 // the FFN input of the layer pick is called for
}

func newRef64(m *runtime.Model) *ref64 {
	return &ref64{m: m, k: make([][][]float64, len(m.Layers)), v: make([][][]float64, len(m.Layers))}
}

func row64(mat interface{ RowF32([]float32, int) }, cols, r int) []float64 {
	f := make([]float32, cols)
	mat.RowF32(f, r)
	out := make([]float64, cols)
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

// downNorms returns ‖W_down[:,j]‖₂ per stored row of a sliced layer i.
func (r *ref64) downNorms(i int) []float64 {
	f := &r.m.Layers[i].MLP
	out := make([]float64, f.Kept())
	for j := range out {
		var sd float64
		for _, v := range row64(f.DownT, f.DownT.Cols, j) {
			sd += v * v
		}
		out[j] = math.Sqrt(sd)
	}
	return out
}

func rms64(x []float64, w []float32, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(w[i]) * v * s
	}
	return out
}

func matvec64(mat interface{ RowF32([]float32, int) }, rows, cols int, x []float64) []float64 {
	out := make([]float64, rows)
	for r := 0; r < rows; r++ {
		for c, w := range row64(mat, cols, r) {
			out[r] += w * x[c]
		}
	}
	return out
}

// forward feeds tokens one at a time; pick (nil: prefill, every loaded row
// summed) chooses decode's rows of each sliced layer; observe (may be nil)
// sees each layer's a, gate and up of every token.
func (r *ref64) forward(tokens []int, pick func(layer int, a, g []float64) []bool, observe func(layer int, a, g, u []float64)) {
	c := r.m.Config
	H, hd := c.Hidden, c.HeadDim
	inv := c.RopeInvFreq()
	for _, id := range tokens {
		x := row64(r.m.Embed, H, id)
		for i := range r.m.Layers {
			l := &r.m.Layers[i]
			xb := rms64(x, l.AttnNorm, c.RMSNormEps)
			q := matvec64(l.Q, c.Heads*hd, H, xb)
			k := matvec64(l.K, c.KVHeads*hd, H, xb)
			v := matvec64(l.V, c.KVHeads*hd, H, xb)
			for _, vec := range [][]float64{q, k} {
				for h := 0; h < len(vec)/hd; h++ {
					head := vec[h*hd : (h+1)*hd]
					for j := 0; j < hd/2; j++ {
						a := float64(r.pos) * inv[j]
						x0, x1 := head[j], head[j+hd/2]
						head[j], head[j+hd/2] = x0*math.Cos(a)-x1*math.Sin(a), x1*math.Cos(a)+x0*math.Sin(a)
					}
				}
			}
			r.k[i] = append(r.k[i], k)
			r.v[i] = append(r.v[i], v)
			att := make([]float64, c.Heads*hd)
			for h := 0; h < c.Heads; h++ {
				kv := h / (c.Heads / c.KVHeads)
				sc := make([]float64, r.pos+1)
				mx := math.Inf(-1)
				for p := range sc {
					for j := 0; j < hd; j++ {
						sc[p] += q[h*hd+j] * r.k[i][p][kv*hd+j]
					}
					sc[p] /= math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[p])
				}
				var z float64
				for p := range sc {
					sc[p] = math.Exp(sc[p] - mx)
					z += sc[p]
				}
				for p := range sc {
					for j := 0; j < hd; j++ {
						att[h*hd+j] += sc[p] / z * r.v[i][p][kv*hd+j]
					}
				}
			}
			o := matvec64(l.O, H, c.Heads*hd, att)
			for j := range x {
				x[j] += o[j]
			}
			xb = rms64(x, l.MLPNorm, c.RMSNormEps)
			f := &l.MLP
			g := matvec64(f.Gate, f.Kept(), H, xb)
			u := matvec64(f.Up, f.Kept(), H, xb)
			a := make([]float64, f.Kept())
			for j := range a {
				a[j] = g[j] / (1 + math.Exp(-g[j])) * u[j]
			}
			if observe != nil {
				observe(i, a, g, u)
			}
			var keep []bool
			if pick != nil && f.Sliced {
				r.xb = xb
				keep = pick(i, a, g)
			}
			if !f.Sliced { // whole layer: down_proj [H, N] times a
				for hr, v := range matvec64(f.Down, H, f.Down.Cols, a) {
					x[hr] += v
				}
			}
			for j := range a {
				if !f.Sliced || keep != nil && !keep[j] {
					continue
				}
				for col, w := range row64(f.DownT, H, j) {
					x[col] += w * a[j]
				}
			}
			for hr, b := range f.DownBias { // a reconstructed layer's output bias
				x[hr] += float64(b)
			}
		}
		r.pos++
	}
}
