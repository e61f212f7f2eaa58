package kernels

import (
	"math"
	"unsafe"
)

// AttnShape describes causal grouped-query attention of T new tokens over a
// KV cache (HF LlamaAttention / Qwen2Attention, eager path).
type AttnShape struct {
	Heads, KVHeads, HeadDim int
	Pos                     int // positions already in the cache before the T tokens
	T                       int
}

// Attention computes, for token t < T at position Pos+t and head h,
//
//	out[t,h] = Σ_{p ≤ Pos+t} softmax_p(q[t,h]·k[p,g]/√HeadDim) · v[p,g],  g = h / (Heads/KVHeads)
//
// Shapes (row-major float32): q and out [T, Heads·HeadDim]; kc and vc
// [≥ Pos+T, KVHeads·HeadDim], already holding the T new tokens' keys and
// values. Token-head pairs are split across the pool's workers; softmax is
// computed in float32 with the maximum subtracted.
func Attention(p *Pool, out, q, kc, vc []float32, a AttnShape) {
	qd, kvd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	checkLen("Attention q", q, a.T*qd)
	checkLen("Attention out", out, a.T*qd)
	checkLen("Attention k cache", kc, (a.Pos+a.T)*kvd)
	checkLen("Attention v cache", vc, (a.Pos+a.T)*kvd)
	p.run(job{op: opAttention, ks: active, dst: out, x: q, k: kc, v: vc, attn: a}, a.T*a.Heads)
}

// attentionRange runs the token-head pairs [lo, hi) of an Attention job:
// the scores as one dotRows call over the cached keys (rows kvd floats
// apart), softmax with expSum, and the values as one axpyRows call.
func attentionRange(ks *kernelSet, j *job, lo, hi int, s *scratch) {
	a := j.attn
	hd := a.HeadDim
	qd, kvd := a.Heads*hd, a.KVHeads*hd
	group := a.Heads / a.KVHeads
	nb := hd / ks.blk * ks.blk
	scale := float32(1 / math.Sqrt(float64(hd)))
	for u := lo; u < hi; u++ {
		t, h := balancedToken(u/a.Heads, a.T), u%a.Heads
		n := a.Pos + t + 1
		qh := j.x[t*qd+h*hd : t*qd+(h+1)*hd]
		off := (h / group) * hd
		att := s.att[:n]
		k := unsafe.Pointer(&j.k[off])
		if nb > 0 {
			ks.dotRows[0](k, 4*kvd, nil, &qh[0], nb, n, &att[0], 0)
		} else {
			clear(att)
		}
		maxv := float32(math.Inf(-1))
		for pos := range att {
			if nb < hd {
				att[pos] += genericSet.dot1[0](unsafe.Add(k, 4*(pos*kvd+nb)), &qh[nb], hd-nb)
			}
			att[pos] *= scale
			maxv = max(maxv, att[pos])
		}
		eb := n &^ 15
		var sum float32
		if eb > 0 {
			sum = ks.expSum(&att[0], eb, maxv)
		}
		if eb < n {
			sum += expSumGo(&att[eb], n-eb, maxv)
		}
		o := j.dst[t*qd+h*hd : t*qd+(h+1)*hd]
		clear(o)
		v := unsafe.Pointer(&j.v[off])
		if nb > 0 {
			ks.axpyRows[0](&o[0], v, 4*kvd, nil, &att[0], nb, n, 0)
		}
		if nb < hd {
			genericSet.axpyRows[0](&o[nb], unsafe.Add(v, 4*nb), 4*kvd, nil, &att[0], hd-nb, n, 0)
		}
		inv := 1 / sum
		for i := range o {
			o[i] *= inv
		}
	}
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
