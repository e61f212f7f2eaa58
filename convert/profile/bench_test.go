package profile_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/convert/profile"
	"github.com/selectinfer/sinf/convert/synth"
	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

var (
	smolOnce sync.Once
	smolDir  string
	smolErr  error
)

// smol returns a synthetic SmolLM2-135M-shape checkpoint (F16, random
// weights), written once under the temp folder and reused across runs.
func smol(b *testing.B) *runtime.Model {
	tokDir := sharedtest.Path(b, "tokenizers", "llama3")
	smolOnce.Do(func() {
		smolDir = filepath.Join(os.TempDir(), "sinf-bench-smollm2-135m-f16")
		if _, err := os.Stat(filepath.Join(smolDir, "config.json")); err == nil {
			return
		}
		shape, err := synth.Lookup("smollm2-135m")
		if err != nil {
			smolErr = err
			return
		}
		_, smolErr = synth.Write(smolDir, synth.Options{Shape: shape, TokenizerDir: tokDir, DType: format.F16, Seed: 1, Force: true})
	})
	if smolErr != nil {
		b.Fatal(smolErr)
	}
	ck, m, err := hf.Load(smolDir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ck.Close() })
	return m
}

// benchPrefill runs a 64-token prefill per iteration, with or without the
// profiler's accumulator observing every layer's down_proj inputs. The pair
// (BenchmarkPrefill, BenchmarkProfilePrefill) gives the profiling overhead.
func benchPrefill(b *testing.B, observe bool) {
	m := smol(b)
	p := kernels.NewPool(0)
	defer p.Close()
	s := m.NewSession(p, 256)
	prompt := make([]int, 64)
	for i := range prompt {
		prompt[i] = (i*7919 + 13) % m.Config.Vocab
	}
	if observe {
		s.Observe = profile.NewAccumulator(m.Config.Layers, m.Config.Intermediate)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Reset()
		if _, err := s.Forward(prompt, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(prompt)*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkPrefill(b *testing.B)        { benchPrefill(b, false) }
func BenchmarkProfilePrefill(b *testing.B) { benchPrefill(b, true) }
