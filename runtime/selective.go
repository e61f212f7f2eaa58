package runtime

import (
	"fmt"
	"math"
	"sort"

	"github.com/selectinfer/sinf/format"
)

// Mode selects which FFN neurons decode computes (paper §5 and its baselines).
type Mode int

const (
	// Dense computes every loaded neuron: the dense model on a full file, the
	// γ-dense baseline on a slim one.
	Dense Mode = iota
	// SelectInfer computes the static (base) neurons plus dynamic neurons
	// picked from the prompt, φ·N in all.
	SelectInfer
	// CoreInfer computes φ·N neurons picked from the prompt alone (no static
	// set): CoreInfer on a full file, CoreInfer + selective loading on a slim
	// one, CoreInfer + random loading on a random one.
	CoreInfer
	// GateFirst picks the neurons per decoded token rather than once per
	// prompt (the CATS / Deja Vu family, beyond the paper): it computes the
	// gate_proj row of every loaded neuron, keeps the round(φ·N) rows whose
	// |silu(gate)|·w is largest for this token (w: GateWeights, calibrated
	// on the prompt at prefill), and reads up_proj and down_proj for those
	// rows only. Per decoded token a sliced layer reads γ·N gate
	// rows and φ·N up and down rows: γ/3 + 2φ/3 of the whole FFN (at γ = 0.7,
	// φ = 0.25 reads what SelectInfer's φ = 0.4 reads). Prefill computes every
	// loaded neuron, as in the other modes; α plays no role.
	GateFirst
	// Oracle is a bound, not a method: per decoded token it computes every
	// loaded neuron and keeps the round(φ·N) with the largest true |a| (a =
	// silu(gate)·up), zeroing the rest. It saves no bytes (it reads every
	// stored row); it says how good a per-token pick of that count could be.
	Oracle
)

// GateFirstPhi returns the φ at which GateFirst reads per decoded token
// what SelectInfer and CoreInfer read at phi from a γ file: γ/3 + 2φ'/3 = φ,
// so φ' = (3φ − γ)/2 (0.25 at γ = 0.7, φ = 0.4), rounded to 9 decimals; ≤ 0
// when no φ' does.
func GateFirstPhi(gamma, phi float64) float64 { return math.Round((3*phi-gamma)/2*1e9) / 1e9 }

// GateFirstSketchPhi is GateFirstPhi on a file whose sliced layers store
// up_proj sketches of share times their up_proj's bytes (SketchShare):
// γ/3·(1 + share) + 2φ'/3 = φ, so φ' = (3φ − γ·(1 + share))/2, lowered to
// a whole number of the N neurons (⌊φ'·N⌋/N, so that the rows decode
// rounds it to read no more than φ's bytes) and rounded to 9 decimals.
func GateFirstSketchPhi(gamma, phi, share float64, N int) float64 {
	p := (3*phi - gamma*(1+share)) / 2
	p = math.Floor(p*float64(N)+1e-9) / float64(N)
	return math.Round(p*1e9) / 1e9
}

// SketchShare returns the bytes of an SK2 sketch row over those of an up_proj
// row stored in d (10/32 bytes a weight over d's; 0.078 for F32, 0.156 for
// F16 and BF16, 0.294 for Q8_0, 0.556 for Q4_0), and 0 for a dtype that is
// not a weight dtype.
func SketchShare(d format.DType) float64 {
	e, b := d.Block()
	if !d.Weight() || e == 0 {
		return 0
	}
	return 10.0 / 32 / (float64(b) / float64(e))
}

// ModelSketchShare returns Σ sketch bytes / Σ up_proj bytes over m's
// sliced layers that store a sketch (0: none does).
func ModelSketchShare(m *Model) float64 {
	var sk, up int
	for i := range m.Layers {
		if f := &m.Layers[i].MLP; f.UpSketch.Rows > 0 {
			sk += f.UpSketch.Bytes()
			up += f.Up.Bytes()
		}
	}
	if up == 0 {
		return 0
	}
	return float64(sk) / float64(up)
}

// modeNames are the flag spellings of the modes, in Mode order.
var modeNames = [...]string{"dense", "selectinfer", "coreinfer", "gatefirst", "oracle"}

// ParseMode parses "dense", "selectinfer", "coreinfer", "gatefirst" or "oracle".
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown mode %q (want selectinfer, dense, coreinfer, gatefirst or oracle)", s)
}

func (m Mode) String() string { return modeNames[m] }

// PerToken reports whether the mode picks decode's neurons per token
// (GateFirst, Oracle) rather than once at prefill.
func (m Mode) PerToken() bool { return m == GateFirst || m == Oracle }

// Sparsity configures selective computation. Phi is φ, the fraction of the
// original N computed in decode; Alpha is α, the fraction of a token's
// positive activations kept when counting (paper §5; defaults 0.4 and 0.2).
type Sparsity struct {
	Mode  Mode
	Phi   float64
	Alpha float64
}

// DefaultSparsity is the paper's Table 1 setting.
var DefaultSparsity = Sparsity{Mode: SelectInfer, Phi: 0.4, Alpha: 0.2}

// Validate checks α ∈ (0,1] (gatefirst ignores it, but a bad value is still
// an error), φ ∈ (0,1], and for each sliced layer φ·N ≤ kept
// (φ ≤ γ) and, in selectinfer mode, base ≤ φ·N (δ ≤ φ); errors say which.
func (sp Sparsity) Validate(m *Model) error {
	if sp.Mode == Dense {
		return nil
	}
	if !(sp.Alpha > 0 && sp.Alpha <= 1) {
		return fmt.Errorf("alpha %g outside (0, 1]", sp.Alpha)
	}
	if !(sp.Phi > 0 && sp.Phi <= 1) {
		return fmt.Errorf("phi %g outside (0, 1]", sp.Phi)
	}
	N := m.Config.Intermediate
	target := RoundCount(sp.Phi, N)
	sliced := 0
	for i := range m.Layers {
		f := &m.Layers[i].MLP
		if !f.Sliced {
			continue
		}
		sliced++
		if target > f.Kept() {
			return fmt.Errorf("phi %g exceeds gamma: layer %d computes round(phi·N) = %d neurons but stores only %d (%.3f of N=%d)", sp.Phi, i, target, f.Kept(), float64(f.Kept())/float64(N), N)
		}
		if sp.Mode == SelectInfer && f.Base > target {
			return fmt.Errorf("delta exceeds phi: layer %d has %d base neurons (%.3f of N=%d) but phi %g computes only %d", i, f.Base, float64(f.Base)/float64(N), N, sp.Phi, target)
		}
	}
	if sliced == 0 {
		return fmt.Errorf("mode %v needs a file with sliced layers (convert one with sinf convert; --gamma 1 keeps every neuron)", sp.Mode)
	}
	return nil
}

// RoundCount returns round(frac·n), halves away from zero: the neuron counts
// of the paper's δ·N, γ·N and φ·N.
func RoundCount(frac float64, n int) int {
	return int(math.Round(frac * float64(n)))
}

// Counter accumulates, during prefill, how often each loaded neuron of each
// sliced layer is among the top α of a token's positive activations: per
// token with P positive activations, the round(α·P) largest are counted
// (ties: lower row). It implements Observer.
type Counter struct {
	Alpha  float64
	Counts [][]int32 // [layer][kept row]; nil for layers not counted
	model  *Model
	pos    []float32 // one token's positive activations, 0 elsewhere (scratch)
	keys   []uint32  // topScore's scratch
	rows   []int32   // one token's counted rows
}

// NewCounter returns a Counter for the sliced layers of m.
func NewCounter(m *Model, alpha float64) *Counter {
	c := &Counter{Alpha: alpha, Counts: make([][]int32, len(m.Layers)), model: m}
	for i := range m.Layers {
		if f := &m.Layers[i].MLP; f.Sliced {
			c.Counts[i] = make([]int32, f.Kept())
		}
	}
	return c
}

// ObserveFFN counts the top α of each token's positive activations. act is
// [T, kept] over all loaded rows (prefill computes every loaded neuron).
// topScore picks them (O(kept) per token): the rows above the k-th largest
// value, then rows equal to it in row order until k.
func (c *Counter) ObserveFFN(layer int, act []float32, T int, rows []int32) {
	counts := c.Counts[layer]
	if counts == nil {
		return
	}
	kept := len(counts)
	for t := 0; t < T; t++ {
		a := act[t*kept : (t+1)*kept]
		if len(c.pos) < kept {
			c.pos, c.keys, c.rows = make([]float32, kept), make([]uint32, 2*kept), make([]int32, 0, kept)
		}
		// The positive activations, every other value (NaN too) as 0: the k
		// ≤ P largest are then the k largest positive ones.
		pos, P := c.pos[:kept], 0
		for j, v := range a {
			p := float32(0)
			if v > 0 {
				p = v
				P++
			}
			pos[j] = p
		}
		k := RoundCount(c.Alpha, P)
		if k == 0 {
			continue
		}
		c.rows = topScore(c.rows[:0], pos, c.keys[:2*kept], k, false)
		for _, j := range c.rows {
			counts[j]++
		}
	}
}

// scoreKey maps v to a uint32 that orders as v does (m1 = keySigned: keys
// compare as the values do) or as |v| does (m1 = keyAbs). −0 and +0 get one
// key (their order is a tie), and a NaN ranks by its bits (with keySigned,
// above +Inf with the sign bit clear and below −Inf with it set; with keyAbs,
// above +Inf), so a selection by key always has a threshold and never loops
// or panics.
func scoreKey(v float32, m1 uint32) uint32 {
	u := math.Float32bits(v + 0) // −0 + 0 = +0
	return u ^ (uint32(int32(u)>>31) & m1) ^ 1<<31
}

// The masks of scoreKey: flip a negative value's bits below the sign (its
// order reversed), or clear its sign (|v|).
const (
	keySigned = 1<<31 - 1
	keyAbs    = 1 << 31
)

// orderKey is scoreKey(v, keySigned).
func orderKey(v float32) uint32 { return scoreKey(v, keySigned) }

// fromKey is orderKey's inverse (for +0 and any NaN, the value it keyed).
func fromKey(u uint32) float32 {
	return math.Float32frombits(u ^ (^uint32(int32(u)>>31) | 1<<31))
}

// kthKey returns the k-th largest of keys (1 ≤ k ≤ len(keys)), how many
// keys are larger and how many equal it: a radix select, one byte a pass
// from the top, keeping the keys of the byte that holds the k-th (a
// histogram pass, then a compaction without branches into work, [len(keys)]
// scratch that may be keys itself, which then ends overwritten). Against a median-of-three
// quickselect and the two passes that followed it, a SmolLM2-135M layer's
// GateFirst pick (1075 scores, k = 384, a new vector each call:
// BenchmarkTopSiLU, 2-vCPU Intel Xeon) went 16.4 → 5.4 µs: the quickselect's
// and the passes' compares of fresh data mispredicted.
func kthKey(keys, work []uint32, k int) (th uint32, above, equal int) {
	var hists [4][256]int32
	for shift := 24; ; shift -= 8 {
		// Four histograms, so that runs of keys in one bucket do not chain
		// each increment on the last one's store.
		hists = [4][256]int32{}
		i := 0
		for ; i+4 <= len(keys); i += 4 {
			hists[0][byte(keys[i]>>shift)]++
			hists[1][byte(keys[i+1]>>shift)]++
			hists[2][byte(keys[i+2]>>shift)]++
			hists[3][byte(keys[i+3]>>shift)]++
		}
		for ; i < len(keys); i++ {
			hists[0][byte(keys[i]>>shift)]++
		}
		hist := &hists[0]
		for b := range hist {
			hist[b] += hists[1][b] + hists[2][b] + hists[3][b]
		}
		d := 255
		for k > int(hist[d]) {
			k -= int(hist[d])
			above += int(hist[d])
			d--
		}
		th |= uint32(d) << shift
		if shift == 0 {
			return th, above, int(hist[d])
		}
		n := 0
		work := work[:len(keys)]
		for _, u := range keys {
			work[n] = u
			n += b2i(byte(u>>shift) == byte(d))
		}
		keys = work[:n]
		if n == 1 {
			return keys[0], above, 1
		}
	}
}

// b2i is 1 for true and 0 for false (compiled without a branch).
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ActiveSet returns, for one sliced layer, the rows decode computes:
// selectinfer: rows [0, base) (static) then the most frequently counted other
// rows until round(φ·N) rows; coreinfer: the round(φ·N) most frequently
// counted rows. Frequency ties go to the lower row. Rows are returned sorted
// ascending (static first in selectinfer mode stays true because static rows
// are the lowest rows).
func ActiveSet(f *MLP, counts []int32, sp Sparsity, N int) []int32 {
	target := min(RoundCount(sp.Phi, N), f.Kept())
	static := 0
	if sp.Mode == SelectInfer {
		static = min(f.Base, target)
	}
	rest := make([]int32, 0, f.Kept()-static)
	for j := static; j < f.Kept(); j++ {
		rest = append(rest, int32(j))
	}
	sort.SliceStable(rest, func(x, y int) bool { return counts[rest[x]] > counts[rest[y]] })
	out := make([]int32, 0, target)
	for j := 0; j < static; j++ {
		out = append(out, int32(j))
	}
	out = append(out, rest[:target-static]...)
	sort.Slice(out, func(x, y int) bool { return out[x] < out[y] })
	return out
}
