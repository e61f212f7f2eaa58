package kernels

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// AttnShape describes causal grouped-query attention of T new tokens over a
// KV cache (HF LlamaAttention / Qwen2Attention, eager path).
type AttnShape struct {
	Heads, KVHeads, HeadDim int
	Pos                     int // positions already in the cache before the T tokens
	T                       int
}

// Cache is one layer's key or value cache for KVHeads heads of HeadDim
// values a position, as float32 (F32) or as IEEE 754 half floats (F16: half
// the memory and the bytes attention reads, llama.cpp's default cache type,
// at F16's 11-bit precision); exactly one of the two is set. It is stored
// head-major: head g's values for position p are values
// [(g·P + p)·HeadDim, (g·P + p + 1)·HeadDim), P = Positions(), so a head's
// keys (or values) are one contiguous stream that attention reads from its
// start. Position-major rows (the KVHeads·HeadDim values of a position
// together, as the K and V projections leave them) put a head's rows
// KVHeads·HeadDim values apart: at 2 or 4 KiB (Llama-3.2-1B's eight KV heads
// of 64 float32, Llama-3.2-3B's of 128) every row falls in the same few
// cache sets, and a group's query heads, reading the same rows in turn,
// found them evicted. BenchmarkAttentionDecode, Llama-3.2-1B's heads at
// position 1000, 2-vCPU Intel Xeon, two alternated rounds, position-major →
// head-major: F32 1.11–1.13 → 0.49–0.50 ms a layer at one thread, 0.63–0.94
// → 0.20–0.21 at two; F16 0.62 → 0.34–0.37 and 0.26 → 0.17 (SmolLM2's rows,
// 768 bytes apart, were not evicted: alike). Decode of the 1B-shape Q4_0
// file after a 1024-token prompt at two threads (sinf bench) went 19.4–20.2
// → 24.7–25.0 tokens/s with an F32 cache and 24.1–24.6 → 25.2–27.1 with
// F16, its prefill 152–156 → 198–200 tokens/s (F32).
type Cache struct {
	F32              []float32
	F16              []uint16
	KVHeads, HeadDim int
}

// NewCache returns a zeroed cache of dtype d (format.F32 or format.F16; any
// other panics) for positions positions of kvHeads heads of headDim values.
func NewCache(d format.DType, positions, kvHeads, headDim int) Cache {
	n := positions * kvHeads * headDim
	c := Cache{KVHeads: kvHeads, HeadDim: headDim}
	switch d {
	case format.F32:
		c.F32 = make([]float32, n)
	case format.F16:
		c.F16 = make([]uint16, n)
	default:
		panic(fmt.Sprintf("kernels: a %v KV cache (want F32 or F16)", d))
	}
	return c
}

// Len returns the number of values the cache holds.
func (c Cache) Len() int { return len(c.F32) + len(c.F16) }

// Positions returns the number of positions the cache holds.
func (c Cache) Positions() int {
	if kvd := c.KVHeads * c.HeadDim; kvd > 0 {
		return c.Len() / kvd
	}
	return 0
}

// DType returns the cache's element type.
func (c Cache) DType() format.DType {
	if c.F16 != nil {
		return format.F16
	}
	return format.F32
}

// Put stores rows, whole positions of KVHeads·HeadDim values each (position
// pos, pos+1, …; a position's heads one after the other, as the K and V
// projections leave them), rounded to the nearest F16 (ties to even,
// format.F32ToF16's value; a NaN stays a NaN, its payload as the kernel set
// keeps it) in an F16 cache. It panics on rows that are not whole
// positions or do not fit.
func (c Cache) Put(pos int, rows []float32) {
	hd, kvd, P := c.HeadDim, c.KVHeads*c.HeadDim, c.Positions()
	if kvd == 0 || len(rows)%kvd != 0 || pos < 0 || pos+len(rows)/kvd > P {
		panic(fmt.Sprintf("kernels: Cache.Put of %d values at position %d into %d positions of %d", len(rows), pos, P, kvd))
	}
	for t := 0; t < len(rows)/kvd; t++ {
		for g := 0; g < c.KVHeads; g++ {
			src := rows[t*kvd+g*hd : t*kvd+(g+1)*hd]
			off := (g*P + pos + t) * hd
			if c.F16 == nil {
				copy(c.F32[off:off+hd], src)
				continue
			}
			dst := c.F16[off : off+hd]
			n := hd &^ 7
			if n > 0 {
				active.toF16(&dst[0], &src[0], n)
			}
			for i := n; i < hd; i++ {
				dst[i] = format.F32ToF16(src[i])
			}
		}
	}
}

// head returns the address of head g's values at position 0 (its rows
// follow, HeadDim values apart), the cache's dtype index (dtIndex) and its
// element size in bytes.
func (c Cache) head(g int) (p unsafe.Pointer, d, es int) {
	off := g * c.Positions() * c.HeadDim
	if c.F16 != nil {
		return unsafe.Pointer(&c.F16[off]), 1, 2
	}
	return unsafe.Pointer(&c.F32[off]), 0, 4
}

// fits reports whether the cache holds n positions of a's heads.
func (c Cache) fits(a AttnShape, n int) bool {
	return c.KVHeads == a.KVHeads && c.HeadDim == a.HeadDim && c.Positions() >= n
}

// Attention computes, for token t < T at position Pos+t and head h,
//
//	out[t,h] = Σ_{p ≤ Pos+t} softmax_p(q[t,h]·k[p,g]/√HeadDim) · v[p,g],  g = h / (Heads/KVHeads)
//
// Shapes (row-major float32): q and out [T, Heads·HeadDim]; kc and vc
// caches of a's KVHeads and HeadDim for at least Pos+T positions, already
// holding the T new tokens' keys and values, both of one dtype (it panics
// otherwise). Token-head pairs are split across the pool's workers, or
// from attnTokens tokens on (a prompt) a head's blocks of attnTokens tokens,
// whose scores and values go through the matrix micro-kernels
// (attendBlock): BenchmarkAttentionPrefill, 2-vCPU Intel Xeon, blocks
// against pairs in one run, Llama-3.2-1B's heads over a 512-token prompt
// 30.4 → 21.0 ms at one thread and 16.3 → 10.5 at two (F32 cache; F16
// 30.6 → 23.0 and 17.4 → 11.7), SmolLM2-135M's over 64 tokens 171 → 141 µs
// at one thread and 103 → 79 at two;
// the 1B-shape Q4_0 file's prefill of 1024 tokens at two threads (sinf
// bench, two alternated rounds) 202–205 → 217–222 tokens/s. Softmax is
// computed in float32 with the maximum subtracted.
func Attention(p *Pool, out, q []float32, kc, vc Cache, a AttnShape) {
	qd := a.Heads * a.HeadDim
	checkLen("Attention q", q, a.T*qd)
	checkLen("Attention out", out, a.T*qd)
	if !kc.fits(a, a.Pos+a.T) || !vc.fits(a, a.Pos+a.T) || kc.DType() != vc.DType() {
		panic(fmt.Sprintf("kernels: Attention: caches of %d %v and %d %v values (%d×%d and %d×%d heads), want %d positions of %d×%d of one dtype",
			kc.Len(), kc.DType(), vc.Len(), vc.DType(), kc.KVHeads, kc.HeadDim, vc.KVHeads, vc.HeadDim, a.Pos+a.T, a.KVHeads, a.HeadDim))
	}
	if tb := active.attnBlock(a); tb > 0 {
		p.run(job{op: opAttention, ks: active, dst: out, x: q, k: kc, v: vc, attn: a, t: tb}, (a.T+tb-1)/tb*a.Heads)
		return
	}
	p.run(job{op: opAttention, ks: active, dst: out, x: q, k: kc, v: vc, attn: a}, a.T*a.Heads)
}

// attnTokens is the query tokens one unit of a blocked Attention computes
// (attendBlock), a multiple of every set's gemm tokens (gt).
const attnTokens = 16

// attnScratch is the float32s of scratch a unit of a blocked Attention
// over positions positions of heads of headDim values uses: attnTokens
// tokens' scores (positions rounded up to 16), and for an F16 cache the
// positions' values as float32.
func attnScratch(positions, headDim int, f16 bool) int {
	n := attnTokens * ((positions + 15) &^ 15)
	if f16 {
		n += positions * headDim
	}
	return n
}

// AttentionScratchBytes is the scratch memory threads kernel threads hold
// after an Attention of tokens new tokens over positions positions of heads
// of headDim values, F16 or float32 cache, where it runs blocked (tokens ≥
// attnTokens: attnScratch float32s each; 0 otherwise, the one-pair scratch
// being a row of scores): runtime.EstimateMemory.
func AttentionScratchBytes(threads, tokens, positions, headDim int, f16 bool) int64 {
	if tokens < attnTokens {
		return 0
	}
	return int64(threads) * int64(attnScratch(positions, headDim, f16)) * 4
}

// attnPairs makes Attention compute one token-head pair at a time always
// (benchmarks only: BenchmarkAttentionPrefill's "pairs").
var attnPairs = false

// attnBlock returns the query tokens a unit of Attention of shape a
// computes on set ks blocked (attendBlock), or 0 where it computes them one
// token-head pair at a time (attendHead): prompts shorter than attnTokens,
// and heads whose width the micro-kernels do not divide.
func (ks *kernelSet) attnBlock(a AttnShape) int {
	if a.T < attnTokens || attnPairs || a.HeadDim%ks.gblk != 0 || attnTokens%ks.gt != 0 {
		return 0
	}
	return attnTokens
}

// attentionRange runs the units [lo, hi) of an Attention job: token-head
// pairs (attendHead: the scores as one dotRows call over the head's cached
// keys, softmax with expSum, and the values as one axpyRows call), or where
// j.t > 0 a head's block of j.t tokens (attendBlock). For an AttentionBatch
// job unit u is token u/Heads of its own cache.
func attentionRange(ks *kernelSet, j *job, lo, hi int, s *scratch) {
	a := j.attn
	hd := a.HeadDim
	qd := a.Heads * hd
	if j.t > 0 { // blocked: unit u is head u%Heads of block u/Heads in balancedToken's order
		nblk := (a.T + j.t - 1) / j.t
		for u := lo; u < hi; u++ {
			t0 := balancedToken(u/a.Heads, nblk) * j.t
			attendBlock(ks, j.dst, j.x, j.k, j.v, u%a.Heads, t0, min(t0+j.t, a.T), a, s.att)
		}
		return
	}
	for u := lo; u < hi; u++ {
		var t, n int
		k, v := j.k, j.v
		if j.kvb != nil { // AttentionBatch: one token per cache
			t = u / a.Heads
			n, k, v = j.pos[t]+1, j.kvb[t], j.kvb[len(j.kvb)/2+t]
		} else {
			t = balancedToken(u/a.Heads, a.T)
			n = a.Pos + t + 1
		}
		h := u % a.Heads
		attendHead(ks, j.dst[t*qd+h*hd:t*qd+(h+1)*hd], j.x[t*qd+h*hd:t*qd+(h+1)*hd], k, v, h, n, a, s.att[:(n+15)&^15])
	}
}

// attendHead sets o to head h's attention output for query qh over the
// first n positions of the caches k and v (the shape's rows), att the
// scores' scratch (n floats rounded up to a multiple of 16: softmax's
// exponentials run as one expSum call, the padding set to −Inf, whose
// e^(x−max) is exactly 0).
func attendHead(ks *kernelSet, o, qh []float32, kc, vc Cache, h, n int, a AttnShape, att []float32) {
	g := h / (a.Heads / a.KVHeads)
	k, d, es := kc.head(g)
	v, _, _ := vc.head(g)
	dotKeys(ks, d, es, k, qh, att[:n])
	inv := softmaxRow(ks, att, n, a.HeadDim)
	clear(o)
	addValues(ks, d, es, o, v, 0, att[:n])
	for i := range o {
		o[i] *= inv
	}
}

// attendBlock sets the outputs of head h for the query tokens [t0, t1) of
// an Attention of shape a (q and out as there), as attendHead would for
// each, through the matrix micro-kernels: the scores of a block of tokens
// and positions at once (gemm: each key row read once for gt tokens), then
// each token's softmax over its own positions (the later ones set to −Inf,
// whose e^(x−max) is exactly 0), then the values (gemmT: each value row
// once for tt tokens, over the positions all of them see). att is the
// scratch: (t1−t0)·ns scores, ns the last token's positions rounded up to
// 16, and for an F16 cache those positions' values converted to float32
// (attnScratch). The sums differ from attendHead's in their order only
// (TestAttention's tolerance against float64), except where a weight
// underflowed to exactly 0 against a value of ±Inf or NaN: attendHead skips
// the term, gemmT's 0·Inf is a NaN.
func attendBlock(ks *kernelSet, out, q []float32, kc, vc Cache, h, t0, t1 int, a AttnShape, att []float32) {
	hd, qd := a.HeadDim, a.Heads*a.HeadDim
	g := h / (a.Heads / a.KVHeads)
	k, d, es := kc.head(g)
	v, _, _ := vc.head(g)
	ns := (a.Pos + t1 + 15) &^ 15 // a token's scores: the last token's positions, rounded up
	S := att[:(t1-t0)*ns]
	clear(S) // gemm adds to it
	scores := func(t int) []float32 { return S[(t-t0)*ns : (t-t0+1)*ns] }
	t := t0
	for ; t+ks.gt <= t1; t += ks.gt {
		n, p := a.Pos+t+ks.gt, 0 // the tile's last token's positions
		for ; p+ks.gr <= n; p += ks.gr {
			ks.gemm[d](unsafe.Add(k, p*es*hd), es*hd, &q[t*qd+h*hd], 4*qd, hd, &scores(t)[p], 4*ns)
		}
		for u := t; u < t+ks.gt; u++ {
			if m := a.Pos + u + 1 - p; m > 0 {
				dotKeys(ks, d, es, unsafe.Add(k, p*es*hd), q[u*qd+h*hd:u*qd+(h+1)*hd], scores(u)[p:p+m])
			}
		}
	}
	for ; t < t1; t++ {
		dotKeys(ks, d, es, k, q[t*qd+h*hd:t*qd+(h+1)*hd], scores(t)[:a.Pos+t+1])
	}
	var inv [attnTokens]float32
	for t := t0; t < t1; t++ {
		st, n := scores(t), a.Pos+t+1
		inv[t-t0] = softmaxRow(ks, st, n, hd)
		clear(st[(n+15)&^15:]) // later positions the gemm computed
		clear(out[t*qd+h*hd : t*qd+(h+1)*hd])
	}
	if d == 1 { // gemmT reads float32 rows
		n := (a.Pos + t1) * hd
		buf := att[len(S) : len(S)+n]
		nc := n / ks.blk * ks.blk
		if nc > 0 {
			ks.cvt[1](&buf[0], v, nc)
		}
		if nc < n {
			genericSet.cvt[1](&buf[nc], unsafe.Add(v, 2*nc), n-nc)
		}
		v = unsafe.Pointer(&buf[0])
	}
	ct := hd / ks.tc * ks.tc
	t = t0
	for ; t+ks.tt <= t1; t += ks.tt {
		// gemmT over the positions every token of the tile sees (it
		// multiplies zero weights too: a later position's Inf value would
		// make an earlier token's 0·Inf a NaN), then each token's own later
		// positions, and the columns past the last tile
		p0 := a.Pos + t + 1
		for c := 0; c < ct; c += ks.tc {
			ks.gemmT(unsafe.Add(v, 4*c), 4*hd, &scores(t)[0], 4*ns, &out[t*qd+h*hd+c], 4*qd, p0)
		}
		for u := t; u < t+ks.tt; u++ {
			o := out[u*qd+h*hd : u*qd+(h+1)*hd]
			if ct < hd {
				addValues(ks, 0, 4, o, v, ct, scores(u)[:p0])
			}
			if n := a.Pos + u + 1; n > p0 {
				addValues(ks, 0, 4, o, unsafe.Add(v, 4*hd*p0), 0, scores(u)[p0:n])
			}
		}
	}
	for ; t < t1; t++ {
		addValues(ks, 0, 4, out[t*qd+h*hd:t*qd+(h+1)*hd], v, 0, scores(t)[:a.Pos+t+1])
	}
	for t := t0; t < t1; t++ {
		o := out[t*qd+h*hd : t*qd+(h+1)*hd]
		for i := range o {
			o[i] *= inv[t-t0]
		}
	}
}

// dotKeys sets dst[p] = q·k_p for p < len(dst), k_p the rows of len(q)
// values of dtype index d (es bytes each) at k.
func dotKeys(ks *kernelSet, d, es int, k unsafe.Pointer, q, dst []float32) {
	hd := len(q)
	nb := hd / ks.blk * ks.blk
	if nb > 0 {
		ks.dotRows[d](k, es*hd, nil, &q[0], nb, len(dst), &dst[0], 0)
	} else {
		clear(dst)
	}
	for p := 0; nb < hd && p < len(dst); p++ {
		dst[p] += genericSet.dot1[d](unsafe.Add(k, es*(p*hd+nb)), &q[nb], hd-nb)
	}
}

// softmaxRow turns st[:n], one token's scores over n positions, into
// e^(x−max), x = score/√headDim, setting st[n:] up to a multiple of 16 to
// −Inf (whose e^(x−max) is exactly 0) so that one expSum call runs on
// whole vectors; it returns 1/Σ. A NaN score makes the sum NaN, whatever
// the maximum.
func softmaxRow(ks *kernelSet, st []float32, n, headDim int) float32 {
	scale := float32(1 / math.Sqrt(float64(headDim)))
	maxv := float32(math.Inf(-1))
	for p := range st[:n] {
		v := st[p] * scale
		st[p] = v
		if v > maxv {
			maxv = v
		}
	}
	n16 := (n + 15) &^ 15
	for p := n; p < n16; p++ {
		st[p] = float32(math.Inf(-1))
	}
	return 1 / ks.expSum(&st[0], n16, maxv)
}

// addValues adds Σ_p w[p]·v_p[c] to o[c] for c in [c0, len(o)), v_p the
// rows of len(o) values of dtype index d (es bytes each) at v; terms with
// w[p] = 0 are skipped (axpyRows).
func addValues(ks *kernelSet, d, es int, o []float32, v unsafe.Pointer, c0 int, w []float32) {
	hd := len(o)
	nb := (hd - c0) / ks.blk * ks.blk
	if nb > 0 {
		ks.axpyRows[d](&o[c0], unsafe.Add(v, es*c0), es*hd, nil, &w[0], nb, len(w), 0)
	}
	if c := c0 + nb; c < hd {
		genericSet.axpyRows[d](&o[c], unsafe.Add(v, es*c), es*hd, nil, &w[0], hd-c, len(w), 0)
	}
}

// AttentionBatch is Attention of one new token for each of B = len(pos)
// sequences, each over its own KV cache, as one pool call: token t (row t
// of q and out, [B, Heads·HeadDim]) at position pos[t] over the key cache
// kv[t] and the value cache kv[B+t] (of a's KVHeads and HeadDim, for at
// least pos[t]+1 positions, already holding its key and value); a's Pos and T are not used. Each token's
// output is Attention's with Pos pos[t] and T 1 bit for bit (the same
// per-head code).
func AttentionBatch(p *Pool, out, q []float32, kv []Cache, pos []int, a AttnShape) {
	B := len(pos)
	qd := a.Heads * a.HeadDim
	checkLen("AttentionBatch q", q, B*qd)
	checkLen("AttentionBatch out", out, B*qd)
	if len(kv) != 2*B {
		panic(fmt.Sprintf("kernels: AttentionBatch: %d caches for %d tokens (want their keys, then their values)", len(kv), B))
	}
	for t, n := range pos {
		if n < 0 || !kv[t].fits(a, n+1) || !kv[B+t].fits(a, n+1) || kv[t].DType() != kv[B+t].DType() {
			panic(fmt.Sprintf("kernels: AttentionBatch: token %d at position %d beyond its cache", t, n))
		}
	}
	a.T, a.Pos = 1, 0
	p.run(job{op: opAttention, ks: active, dst: out, x: q, kvb: kv, pos: pos, attn: a}, B*a.Heads)
}

// balancedToken maps the i-th token of the work order to a token index:
// 0, T−1, 1, T−2, … A token's cost grows with its position (causal
// attention), so in this order any contiguous range of pairs, as the pool
// hands out, holds early and late tokens alike.
func balancedToken(i, T int) int {
	if i%2 == 0 {
		return i / 2
	}
	return T - 1 - i/2
}

func expSumGo(xp *float32, n int, m float32) float32 {
	var sum float32
	x := xs(xp, n)
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += e
	}
	return sum
}

// SwiGLU sets g[i] = silu(g[i])·u[i] = g[i]/(1+e^(−g[i]))·u[i] for every i
// (HF LlamaMLP with hidden_act silu), split across the pool's workers.
func SwiGLU(p *Pool, g, u []float32) {
	checkLen("SwiGLU up", u, len(g))
	p.run(job{op: opSwiGLU, ks: active, dst: g, x: u}, len(g))
}

// SwiGLUBatch is SwiGLU of B tokens' rows of len(g)/B elements, each
// token's result SwiGLU's of its row bit for bit: one pool call where every
// element of both forms goes through the set's 16-wide kernel (rows of whole
// blocks of 16, chunks of whole blocks), else a call per token.
func SwiGLUBatch(p *Pool, g, u []float32, B int) {
	if B < 1 {
		panic(fmt.Sprintf("kernels: SwiGLUBatch of %d rows", B))
	}
	checkLen("SwiGLUBatch up", u, len(g))
	n := len(g) / B
	checkLen("SwiGLUBatch gate", g, B*n)
	simd := func(n int) bool {
		chunk, total := p.split(&job{op: opSwiGLU}, n)
		return n%16 == 0 && (total == 1 || chunk%16 == 0)
	}
	if simd(n) && simd(B*n) {
		SwiGLU(p, g, u)
		return
	}
	for t := range B {
		SwiGLU(p, g[t*n:(t+1)*n], u[t*n:(t+1)*n])
	}
}

// swigluRange runs the kernel set's SwiGLU on whole blocks of 16 and the
// portable one on the tail.
func swigluRange(ks *kernelSet, g, u []float32) {
	u = u[:len(g)]
	nb := len(g) &^ 15
	if nb > 0 {
		ks.swiglu(&g[0], &u[0], nb)
	}
	if nb < len(g) {
		swigluGo(&g[nb], &u[nb], len(g)-nb)
	}
}

func swigluGo(gp, up *float32, n int) {
	g, u := xs(gp, n), xs(up, n)
	for i, v := range g {
		g[i] = v / (1 + float32(math.Exp(float64(-v)))) * u[i]
	}
}

// Rope rotates each of the heads vectors of x ([heads, 2·half] float32, half
// = len(cos)) by rotary position embedding's cos and sin [half] at one
// position, in HF's rotate-half layout (modeling_llama.py,
// apply_rotary_pos_emb): for i < half, (x_i, x_{i+half}) ←
// (x_i·cos_i − x_{i+half}·sin_i, x_{i+half}·cos_i + x_i·sin_i), each product
// rounded to float32 on its own (no fused multiply-add), so every set gives
// the portable loop's values bit for bit. The AVX2 form takes the 12 heads
// of a SmolLM2-135M token (head_dim 64) in 470 → 60 ns (2-vCPU Intel Xeon).
// It panics if x is shorter than heads·2·half or sin than cos.
func Rope(x []float32, heads int, cos, sin []float32) {
	half := len(cos)
	checkLen("Rope x", x, heads*2*half)
	checkLen("Rope sin", sin, half)
	if heads <= 0 || half == 0 {
		return
	}
	if half%8 == 0 {
		active.rope(&x[0], &cos[0], &sin[0], half, heads)
		return
	}
	ropeGo(&x[0], &cos[0], &sin[0], half, heads)
}

func ropeGo(xp, cp, sp *float32, half, heads int) {
	x, cos, sin := xs(xp, 2*half*heads), xs(cp, half), xs(sp, half)
	for h := range heads {
		v := x[2*half*h : 2*half*(h+1)]
		for i := range half {
			a, b := v[i], v[i+half]
			// each product rounded on its own: Go may fuse x*y ± z into one
			// FMA (arm64 does), which the vector forms do not
			v[i] = float32(a*cos[i]) - float32(b*sin[i])
			v[i+half] = float32(b*cos[i]) + float32(a*sin[i])
		}
	}
}
