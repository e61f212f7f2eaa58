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

// attentionRange runs the token-head pairs [lo, hi) of an Attention job.
func attentionRange(ks *kernelSet, j *job, lo, hi int, s *scratch) {
	a := j.attn
	hd := a.HeadDim
	qd, kvd := a.Heads*hd, a.KVHeads*hd
	group := a.Heads / a.KVHeads
	nb := hd / ks.blk * ks.blk
	scale := float32(1 / math.Sqrt(float64(hd)))
	if need := a.Pos + a.T; cap(s.att) < need {
		s.att = make([]float32, need)
	}
	for u := lo; u < hi; u++ {
		t, h := u/a.Heads, u%a.Heads
		n := a.Pos + t + 1
		qh := j.x[t*qd+h*hd : t*qd+(h+1)*hd]
		off := (h / group) * hd
		att := s.att[:n]
		maxv := float32(math.Inf(-1))
		for pos := range att {
			d := dot(ks, 0, 4, unsafe.Pointer(&j.k[pos*kvd+off]), qh, hd, nb) * scale
			att[pos] = d
			maxv = max(maxv, d)
		}
		var sum float32
		for pos, d := range att {
			e := float32(math.Exp(float64(d - maxv)))
			att[pos] = e
			sum += e
		}
		o := j.dst[t*qd+h*hd : t*qd+(h+1)*hd]
		clear(o)
		inv := 1 / sum
		for pos, e := range att {
			v := unsafe.Pointer(&j.v[pos*kvd+off])
			if nb > 0 {
				ks.axpy1[0](&o[0], v, e*inv, nb)
			}
			if nb < hd {
				genericSet.axpy1[0](&o[nb], unsafe.Add(v, nb*4), e*inv, hd-nb)
			}
		}
	}
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
