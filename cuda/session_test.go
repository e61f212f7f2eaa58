package cuda

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime"
)

// refSession opens a Session on the CPU reference backend.
func refSession(t testing.TB, m *runtime.Model, ctx int) *Session {
	t.Helper()
	s, err := newSession(m, newRefBackend(testPool(t)), Options{Context: ctx})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// TestSessionMatchesCPU: the Session's forward pass, selection and decode
// loop, run on the CPU reference backend, reproduce runtime.Session: the same
// tokens, computed neurons and active rows, and NLL within 1e-4 (the
// reference computes as the runtime does, so today they are bit-identical),
// on every test model and mode, for a one-token and a longer prompt, greedy
// and sampled.
func TestSessionMatchesCPU(t *testing.T) {
	for _, mc := range testModels(t) {
		for _, sp := range mc.modes {
			t.Run(mc.name+"/"+sp.Mode.String(), func(t *testing.T) {
				m := mc.model
				for _, plen := range []int{1, 9} {
					prompt := testPrompt(plen, m.Config.Vocab)
					for _, temp := range []float64{0, 0.8} {
						cpu := m.NewSession(testPool(t), 64)
						gpu := refSession(t, m, 64)
						opt := runtime.GenerateOptions{MaxTokens: 12, Sparsity: sp}
						if temp > 0 {
							opt.Sampler = runtime.NewSampler(temp, 20, 0.95, 5)
						}
						want, err := cpu.Generate(prompt, opt)
						require.NoError(t, err)
						if temp > 0 {
							opt.Sampler = runtime.NewSampler(temp, 20, 0.95, 5)
						}
						got, err := gpu.Generate(prompt, opt)
						require.NoError(t, err)
						require.Equal(t, want.IDs, got.IDs, "prompt %d, temperature %g", plen, temp)
						require.Equal(t, want.LoadedNeurons, got.LoadedNeurons)
						require.Equal(t, want.ComputedNeurons, got.ComputedNeurons)
						for i := range m.Layers {
							rows, err := gpu.Active(i)
							require.NoError(t, err)
							require.Equal(t, cpu.Active(i), rows, "layer %d active rows", i)
						}
						require.Equal(t, cpu.Pos(), gpu.Pos())
					}
					cpu := m.NewSession(testPool(t), 64)
					gpu := refSession(t, m, 64)
					cont := testPrompt(6, m.Config.Vocab)[1:]
					want, err := cpu.Score(prompt, cont, sp)
					require.NoError(t, err)
					got, err := gpu.Score(prompt, cont, sp)
					require.NoError(t, err)
					require.InDeltaSlice(t, want, got, 1e-4)
				}
			})
		}
	}
}

// TestForwardMatchesCPU: logits of a prefill and of decode steps after it.
func TestForwardMatchesCPU(t *testing.T) {
	for _, mc := range testModels(t)[:5] {
		t.Run(mc.name, func(t *testing.T) {
			m := mc.model
			cpu := m.NewSession(testPool(t), 32)
			gpu := refSession(t, m, 32)
			seq := testPrompt(12, m.Config.Vocab)
			for _, part := range [][]int{seq[:7], seq[7:8], seq[8:9], seq[9:12]} {
				want, err := cpu.Forward(part, false)
				require.NoError(t, err)
				got, err := gpu.Forward(part)
				require.NoError(t, err)
				requireClose(t, want, got, 1e-5)
			}
		})
	}
}

// requireClose requires got within tol·max|want| of want.
func requireClose(t testing.TB, want, got []float32, tol float64) {
	t.Helper()
	require.Len(t, got, len(want))
	var maxAbs, maxErr float64
	for i := range want {
		maxAbs = max(maxAbs, math.Abs(float64(want[i])))
		maxErr = max(maxErr, math.Abs(float64(got[i]-want[i])))
	}
	require.LessOrEqual(t, maxErr, tol*maxAbs, "max error %g, max |want| %g", maxErr, maxAbs)
}

func TestSessionErrors(t *testing.T) {
	mc := testModels(t)[0]
	m := mc.model
	s := refSession(t, m, 8)
	require.Equal(t, 8, s.Context())
	_, err := s.Generate(nil, runtime.GenerateOptions{MaxTokens: 1})
	require.ErrorContains(t, err, "empty prompt")
	_, err = s.Generate(testPrompt(9, m.Config.Vocab), runtime.GenerateOptions{MaxTokens: 1})
	require.True(t, errors.Is(err, runtime.ErrContextFull), "%v", err)
	_, err = s.Generate([]int{m.Config.Vocab}, runtime.GenerateOptions{MaxTokens: 1})
	require.ErrorContains(t, err, "outside")
	s.Reset()
	_, err = s.Generate([]int{1, 2}, runtime.GenerateOptions{MaxTokens: 1, Sparsity: runtime.Sparsity{Mode: runtime.SelectInfer, Phi: 0.4, Alpha: 0.2}})
	require.ErrorContains(t, err, "sliced layers")
	s.Reset()
	res, err := s.Generate([]int{1, 2}, runtime.GenerateOptions{MaxTokens: 20})
	require.NoError(t, err)
	require.Len(t, res.IDs, 7) // stops at the end of the context
	_, err = s.Generate([]int{1}, runtime.GenerateOptions{MaxTokens: 1})
	require.ErrorContains(t, err, "not empty")
	s.Reset()
	_, err = s.Score([]int{1}, []int{-1}, runtime.Sparsity{})
	require.ErrorContains(t, err, "outside")
}

func TestDefaultContext(t *testing.T) {
	mc := testModels(t)[0]
	s := refSession(t, mc.model, 0)
	require.Equal(t, min(mc.model.Config.MaxPositions, DefaultContext), s.Context())
	s2 := refSession(t, mc.model, 1<<30)
	require.Equal(t, mc.model.Config.MaxPositions, s2.Context())
}

func TestUnavailableWithoutTag(t *testing.T) {
	if Built {
		t.Skip("built with the cuda tag")
	}
	require.ErrorContains(t, Available(), "built without the cuda tag")
	// The embedded model: this check needs no shared material.
	ck, m, err := hf.Load(sharedtest.Path(t, "models", "tinystories-656k"))
	require.NoError(t, err)
	defer ck.Close()
	_, err = Open(m, Options{})
	require.ErrorContains(t, err, "built without the cuda tag")
}

// TestUnsupportedRefused: a weight dtype the CUDA kernels do not take (an
// I32 matrix here; every F32/F16/BF16 and GGML block dtype of a .sinf file
// is taken) is refused with an error naming the dtype, not run wrong.
func TestUnsupportedRefused(t *testing.T) {
	mc := testModels(t)[0]
	m := *mc.model
	m.Layers = slices.Clone(m.Layers)
	up := m.Layers[len(m.Layers)-1].MLP.Up
	up.DType = format.I32
	m.Layers[len(m.Layers)-1].MLP.Up = up
	_, err := newSession(&m, newRefBackend(testPool(t)), Options{Context: 16})
	require.ErrorContains(t, err, "I32 weights are not supported by the CUDA backend")
}
