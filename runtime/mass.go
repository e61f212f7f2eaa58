package runtime

// MassMeter measures, over decoded tokens, how much of the activation mass
// Σ|a| (a = silu(gate)·up, the input of down_proj) of each layer's loaded
// neurons the neurons decode computes hold, next to what the best neurons of
// the same count per token would hold (issue: fidelity, activation mass). It
// needs the session's MaskedReference path (every loaded neuron computed,
// the skipped ones zeroed afterwards), which computes the same numbers as
// the sparse path up to float32 rounding; Session.Mass attaches it.
//
// Only tokens fed one at a time with an active set or a per-token pick
// (decode) are counted; prefill and dense layers are not.
type MassMeter struct {
	Layers []LayerMass // per layer; zero for layers decode computes whole
	keys   []uint32    // one token's |a| as orderKey (scratch)
}

// LayerMass is one layer's sums over the decoded tokens, float64.
type LayerMass struct {
	Tokens   int     // decoded tokens counted
	Loaded   int     // neurons stored
	Computed int     // neurons computed per token (up and down rows in gatefirst)
	Total    float64 // Σ_t Σ_loaded |a|
	Active   float64 // Σ_t Σ_computed |a|
	Best     float64 // Σ_t of the Computed largest |a| of token t
}

// Fraction returns Active/Total, Best/Total and the expected share of a
// uniformly random choice of Computed of the Loaded neurons, Computed/Loaded
// (0s when nothing was counted).
func (l LayerMass) Fraction() (active, best, random float64) {
	if l.Total == 0 {
		return 0, 0, 0
	}
	return l.Active / l.Total, l.Best / l.Total, float64(l.Computed) / float64(l.Loaded)
}

// Sum returns the sums over all counted layers (Loaded and Computed summed
// too, so Fraction's random share is weighted by layer size).
func (m *MassMeter) Sum() LayerMass {
	var s LayerMass
	for _, l := range m.Layers {
		if l.Tokens == 0 {
			continue
		}
		s.Tokens = max(s.Tokens, l.Tokens)
		s.Loaded += l.Loaded
		s.Computed += l.Computed
		s.Total += l.Total
		s.Active += l.Active
		s.Best += l.Best
	}
	return s
}

// observe adds one decoded token of layer i: a [kept] every loaded neuron's
// activation, mask which of them decode computes.
func (m *MassMeter) observe(i int, a []float32, mask []bool) {
	l := &m.Layers[i]
	l.Tokens++
	l.Loaded = len(a)
	m.keys = m.keys[:0]
	k := 0
	for j, v := range a {
		v = max(v, -v)
		m.keys = append(m.keys, orderKey(v))
		l.Total += float64(v)
		if mask[j] {
			l.Active += float64(v)
			k++
		}
	}
	l.Computed = k
	if k == 0 {
		return
	}
	thKey, _, _ := kthKey(m.keys, m.keys, k)
	th := fromKey(thKey)
	// The k largest: every value above th, then th for the rest.
	var sum float64
	above := 0
	for _, v := range a {
		if v = max(v, -v); v > th {
			sum += float64(v)
			above++
		}
	}
	l.Best += sum + float64(k-above)*float64(th)
}

// Mass attaches a MassMeter to the session and switches it to the masked
// reference path (MaskedReference), which it needs; nil detaches it.
func (s *Session) Mass(m *MassMeter) {
	if m != nil {
		m.Layers = make([]LayerMass, len(s.m.Layers))
		s.MaskedReference = true
	}
	s.mass = m
}
