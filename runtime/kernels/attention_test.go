package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/format"
)

// values returns a cache's values as float32.
func values(c Cache) []float32 {
	hd, P := c.HeadDim, c.Positions()
	v := make([]float32, c.Len())
	for g := 0; g < c.KVHeads; g++ {
		for p := 0; p < P; p++ {
			for e := 0; e < hd; e++ {
				src := (g*P+p)*hd + e
				dst := &v[(p*c.KVHeads+g)*hd+e]
				if c.F16 == nil {
					*dst = c.F32[src]
				} else {
					*dst = format.F16ToF32(c.F16[src])
				}
			}
		}
	}
	return v
}

// prefix returns a cache of the cache's first n positions.
func prefix(c Cache, n int) Cache {
	p := NewCache(c.DType(), n, c.KVHeads, c.HeadDim)
	p.Put(0, values(c)[:n*c.KVHeads*c.HeadDim])
	return p
}

// attentionRef is causal GQA attention in float64, written from the
// definition.
func attentionRef(q, kc, vc []float32, a AttnShape) []float64 {
	hd, qd, kvd := a.HeadDim, a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	out := make([]float64, a.T*qd)
	for t := 0; t < a.T; t++ {
		for h := 0; h < a.Heads; h++ {
			g := h / (a.Heads / a.KVHeads)
			n := a.Pos + t + 1
			s := make([]float64, n)
			m := math.Inf(-1)
			for p := 0; p < n; p++ {
				for d := 0; d < hd; d++ {
					s[p] += float64(q[t*qd+h*hd+d]) * float64(kc[p*kvd+g*hd+d])
				}
				s[p] /= math.Sqrt(float64(hd))
				m = math.Max(m, s[p])
			}
			var z float64
			for p := range s {
				s[p] = math.Exp(s[p] - m)
				z += s[p]
			}
			for p := range s {
				for d := 0; d < hd; d++ {
					out[t*qd+h*hd+d] += s[p] / z * float64(vc[p*kvd+g*hd+d])
				}
			}
		}
	}
	return out
}

// TestAttention: every ISA path and pool size equals the float64 definition
// within 1e-5 relative to the output's scale, for odd head sizes, GQA groups,
// prefill (T > 1) after earlier positions and single-token decode.
func TestAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ks := range kernelSets() {
		restore := useKernelSet(ks)
		for _, threads := range []int{1, 2, 3} {
			p := NewPool(threads)
			for _, a := range []AttnShape{
				{Heads: 4, KVHeads: 2, HeadDim: 16, Pos: 0, T: 5},
				{Heads: 8, KVHeads: 4, HeadDim: 6, Pos: 3, T: 1},
				{Heads: 9, KVHeads: 3, HeadDim: 64, Pos: 17, T: 7},
				{Heads: 2, KVHeads: 1, HeadDim: 33, Pos: 40, T: 1},
				{Heads: 4, KVHeads: 2, HeadDim: 128, Pos: 70, T: 3}, // the short-row paths
				{Heads: 6, KVHeads: 2, HeadDim: 96, Pos: 5, T: 1},
				// blocked (attendBlock): token and position tiles with
				// tails, value columns past the last gemmT tile
				{Heads: 4, KVHeads: 2, HeadDim: 64, Pos: 30, T: 37},
				{Heads: 6, KVHeads: 2, HeadDim: 96, Pos: 0, T: 21},
				{Heads: 2, KVHeads: 1, HeadDim: 48, Pos: 3, T: 16},
				{Heads: 4, KVHeads: 1, HeadDim: 128, Pos: 9, T: 18},
				// heads narrower than AVX2's gemmT tile and NEON's element
				// block (the column and F16 conversion tails), and the
				// generic set's only (gblk 1)
				{Heads: 2, KVHeads: 1, HeadDim: 40, Pos: 1, T: 19},
				{Heads: 2, KVHeads: 1, HeadDim: 20, Pos: 2, T: 17},
			} {
				qd, kvd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
				rnd := func(n int) []float32 {
					x := make([]float32, n)
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					return x
				}
				q, kc, vc := rnd(a.T*qd), rnd((a.Pos+a.T)*kvd), rnd((a.Pos+a.T)*kvd)
				for _, dt := range []format.DType{format.F32, format.F16} {
					// the reference gets the values the cache holds
					// caches longer than the positions, as a session's
					kcache, vcache := NewCache(dt, a.Pos+a.T+3, a.KVHeads, a.HeadDim), NewCache(dt, a.Pos+a.T+3, a.KVHeads, a.HeadDim)
					kcache.Put(0, kc)
					vcache.Put(0, vc)
					out := make([]float32, a.T*qd)
					Attention(p, out, q, kcache, vcache, a)
					want := attentionRef(q, values(kcache), values(vcache), a)
					for i, w := range want {
						if math.Abs(float64(out[i])-w) > 1e-5*math.Max(1, math.Abs(w)) {
							t.Fatalf("%s, %d threads, %+v, %v cache: out[%d] = %v, want %v", ks.name, threads, a, dt, i, out[i], w)
						}
					}
				}
			}
			g, u := make([]float32, 100), make([]float32, 100)
			for i := range g {
				g[i], u[i] = float32(i-50)/7, float32(i)/13
			}
			want := make([]float64, len(g))
			for i := range g {
				x := float64(g[i])
				want[i] = x / (1 + math.Exp(-x)) * float64(u[i])
			}
			SwiGLU(p, g, u)
			for i, w := range want {
				if math.Abs(float64(g[i])-w) > 1e-6*math.Max(1, math.Abs(w)) {
					t.Fatalf("SwiGLU[%d] = %v, want %v", i, g[i], w)
				}
			}
			p.Close()
		}
		restore()
	}
}

// TestAttentionBatch: each token of AttentionBatch, at its own position over
// its own caches, equals Attention of that token alone bit for bit, on every
// set and pool size.
func TestAttentionBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rnd := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			for _, a := range []AttnShape{{Heads: 9, KVHeads: 3, HeadDim: 64}, {Heads: 2, KVHeads: 1, HeadDim: 33}} {
				qd := a.Heads * a.HeadDim
				pos := []int{0, 40, 17, 3}
				B := len(pos)
				q := rnd(B * qd)
				for _, dt := range []format.DType{format.F32, format.F16} {
					kv := make([]Cache, 2*B)
					for i := range kv {
						kv[i] = NewCache(dt, pos[i%B]+1+i, a.KVHeads, a.HeadDim) // caches longer than the position
						kv[i].Put(0, rnd(kv[i].Len()))
					}
					got := make([]float32, B*qd)
					AttentionBatch(p, got, q, kv, pos, a)
					for tok, n := range pos {
						want := make([]float32, qd)
						one := a
						one.Pos, one.T = n, 1
						Attention(p, want, q[tok*qd:(tok+1)*qd], prefix(kv[tok], n+1), prefix(kv[B+tok], n+1), one)
						equalBits(t, got[tok*qd:(tok+1)*qd], want, "AttentionBatch %+v %v token %d", a, dt, tok)
					}
				}
			}
		})
	})
}

// TestRope: Rope equals the one-pair-at-a-time loop bit for bit on every set
// (each product rounded on its own), for half a multiple of 8 (the vector
// forms) and not (the portable loop), one to three heads, and leaves what
// follows the heads alone.
func TestRope(t *testing.T) {
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		rng := rand.New(rand.NewPCG(11, 12))
		for _, half := range []int{4, 8, 12, 16, 32, 64} {
			for heads := 1; heads <= 3; heads++ {
				cos, sin := randVec(rng, half), randVec(rng, half)
				x := randVec(rng, 2*half*heads+5)
				want := slices.Clone(x)
				for h := range heads {
					v := want[2*half*h:]
					for i := range half {
						a, b := float64(v[i]), float64(v[i+half])
						c, s := float64(cos[i]), float64(sin[i])
						// float32 products, then their float32 sum: exact in float64 before each rounding
						v[i] = float32(float64(float32(a*c)) - float64(float32(b*s)))
						v[i+half] = float32(float64(float32(b*c)) + float64(float32(a*s)))
					}
				}
				Rope(x, heads, cos, sin)
				equalBits(t, x, want, "Rope half=%d heads=%d", half, heads)
			}
		}
		require.Panics(t, func() { Rope(make([]float32, 15), 1, make([]float32, 8), make([]float32, 8)) })
	})
}

// TestCacheLayout: Put stores head g's values of position p at (g·P +
// p)·HeadDim (the documented head-major layout), F16 rounded as
// format.F32ToF16, and refuses rows that are not whole positions or do not
// fit.
func TestCacheLayout(t *testing.T) {
	const P, heads, hd = 5, 3, 8
	rows := make([]float32, 2*heads*hd) // positions 2 and 3
	for i := range rows {
		rows[i] = float32(i) + 0.1
	}
	for _, dt := range []format.DType{format.F32, format.F16} {
		c := NewCache(dt, P, heads, hd)
		if c.Positions() != P || c.Len() != P*heads*hd {
			t.Fatalf("%v: %d positions, %d values", dt, c.Positions(), c.Len())
		}
		c.Put(2, rows)
		for p := 0; p < P; p++ {
			for g := 0; g < heads; g++ {
				for e := 0; e < hd; e++ {
					var want float32
					if p == 2 || p == 3 {
						want = rows[((p-2)*heads+g)*hd+e]
					}
					off := (g*P+p)*hd + e
					got := float32(0)
					if dt == format.F32 {
						got = c.F32[off]
					} else {
						got = format.F16ToF32(c.F16[off])
						want = format.F16ToF32(format.F32ToF16(want))
					}
					if got != want {
						t.Fatalf("%v: position %d head %d value %d at %d = %v, want %v", dt, p, g, e, off, got, want)
					}
				}
			}
		}
		for _, bad := range []struct {
			pos, n int
		}{{4, 2 * heads * hd}, {0, heads*hd + 1}, {-1, heads * hd}} {
			require.Panics(t, func() { c.Put(bad.pos, make([]float32, bad.n)) }, "%v: Put of %d values at %d", dt, bad.n, bad.pos)
		}
	}
}

// TestAttentionInfValue: a value of +Inf at the last position reaches only
// the last token's output (an Inf or a NaN there), every earlier token's
// stays finite and as with the last position's values finite (the blocked
// path's tiles must not multiply an earlier token's zero weight by a later
// position's value), on every set.
func TestAttentionInfValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	a := AttnShape{Heads: 4, KVHeads: 2, HeadDim: 64, Pos: 3, T: 20}
	kvd, qd := a.KVHeads*a.HeadDim, a.Heads*a.HeadDim
	n := a.Pos + a.T
	q, kv, vv := randVec(rng, a.T*qd), randVec(rng, n*kvd), randVec(rng, n*kvd)
	forEachSet(t, func(t *testing.T, ks *kernelSet) {
		withPools(t, func(t *testing.T, p *Pool) {
			for _, dt := range []format.DType{format.F32, format.F16} {
				kc, vc := NewCache(dt, n, a.KVHeads, a.HeadDim), NewCache(dt, n, a.KVHeads, a.HeadDim)
				kc.Put(0, kv)
				vc.Put(0, vv)
				want := make([]float32, a.T*qd)
				Attention(p, want, q, kc, vc, a)
				last := slices.Clone(vv[(n-1)*kvd:])
				last[0] = float32(math.Inf(1))
				vc.Put(n-1, last)
				got := make([]float32, a.T*qd)
				Attention(p, got, q, kc, vc, a)
				equalBits(t, got[:(a.T-1)*qd], want[:(a.T-1)*qd], "%v cache: tokens before the last", dt)
			}
		})
	})
}
