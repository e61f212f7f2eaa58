package runtime

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Sampler picks the next token from logits. Temperature 0 is greedy (argmax,
// lowest id on ties). Otherwise logits are divided by Temperature, cut to the
// TopK most likely (0: no cut), then to the smallest set whose probability
// reaches TopP (1 or 0: no cut), and sampled from a seeded PCG stream, as HF
// generate's TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper.
type Sampler struct {
	Temperature float64
	TopK        int
	TopP        float64
	rng         *rand.Rand
	idx         []int
	prob        []float64
}

// NewSampler returns a sampler seeded with seed.
func NewSampler(temperature float64, topK int, topP float64, seed uint64) *Sampler {
	return &Sampler{Temperature: temperature, TopK: topK, TopP: topP, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Sample returns the chosen token id for logits [vocab].
func (s *Sampler) Sample(logits []float32) int {
	if s.Temperature <= 0 {
		return Argmax(logits)
	}
	V := len(logits)
	if cap(s.idx) < V {
		s.idx = make([]int, V)
		s.prob = make([]float64, V)
	}
	idx := s.idx[:V]
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		la, lb := logits[idx[a]], logits[idx[b]]
		return la > lb || (la == lb && idx[a] < idx[b])
	})
	n := V
	if s.TopK > 0 && s.TopK < n {
		n = s.TopK
	}
	prob := s.prob[:n]
	maxl := float64(logits[idx[0]])
	var sum float64
	for j := range prob {
		prob[j] = math.Exp((float64(logits[idx[j]]) - maxl) / s.Temperature)
		sum += prob[j]
	}
	if s.TopP > 0 && s.TopP < 1 {
		var c float64
		for j := range prob {
			c += prob[j] / sum
			if c >= s.TopP {
				n = j + 1
				break
			}
		}
		prob = prob[:n]
		sum = 0
		for _, p := range prob {
			sum += p
		}
	}
	r := s.rng.Float64() * sum
	for j, p := range prob {
		r -= p
		if r < 0 {
			return idx[j]
		}
	}
	return idx[n-1]
}

// Argmax returns the index of the largest value, the lowest on ties.
func Argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
