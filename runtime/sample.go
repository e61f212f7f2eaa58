package runtime

import (
	"math"
	"math/rand/v2"
	"slices"
)

// DefaultPenaltyLastN is the penalty window of llama.cpp (repeat_last_n 64):
// the repeat, presence and frequency penalties look at the last 64 tokens.
const DefaultPenaltyLastN = 64

// Constraint restricts which tokens may come next (structured output: a
// JSON document, a schema). The sampler masks every token Allowed refuses
// before any other step, and calls Accept with the token it picks.
type Constraint interface {
	// Mask sets allowed[id] for every token id that may come next (len
	// allowed is the vocabulary); it returns how many are allowed.
	Mask(allowed []bool) int
	// Allowed reports whether token id may come next.
	Allowed(id int) bool
	// Accept advances the constraint past token id (one Allowed said yes).
	Accept(id int)
}

// TokenLogprob is one token's natural-log probability.
type TokenLogprob struct {
	ID      int
	Logprob float64
}

// Logprobs is what the sampler reports of one step: the chosen token's log
// probability and the TopLogprobs most likely tokens' (most likely first,
// lowest id on ties), all under the model's own distribution,
// log softmax(logits) in float64, before penalties, temperature, cuts and
// constraints (as OpenAI's API and vLLM's default report them).
type Logprobs struct {
	Chosen TokenLogprob
	Top    []TokenLogprob
}

// Sampler picks the next token from logits [vocab]. The steps, in order:
//
//  1. Constraint (when set): tokens it does not allow are removed.
//  2. Penalties over the window of the last PenaltyLastN tokens of the
//     sequence (prompt and generated, as llama.cpp's sampler after
//     common_sampler_accept of the prompt; 0: no penalties, −1: the whole
//     sequence): each distinct token t seen c > 0 times has its logit l
//     replaced by l·RepeatPenalty when l < 0 and l/RepeatPenalty otherwise
//     (HF RepetitionPenaltyLogitsProcessor; 1 or 0: off), then
//     l − c·FrequencyPenalty − PresencePenalty (OpenAI's formula; 0: off).
//  3. Temperature 0: greedy (argmax, lowest id on ties).
//  4. Otherwise logits are divided by Temperature, cut to the TopK most likely
//     (0: no cut), then to the smallest set whose probability reaches TopP
//     (1 or 0: no cut), then to the tokens whose probability is at least
//     MinP times the most likely one's (0: no cut), and sampled from a seeded
//     PCG stream: HF generate's TemperatureLogitsWarper, TopKLogitsWarper,
//     TopPLogitsWarper and MinPLogitsWarper in that order.
//
// With Logprobs set, Last reports each step's log probabilities. Start
// gives the prompt (the penalties' first window); Sample adds each pick.
// A Sampler is not safe for concurrent use.
type Sampler struct {
	SamplingParams
	Constraint Constraint // nil: none
	// Logprobs makes Sample record the chosen token's log probability and
	// the TopLogprobs most likely tokens' (Last).
	Logprobs    bool
	TopLogprobs int

	rng     *rand.Rand
	idx     []int
	radix   radixScratch
	topIDs  []int // recordLogprobs' top ids
	prob    []float64
	work    []float32
	allowed []bool
	last    Logprobs

	window []int       // the penalty window, oldest first (a ring once full)
	head   int         // ring: index of the oldest entry once len(window) == PenaltyLastN
	counts map[int]int // token → occurrences in window
}

// NewSampler returns a sampler seeded with seed: temperature, top-k and top-p
// only (no penalties, no min-p).
func NewSampler(temperature float64, topK int, topP float64, seed uint64) *Sampler {
	return NewSamplerParams(SamplingParams{Temperature: temperature, TopK: topK, TopP: topP}, seed)
}

// NewSamplerParams returns a sampler of p seeded with seed.
func NewSamplerParams(p SamplingParams, seed uint64) *Sampler {
	return &Sampler{SamplingParams: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// penalized reports whether step 2 changes anything.
func (s *Sampler) penalized() bool {
	return s.PenaltyLastN != 0 && ((s.RepeatPenalty != 0 && s.RepeatPenalty != 1) || s.PresencePenalty != 0 || s.FrequencyPenalty != 0)
}

// Greedy reports whether Sample is the argmax of the raw logits (no
// constraint, penalty or logprobs), so a backend may take the argmax on its
// own device.
func (s *Sampler) Greedy() bool {
	return s.Temperature <= 0 && s.Constraint == nil && !s.penalized() && !s.Logprobs
}

// Start empties the penalty window and fills it with the prompt's ids
// (Session.Generate calls it before the first Sample).
func (s *Sampler) Start(prompt []int) {
	s.window, s.head = s.window[:0], 0
	clear(s.counts)
	if !s.penalized() {
		return
	}
	for _, id := range prompt {
		s.push(id)
	}
}

// push adds id to the penalty window, dropping the oldest past PenaltyLastN.
func (s *Sampler) push(id int) {
	if s.counts == nil {
		s.counts = map[int]int{}
	}
	if n := s.PenaltyLastN; n > 0 && len(s.window) == n {
		old := s.window[s.head]
		if s.counts[old]--; s.counts[old] == 0 {
			delete(s.counts, old)
		}
		s.window[s.head] = id
		s.head = (s.head + 1) % n
	} else {
		s.window = append(s.window, id)
	}
	s.counts[id]++
}

// Last returns the log probabilities of the last Sample (with Logprobs set);
// its Top slice is reused by the next Sample.
func (s *Sampler) Last() Logprobs { return s.last }

// Sample returns the chosen token id for logits [vocab]. logits is not
// changed.
func (s *Sampler) Sample(logits []float32) int {
	id := s.pick(logits)
	if s.Logprobs {
		s.recordLogprobs(logits, id)
	}
	if s.Constraint != nil {
		s.Constraint.Accept(id)
	}
	if s.penalized() {
		s.push(id)
	}
	return id
}

func (s *Sampler) pick(logits []float32) int {
	if s.Constraint != nil && s.Temperature <= 0 && !s.penalized() {
		return s.greedyConstrained(logits)
	}
	logits = s.adjusted(logits)
	if s.Temperature <= 0 {
		return Argmax(logits)
	}
	idx, prob, sum := s.candidates(logits)
	r := s.rng.Float64() * sum
	for j, p := range prob {
		r -= p
		if r < 0 {
			return idx[j]
		}
	}
	return idx[len(prob)-1]
}

// Distribution returns in dst [vocab] the probability of each token id that
// Sample would draw from logits now (steps 1–4; greedy: 1 at its pick),
// without drawing or changing any state. For tests and for reporting the
// post-sampling distribution.
func (s *Sampler) Distribution(logits []float32, dst []float64) []float64 {
	dst = append(dst[:0], make([]float64, len(logits))...)
	w := s.adjusted(logits)
	if s.Temperature <= 0 {
		if s.Constraint != nil && !s.penalized() {
			dst[s.greedyConstrained(logits)] = 1
		} else {
			dst[Argmax(w)] = 1
		}
		return dst
	}
	idx, prob, sum := s.candidates(w)
	for j, p := range prob {
		dst[idx[j]] = p / sum
	}
	return dst
}

// adjusted returns logits after steps 1 and 2 (a copy in s.work when they
// change anything).
func (s *Sampler) adjusted(logits []float32) []float32 {
	if s.Constraint == nil && !s.penalized() {
		return logits
	}
	V := len(logits)
	if cap(s.work) < V {
		s.work = make([]float32, V)
	}
	w := s.work[:V]
	copy(w, logits)
	if s.Constraint != nil {
		a := s.mask(V)
		neg := float32(math.Inf(-1))
		for i, ok := range a {
			if !ok {
				w[i] = neg
			}
		}
	}
	if s.penalized() {
		s.applyPenalties(w)
	}
	return w
}

// mask returns the constraint's allowed tokens [V] in s.allowed.
func (s *Sampler) mask(V int) []bool {
	if cap(s.allowed) < V {
		s.allowed = make([]bool, V)
	}
	a := s.allowed[:V]
	clear(a)
	s.Constraint.Mask(a)
	return a
}

// candidates is step 4 before the draw: the kept token ids, most likely
// first, with their unnormalized weights exp((l − l_max)/T) and their sum.
func (s *Sampler) candidates(logits []float32) ([]int, []float64, float64) {
	V := len(logits)
	if cap(s.idx) < V {
		s.idx = make([]int, V)
		s.prob = make([]float64, V)
	}
	n := V
	if s.TopK > 0 && s.TopK < n {
		n = s.TopK
	}
	idx := s.idx[:V]
	if n <= maxTopSelect && n < V {
		idx = topByLogit(s.idx[:n], logits)
	} else {
		sortByLogit(idx, logits, &s.radix)
	}
	// masked tokens (−Inf) never enter the candidates
	for n > 1 && math.IsInf(float64(logits[idx[n-1]]), -1) {
		n--
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
				prob = prob[:j+1]
				break
			}
		}
	}
	if s.MinP > 0 {
		// prob[0] = exp(0) = 1 is the most likely token's weight, so
		// p_j ≥ MinP·p_max is prob[j] ≥ MinP; the first token always stays.
		for j := 1; j < len(prob); j++ {
			if prob[j] < s.MinP {
				prob = prob[:j]
				break
			}
		}
	}
	sum = 0
	for _, p := range prob {
		sum += p
	}
	return idx[:len(prob)], prob, sum
}

// greedyConstrained returns the most likely allowed token (lowest id on
// ties), trying tokens from the most likely down, so that a model that
// already follows the constraint costs one Allowed call.
func (s *Sampler) greedyConstrained(logits []float32) int {
	best := Argmax(logits)
	if s.Constraint.Allowed(best) {
		return best
	}
	a := s.mask(len(logits))
	if !slices.Contains(a, true) {
		return best // nothing is allowed: the constraint is finished or broken; let EOS or the limit end it
	}
	best = -1
	for i, ok := range a {
		if ok && (best < 0 || logits[i] > logits[best]) {
			best = i
		}
	}
	return best
}

// applyPenalties is step 2 on w, in place.
func (s *Sampler) applyPenalties(w []float32) {
	rp := s.RepeatPenalty
	if rp == 0 {
		rp = 1
	}
	for id, c := range s.counts {
		if id < 0 || id >= len(w) {
			continue
		}
		l := float64(w[id])
		if l < 0 {
			l *= rp
		} else {
			l /= rp
		}
		l -= float64(c)*s.FrequencyPenalty + s.PresencePenalty
		w[id] = float32(l)
	}
}

// recordLogprobs fills s.last for the chosen id from the raw logits.
func (s *Sampler) recordLogprobs(logits []float32, id int) {
	m := float64(logits[0])
	for _, v := range logits {
		m = max(m, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - m)
	}
	lse := m + math.Log(sum)
	s.last.Chosen = TokenLogprob{ID: id, Logprob: float64(logits[id]) - lse}
	k := min(s.TopLogprobs, len(logits))
	if cap(s.topIDs) < k {
		s.topIDs = make([]int, k)
	}
	top := s.last.Top[:0]
	for _, i := range topByLogit(s.topIDs[:k], logits) { // ties: the lower id first
		top = append(top, TokenLogprob{ID: i, Logprob: float64(logits[i]) - lse})
	}
	s.last.Top = top
}

// Argmax returns the index of the largest value, the lowest on ties (0 for
// an empty x; a NaN is never larger, so x[0] NaN gives 0). Eight values a
// step are compared with the largest so far and only a step that holds a
// larger one is searched: greedy sampling over SmolLM2's 49152 logits took
// 34.5 µs one by one, 16.2 µs so (2-vCPU Intel Xeon), and in a batched
// server step the sessions sample in turn on the CPUs the step leaves them
// (BenchmarkBatchGenerate at B=4: the wait for their tokens went 280–300 →
// 160–190 µs a step).
func Argmax(x []float32) int {
	if len(x) == 0 {
		return 0
	}
	best, bv := 0, x[0]
	i := 0
	for ; i+8 <= len(x); i += 8 {
		y := x[i : i+8 : i+8]
		if y[0] > bv || y[1] > bv || y[2] > bv || y[3] > bv || y[4] > bv || y[5] > bv || y[6] > bv || y[7] > bv {
			for j, v := range y {
				if v > bv {
					best, bv = i+j, v
				}
			}
		}
	}
	for ; i < len(x); i++ {
		if x[i] > bv {
			best, bv = i, x[i]
		}
	}
	return best
}

// maxTopSelect is the largest top-k that candidates selects by insertion
// (topByLogit, one compare for most logits) instead of sorting them all.
const maxTopSelect = 128

// topByLogit sets dst to the len(dst) first ids of sortByLogit's order of
// logits (len(dst) ≤ len(logits)) by one pass that keeps them sorted: a
// logit enters only above the last one kept, and after those it equals
// (their ids are smaller). It returns dst.
func topByLogit(dst []int, logits []float32) []int {
	k, n := len(dst), 0
	if k == 0 {
		return dst
	}
	for i, l := range logits {
		j := k - 1
		if n < k {
			j = n
			n++
		} else if !(l > logits[dst[j]]) {
			continue
		}
		for j > 0 && logits[dst[j-1]] < l {
			dst[j] = dst[j-1]
			j--
		}
		dst[j] = i
	}
	return dst
}

// radixScratch is sortByLogit's working space, kept across calls.
type radixScratch struct {
	keys, keys2 []uint32
	idx2        []int
}

// sortByLogit sets idx [len(logits)] to the token ids ordered by logit,
// largest first, equal logits by id, smallest first (−0 equals +0). That
// is a total order on logits without NaN, so every correct sort gives this
// one permutation; this one is a least-significant-digit radix sort of the
// logits' order-preserving 32-bit keys in three passes of 11, 11 and 10
// bits, stable, so equal logits keep ascending ids. The comparison sort it
// replaced took 11 ms a token over SmolLM2's 49152 logits (BenchmarkSample),
// as long as a decode step.
func sortByLogit(idx []int, logits []float32, s *radixScratch) {
	V := len(logits)
	if V == 0 {
		return
	}
	if cap(s.keys) < V {
		s.keys, s.keys2, s.idx2 = make([]uint32, V), make([]uint32, V), make([]int, V)
	}
	keys, keys2, ids, ids2 := s.keys[:V], s.keys2[:V], idx, s.idx2[:V]
	for i, l := range logits {
		b := math.Float32bits(l)
		switch {
		case l == 0:
			b = 1 << 31 // −0 as +0
		case b>>31 != 0:
			b = ^b
		default:
			b |= 1 << 31
		}
		keys[i], idx[i] = ^b, i // ascending keys: descending logits
	}
	for shift := uint(0); shift < 32; shift += 11 {
		var count [1 << 11]int
		for _, k := range keys {
			count[k>>shift&(1<<11-1)]++
		}
		if count[keys[0]>>shift&(1<<11-1)] == V {
			continue // one digit for all: the order stands
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for i, k := range keys {
			d := k >> shift & (1<<11 - 1)
			keys2[count[d]], ids2[count[d]] = k, ids[i]
			count[d]++
		}
		keys, keys2, ids, ids2 = keys2, keys, ids2, ids
	}
	if &ids[0] != &idx[0] { // an odd count of passes moved the order
		copy(idx, ids)
	}
}
