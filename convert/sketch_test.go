package convert_test

import (
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/scores"
	"github.com/selectinfer/sinf/convert/synth"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
)

// TestSketchPredictorMatchesFloat64 checks convert --predictor sketch and
// GateFirst's per-token pick on its file (tinystories-656k, γ=0.7 over both
// layers) against an independent float64 reference:
//   - each sliced layer stores up_proj.sketch: the SK2 blocks of the
//     checkpoint's kept up_proj rows, in kept order (format.Quantize), and
//     the selection records predictor "up_sketch";
//   - decode at the φ that reads SelectInfer φ=0.4's bytes
//     (GateFirstSketchPhi) picks, per token and layer, the rows the float64
//     forward pass (ref64) picks by |silu(g_j)·û_j|·‖down_j‖, û = the
//     dequantized sketch times the FFN input as the runtime rounds it for
//     the product (int8 blocks of 32, d = max|x|/127, q = x/d rounded to
//     even; sketchInput): the activation mass of the
//     picked rows, summed over 40 decoded tokens, agrees within 1e-4
//     relative (a different pick would move it by a whole row's |a|);
//   - the bytes a token reads count the sketch: gate rows + sketch + k up and
//     down rows per layer.
func TestSketchPredictorMatchesFloat64(t *testing.T) {
	ck, hm := openHF(t, "tinystories-656k")
	task := profileScores(t, ck, hm, "a", [][]int{{1, 5, 6, 7, 8, 9}, {1, 10, 11, 12}})
	other := profileScores(t, ck, hm, "b", [][]int{{1, 40, 41, 42}, {1, 3, 2, 4, 9}})
	model, err := scores.Merge([]*scores.File{task, other}, []string{"a", "b"})
	require.NoError(t, err)
	f, m, _ := convertFile(t, ck, allLayers(ck, convert.Options{Gamma: 0.7, Delta: 0.3, TaskScores: task, ModelScores: model, Sketch: true}))
	require.Equal(t, "up_sketch", f.Metadata().Selection.Predictor)
	H := m.Config.Hidden
	for i := range m.Layers {
		mlp := &m.Layers[i].MLP
		up, err := ck.Tensor(format.UpName(i))
		require.NoError(t, err)
		w, err := up.ToF32()
		require.NoError(t, err)
		var want []byte
		for _, n := range mlp.Index {
			want, err = format.Quantize(want, w[int(n)*H:(int(n)+1)*H], format.SK2)
			require.NoError(t, err)
		}
		require.Equal(t, want, mlp.UpSketch.Data, "layer %d sketch bytes", i)
	}

	share := runtime.ModelSketchShare(m)
	require.InDelta(t, 10.0/32/4, share, 1e-12, "an F32 file's sketch is 10/32 bytes a weight over 4")
	phi := runtime.GateFirstSketchPhi(0.7, 0.4, share, m.Config.Intermediate)
	sp := runtime.Sparsity{Mode: runtime.GateFirst, Phi: phi, Alpha: 0.2}
	prompt := []int{1, 21, 22, 23, 24, 25, 26, 27}
	var cont []int
	for i := 0; i < 41; i++ {
		cont = append(cont, (37*i+11)%m.Config.Vocab)
	}
	s := m.NewSession(pool(t), 0)
	meter := &runtime.MassMeter{}
	s.Mass(meter)
	_, err = s.Score(prompt, cont, sp)
	require.NoError(t, err)

	b := synth.BytesPerToken(m, s)
	var ffn int64
	for i := range m.Layers {
		mlp := &m.Layers[i].MLP
		k := s.PerToken(i)
		require.Equal(t, 85, k, "layer %d rows per token: ⌊(3·0.4 − 0.7·(1 + 10/128))/2·384⌋", i)
		ffn += int64(mlp.Gate.Bytes() + mlp.UpSketch.Bytes() + k*(mlp.Up.RowBytes()+mlp.DownT.RowBytes()))
	}
	require.Equal(t, ffn, b.FFN)

	ref := newRef64(m)
	ref.forward(prompt, nil, nil)
	sketch := make([][]float64, len(m.Layers)) // dequantized, [kept·H]
	for i := range m.Layers {
		sk := m.Layers[i].MLP.UpSketch
		d := make([]float32, sk.Rows*sk.Cols)
		require.NoError(t, format.Dequantize(d, sk.Data, format.SK2))
		for _, v := range d {
			sketch[i] = append(sketch[i], float64(v))
		}
	}
	want := make([]runtime.LayerMass, len(m.Layers))
	for _, id := range cont[:len(cont)-1] {
		ref.forward([]int{id}, func(i int, a, g []float64) []bool {
			down := ref.downNorms(i)
			score := make([]float64, len(g))
			xq := sketchInput(ref.xb)
			idx := make([]int, len(g))
			for j := range g {
				var u float64
				for c, x := range xq {
					u += sketch[i][j*H+c] * x
				}
				idx[j], score[j] = j, math.Abs(g[j]/(1+math.Exp(-g[j]))*u)*down[j]
			}
			sort.SliceStable(idx, func(x, y int) bool { return score[idx[x]] > score[idx[y]] })
			keep := make([]bool, len(g))
			w := &want[i]
			for _, j := range idx[:s.PerToken(i)] {
				keep[j] = true
				w.Active += math.Abs(a[j])
			}
			for _, v := range a {
				w.Total += math.Abs(v)
			}
			w.Tokens++
			return keep
		}, nil)
	}
	for i, w := range want {
		got := meter.Layers[i]
		require.Equal(t, w.Tokens, got.Tokens, "layer %d", i)
		require.InEpsilon(t, w.Total, got.Total, 1e-4, "layer %d total", i)
		require.InEpsilon(t, w.Active, got.Active, 1e-4, "layer %d mass of the picked rows", i)
		a, _, _ := got.Fraction()
		t.Logf("layer %d: %d rows of %d per token, mass %.4f", i, s.PerToken(i), m.Layers[i].MLP.Kept(), a)
	}
}

// sketchInput rounds x as the runtime does for a block-quantized product
// (kernels.quantizeX): per block of 32, d = float32(max|x|)/127 and
// q = round-half-even(float32(x·(1/d))), element d·q.
func sketchInput(x []float64) []float64 {
	out := make([]float64, len(x))
	for b := 0; b < len(x); b += 32 {
		var amax float32
		for _, v := range x[b : b+32] {
			amax = max(amax, float32(math.Abs(v)))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for e, v := range x[b : b+32] {
			out[b+e] = float64(d) * math.RoundToEven(float64(float32(v)*id))
		}
	}
	return out
}
