//go:build cuda

package cuda

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
)

// blockWeights returns the dtype of the first block-quantized matrix of m.
func blockWeights(m *runtime.Model) (format.DType, bool) {
	return firstWeight(m, format.DType.Quantized)
}

// openGPU opens a GPU session of m, or skips without a GPU.
func openGPU(t testing.TB, m *runtime.Model, o Options) *Session {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	s, err := Open(m, o)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// TestGPUGreedyMatchesCPU: on every test model and mode, greedy tokens on
// the GPU equal the CPU's. Dense: runtime.Session.Generate. Sparse modes:
// the GPU's active rows (from its own prefill counting) agree with the
// CPU's (≥ 98% of rows; float rounding can move a neuron across the top-α
// cut), and the CPU decoding over the GPU's rows gives the same tokens
// (GateFirst keeps no decode set: its tokens must equal the CPU's).
func TestGPUGreedyMatchesCPU(t *testing.T) {
	models := testModels(t)
	if err := Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, mc := range models {
		for _, sp := range mc.modes {
			t.Run(mc.name+"/"+sp.Mode.String(), func(t *testing.T) {
				m := mc.model
				prompt := testPrompt(11, m.Config.Vocab)
				const n = 16
				gpu := openGPU(t, m, Options{Context: 64})
				got, err := gpu.Generate(prompt, runtime.GenerateOptions{MaxTokens: n, Sparsity: sp})
				require.NoError(t, err)
				cpu := m.NewSession(testPool(t), 64)
				want, err := cpu.Generate(prompt, runtime.GenerateOptions{MaxTokens: n, Sparsity: sp})
				require.NoError(t, err)
				require.Equal(t, want.ComputedNeurons, got.ComputedNeurons)
				if sp.Mode == runtime.Dense {
					require.Equal(t, want.IDs, got.IDs)
					return
				}
				active := make([][]int32, len(m.Layers))
				same, total := 0, 0
				for i := range m.Layers {
					rows, err := gpu.Active(i)
					require.NoError(t, err)
					active[i] = rows
					in := map[int32]bool{}
					for _, r := range cpu.Active(i) {
						in[r] = true
					}
					for _, r := range rows {
						if in[r] {
							same++
						}
					}
					total += len(rows)
				}
				require.GreaterOrEqual(t, float64(same), 0.98*float64(total), "active rows shared with the CPU: %d of %d", same, total)
				if same == total {
					require.Equal(t, want.IDs, got.IDs)
				}
				if sp.Mode == runtime.GateFirst {
					// GateFirst picks its rows per token and keeps no decode
					// set (Active is empty): its tokens were compared above.
					return
				}
				require.Equal(t, cpuGreedy(t, m, prompt, n, active), got.IDs, "CPU decode over the GPU's active rows")
			})
		}
	}
}

// TestGPULogitsAndScore: prefill and decode logits (dense) within 1e-3 of
// the largest logit, and Score's NLL per token within 1e-3 nats of the CPU's
// in every mode of the model. Q8_0/Q4_0 files: within 3e-2 and 0.15 nats in
// dense; in the sparse modes the mean NLL over the scored tokens within
// 0.2 nats and each token within 1 nat.
// Their products quantize x to int8 blocks, so a last-bit difference of x
// (the GPU sums attention in another order; the CPU's integer prefill sums
// in another order than its float32 one) can move one block value by a
// step, 1/127 of the block's largest, and on a 64-wide model that step
// carries through every later layer, and in the sparse modes it can move a
// neuron across the selection cut. The CPU's own kernel sets differ as much
// on the same file: stories260k Q4_0, avx2 (integer prefill) against
// generic (float32 prefill), on a Zen 3, per-token NLL up to 0.12 nats
// dense and up to 0.61 in the sparse modes, the mean over the 11 tokens up
// to 0.087 (every other quantized file here: within 5e-4); avx512vnni
// against generic up to 0.12 on stories260k Q8_0, dense; F32: 1e-5. The
// decode logits moved by 1.8% of the largest. A wrong kernel shows far
// more, and the kernel tests hold each within 1e-5.
func TestGPULogitsAndScore(t *testing.T) {
	models := testModels(t)
	if err := Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, mc := range models {
		t.Run(mc.name, func(t *testing.T) {
			m := mc.model
			logitsTol, nllTol := 1e-3, 1e-3
			_, quantized := blockWeights(m)
			if quantized {
				logitsTol, nllTol = 3e-2, 0.15
			}
			gpu := openGPU(t, m, Options{Context: 64})
			cpu := m.NewSession(testPool(t), 64)
			seq := testPrompt(20, m.Config.Vocab)
			for _, part := range [][]int{seq[:13], seq[13:14], seq[14:15], seq[15:20]} {
				want, err := cpu.Forward(part, false)
				require.NoError(t, err)
				got, err := gpu.Forward(part)
				require.NoError(t, err)
				var maxAbs, maxErr float64
				for j := range want {
					maxAbs = max(maxAbs, math.Abs(float64(want[j])))
					maxErr = max(maxErr, math.Abs(float64(got[j]-want[j])))
				}
				require.LessOrEqual(t, maxErr, logitsTol*maxAbs+1e-5, "logits after %d tokens", cpu.Pos())
			}
			for _, sp := range mc.modes {
				gpu.Reset()
				cpu.Reset()
				want, err := cpu.Score(seq[:9], seq[9:], sp)
				require.NoError(t, err)
				got, err := gpu.Score(seq[:9], seq[9:], sp)
				require.NoError(t, err)
				if !quantized || sp.Mode == runtime.Dense {
					require.InDeltaSlice(t, want, got, nllTol, "NLL, %v", sp.Mode)
					continue
				}
				require.InDeltaSlice(t, want, got, 1, "NLL, %v", sp.Mode)
				var dw, dg float64
				for i := range want {
					dw, dg = dw+want[i], dg+got[i]
				}
				require.InDelta(t, dw/float64(len(want)), dg/float64(len(got)), 0.2, "mean NLL, %v", sp.Mode)
			}
		})
	}
}

// TestGPUPlacements: the registered mapped file (Options.Mapped) and the
// device copy give the same tokens; Info names the path taken.
func TestGPUPlacements(t *testing.T) {
	models := testModels(t)
	mc := models[1] // a sliced .sinf file: weights in a read-only mapping
	var ids [][]int
	for _, mapped := range []bool{false, true} {
		s := openGPU(t, mc.model, Options{Context: 64, Mapped: mapped})
		info := s.Info()
		t.Logf("mapped=%v: %s (sm %s, integrated %v), weights %s %s", mapped, info.GPU, info.Capability, info.Integrated, info.Weights, info.Note)
		require.NotEmpty(t, info.GPU)
		switch {
		case mapped || info.Integrated:
			require.Contains(t, []string{"mapped", "managed", "device"}, info.Weights)
			if info.Weights != "mapped" {
				require.NotEmpty(t, info.Note)
			}
		default:
			require.Equal(t, "device", info.Weights)
		}
		res, err := s.Generate(testPrompt(7, mc.model.Config.Vocab), runtime.GenerateOptions{MaxTokens: 12, Sparsity: mc.modes[1]})
		require.NoError(t, err)
		ids = append(ids, res.IDs)
	}
	require.Equal(t, ids[0], ids[1])
}

// TestGPUSampling: temperature sampling draws from logits copied to the CPU
// with the runtime's sampler: the same seed gives the CPU's tokens.
func TestGPUSampling(t *testing.T) {
	mc := testModels(t)[0]
	m := mc.model
	gpu := openGPU(t, m, Options{Context: 64})
	cpu := m.NewSession(testPool(t), 64)
	opt := func() runtime.GenerateOptions {
		return runtime.GenerateOptions{MaxTokens: 16, Sampler: runtime.NewSampler(0.7, 40, 0.9, 11)}
	}
	want, err := cpu.Generate(testPrompt(5, m.Config.Vocab), opt())
	require.NoError(t, err)
	got, err := gpu.Generate(testPrompt(5, m.Config.Vocab), opt())
	require.NoError(t, err)
	require.Equal(t, want.IDs, got.IDs)
}
