package hf_test

import (
	"encoding/json"
	"math"
	"os"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime/kernels"
)

type goldenModel struct {
	PromptIDs  []int     `json:"prompt_ids"`
	GreedyIDs  []int     `json:"greedy_ids"`
	Top5IDs    []int     `json:"top5_ids_last_prompt_pos"`
	Top5Logits []float64 `json:"top5_logits_last_prompt_pos"`
	First8     []float64 `json:"logits_first_pos_first8"`
}

func loadGolden(t *testing.T) map[string]goldenModel {
	raw, err := os.ReadFile(sharedtest.Path(t, "golden", "models.json"))
	require.NoError(t, err)
	var g struct {
		Models map[string]goldenModel `json:"models"`
	}
	require.NoError(t, json.Unmarshal(raw, &g))
	require.Len(t, g.Models, 3)
	return g.Models
}

// TestGoldenModels reproduces, for the three real shared models, the greedy
// ids exactly and the top-5 logits at the last prompt position within 1e-4
// of an independent float64 reference (../shared/golden/models.json).
func TestGoldenModels(t *testing.T) {
	for name, g := range loadGolden(t) {
		t.Run(name, func(t *testing.T) {
			ck, m, err := hf.Load(sharedtest.Path(t, "models", name))
			require.NoError(t, err)
			defer ck.Close()
			pool := kernels.NewPool(2)
			defer pool.Close()
			s := m.NewSession(pool, 0)
			logits, err := s.Forward(g.PromptIDs, true)
			require.NoError(t, err)
			V := m.Config.Vocab
			for j, want := range g.First8 {
				require.InDelta(t, want, logits[j], 1e-4, "first position logit %d", j)
			}
			last := logits[(len(g.PromptIDs)-1)*V : len(g.PromptIDs)*V]
			order := make([]int, V)
			for i := range order {
				order[i] = i
			}
			sort.SliceStable(order, func(a, b int) bool { return last[order[a]] > last[order[b]] })
			require.Equal(t, g.Top5IDs, order[:5])
			for j, id := range g.Top5IDs {
				require.InDelta(t, g.Top5Logits[j], last[id], 1e-4, "top-5 logit of id %d", id)
			}
			var got []int
			next := order[0]
			for len(got) < len(g.GreedyIDs) {
				got = append(got, next)
				l, err := s.Forward([]int{next}, false)
				require.NoError(t, err)
				next = argmax(l)
			}
			require.Equal(t, g.GreedyIDs, got)
		})
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

var _ = math.Abs
