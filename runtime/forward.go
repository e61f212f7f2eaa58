package runtime

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"

	"github.com/selectinfer/sinf/runtime/kernels"
)

// Observer receives the down_proj inputs a = silu(gate)·up of a layer for a
// batch of T tokens: act is [T, len(rows)] row-major, rows[j] the original
// neuron index of column j (paper §3: the profiler's s_n = Σ_t |a_n(t)|).
// It is called during Forward from the calling goroutine; act is reused after
// it returns.
type Observer interface {
	ObserveFFN(layer int, act []float32, T int, rows []int32)
}

// Session is one sequence's state: the KV cache and the activation buffers,
// allocated once and reused for every token (llama2.c's RunState).
type Session struct {
	m       *Model
	pool    *kernels.Pool
	ctx     int             // KV cache length in positions
	pos     int             // positions filled
	kcache  []kernels.Cache // one per layer, m.KVCache's dtype
	vcache  []kernels.Cache
	Observe Observer // optional

	// active[i] lists the rows of layer i's MLP to compute; nil = all rows.
	active [][]int32
	// perToken[i] > 0: decode picks layer i's rows per token, the perToken[i]
	// loaded rows with the largest |silu(gate)|·gateW[i] (GateFirst); 0:
	// active[i]. calib holds the sums GateWeights turns into gateW during a
	// GateFirst prefill (nil otherwise).
	perToken []int
	gateW    [][]float32
	calib    []GateCalib
	calibBuf []GateCalib
	// MaskedReference computes every loaded neuron and zeroes those outside
	// the active set: the masked dense reference the sparse path must equal.
	MaskedReference bool
	mass            *MassMeter // see Mass
	oracle          bool       // per-token rows by true |a| (Mode Oracle; set by Generate)
	batch           *Batcher   // decode steps batched with other sessions' (Batcher.NewSession)
	breq            batchReq   // this session's request to batch (reused)

	buf buffers
	// ahead[i]: the weights of layer i that the pool's idle workers read
	// ahead during a decode step's layer i−1 (i = layers: the LM head);
	// aheadAttn[i] the same without gate_proj (decodeAhead)
	ahead, aheadAttn []kernels.Ahead
}

type buffers struct {
	T                int       // token capacity of the batch buffers
	x, xb, xb2       []float32 // [T, hidden]
	q, attnOut       []float32 // [T, heads·hd]
	k, v             []float32 // [T, kv·hd]
	gate, up         []float32 // [T, N]
	h, score         []float32 // [N]: per-token selection scratch (GateFirst)
	sel              []uint32  // [2N]: topScore's keys
	rows             []int32   // [N]: the rows picked for this token
	logits           []float32 // [T or 1, vocab]
	ropeCos, ropeSin []float32 // [ctx, hd/2]
	// one-token products of one input, for kernels.MatVecs (q, k, v or
	// gate, up); here so that passing them allocates nothing
	fuseW   [3]kernels.Mat
	fuseDst [3][]float32
}

// ErrContextFull is returned when a sequence would exceed the session's context.
var ErrContextFull = errors.New("context length exceeded")

// NewSession allocates a session with room for ctx positions computing on
// pool: ctx ≤ 0 gives min(Config.MaxContext, DefaultContext), and ctx above
// MaxContext (max_position_embeddings, or a smaller sliding window) is
// capped at it. A KV cache costs KVCacheBytesOf(c, ctx, m.KVCacheType()) =
// 2·layers·ctx·kv_heads·head_dim·(4 or 2) bytes, the RoPE tables
// ctx·head_dim·4.
func (m *Model) NewSession(pool *kernels.Pool, ctx int) *Session {
	c := m.Config
	if ctx <= 0 {
		ctx = min(c.MaxContext(), DefaultContext)
	}
	ctx = min(ctx, c.MaxContext())
	s := &Session{m: m, pool: pool, ctx: ctx, kcache: make([]kernels.Cache, c.Layers), vcache: make([]kernels.Cache, c.Layers), active: make([][]int32, c.Layers), perToken: make([]int, c.Layers), gateW: make([][]float32, c.Layers)}
	s.ahead, s.aheadAttn = decodeAhead(m)
	for i := range s.kcache {
		s.kcache[i] = kernels.NewCache(m.KVCacheType(), ctx, c.KVHeads, c.HeadDim)
		s.vcache[i] = kernels.NewCache(m.KVCacheType(), ctx, c.KVHeads, c.HeadDim)
	}
	half := c.HeadDim / 2
	s.buf.ropeCos = make([]float32, ctx*half)
	s.buf.ropeSin = make([]float32, ctx*half)
	for p := 0; p < ctx; p++ {
		for i, f := range m.invFreq {
			a := float64(p) * f
			s.buf.ropeCos[p*half+i] = float32(math.Cos(a))
			s.buf.ropeSin[p*half+i] = float32(math.Sin(a))
		}
	}
	return s
}

// decodeAhead returns, for each layer i of m, the weights of layer i that a
// decode step reads whole: q_proj, k_proj, v_proj, o_proj and gate_proj
// (GateFirst reads every stored gate row, as dense decode does), and after
// the last layer the LM head; and the same without gate_proj, for a layer
// whose active set reads some of its gate rows only (Session.aheadFor).
// forward hands layer i+1's to Pool.Prefetch as layer i begins, so the
// pool's idle workers read them while they would otherwise wait on the
// caller (norms, RoPE, GateFirst's pick) or on its last chunk. Only
// block-quantized matrices are read ahead: F16 rows wait on their
// conversion more than on memory (SmolLM2-135M F16, 13.8 GB/s of 28 at 2
// threads), and reading them ahead cost GateFirst on the γ=0.7 F16 file 3–6%
// (2-vCPU Intel Xeon). The rest of a layer's MLP is left to the calls:
// GateFirst and the active sets read some of its rows only, and on the
// SmolLM2-135M shape a layer's gaps read about its attention and gate.
// Figures: README, Threads.
func decodeAhead(m *Model) (whole, attn []kernels.Ahead) {
	whole = make([]kernels.Ahead, len(m.Layers)+1)
	attn = make([]kernels.Ahead, len(m.Layers)+1)
	q := func(ms ...kernels.Mat) []kernels.Mat { // the block-quantized ones
		var out []kernels.Mat
		for _, w := range ms {
			if w.DType.Quantized() {
				out = append(out, w)
			}
		}
		return out
	}
	for i, l := range m.Layers {
		attn[i].Mats = q(l.Q, l.K, l.V, l.O)
		whole[i].Mats = append(slices.Clip(attn[i].Mats), q(l.MLP.Gate)...)
	}
	whole[len(m.Layers)].Mats = q(m.LMHead)
	attn[len(m.Layers)] = whole[len(m.Layers)]
	return whole, attn
}

// aheadFor returns the weights of layer i (i = layers: the LM head) to read
// ahead in decode: decodeAhead's, without gate_proj where the layer's
// active set reads some of its rows only.
func (s *Session) aheadFor(i int) *kernels.Ahead {
	if !s.gateWhole(i) {
		return &s.aheadAttn[i]
	}
	return &s.ahead[i]
}

// gateWhole reports whether a decode step reads every stored gate_proj row
// of layer i: dense, GateFirst (and the oracle) and the masked references
// do; an active set reads its rows. i = layers (the LM head's turn, which
// has no gate) reports true: its list is the whole one.
func (s *Session) gateWhole(i int) bool {
	return i >= len(s.active) || s.active[i] == nil || s.perToken[i] > 0 || s.MaskedReference
}

// Context returns the session's context length; Pos the positions filled.
func (s *Session) Context() int { return s.ctx }

// Pos returns the number of positions in the KV cache.
func (s *Session) Pos() int { return s.pos }

// Reset empties the KV cache and the active sets, keeping the buffers.
func (s *Session) Reset() {
	s.pos = 0
	clear(s.active)
	clear(s.perToken)
	s.calib = nil
	s.oracle = false
}

// Oracle reports whether decode picks its per-token rows by the true |a|
// (Mode Oracle), reading every stored row.
func (s *Session) Oracle() bool { return s.oracle }

// SetActive sets the rows of layer i's MLP that Forward computes (nil: all).
func (s *Session) SetActive(layer int, rows []int32) { s.active[layer] = rows }

// Active returns the rows computed for layer i (nil: all loaded rows, or
// rows picked per token: see PerToken).
func (s *Session) Active(layer int) []int32 { return s.active[layer] }

// SetPerToken makes decode pick, per token, the k loaded rows of layer i
// with the largest |silu(gate)|·w (GateFirst), w the row weights of
// GateWeights from the last prefill's calibration (Generate) or, without
// one, ‖up‖·‖down‖; k = 0 turns it off. k is capped at the rows stored.
func (s *Session) SetPerToken(layer, k int) { s.setPerToken(layer, k, GateCalib{}) }

// setPerToken is SetPerToken with the prefill's calibration c (empty: none).
func (s *Session) setPerToken(layer, k int, c GateCalib) {
	f := &s.m.Layers[layer].MLP
	if k > 0 {
		n := s.m.RowNorms(layer) // computed once per model, before decode's timing starts
		if s.gateW[layer] == nil {
			s.gateW[layer] = make([]float32, f.Kept())
		}
		GateWeights(s.gateW[layer], c, n)
	}
	s.perToken[layer] = min(k, f.Kept())
}

// GateWeights returns layer i's GateFirst row weights (nil: never set).
func (s *Session) GateWeights(layer int) []float32 { return s.gateW[layer] }

// PerToken returns the rows decode picks per token in layer i (0: none; the
// layer uses Active).
func (s *Session) PerToken(layer int) int { return s.perToken[layer] }

func (s *Session) ensure(T int) { s.buf.ensure(s.m.Config, T) }

// ensure gives the batch buffers room for T tokens of a model of config c.
func (b *buffers) ensure(c Config, T int) {
	if T <= b.T {
		return
	}
	b.T = T
	b.x = make([]float32, T*c.Hidden)
	b.xb = make([]float32, T*c.Hidden)
	b.xb2 = make([]float32, T*c.Hidden)
	b.q = make([]float32, T*c.Heads*c.HeadDim)
	b.attnOut = make([]float32, T*c.Heads*c.HeadDim)
	b.k = make([]float32, T*c.KVHeads*c.HeadDim)
	b.v = make([]float32, T*c.KVHeads*c.HeadDim)
	b.gate = make([]float32, T*c.Intermediate)
	b.up = make([]float32, T*c.Intermediate)
	if b.h == nil {
		N := c.Intermediate
		b.h, b.score, b.sel, b.rows = make([]float32, N), make([]float32, N), make([]uint32, 2*N), make([]int32, N)
	}
}

// Forward runs tokens at positions Pos()…Pos()+len(tokens)-1 through the
// model, appending to the KV cache, and returns logits [vocab] of the last
// token, or with all true [len(tokens), vocab] for every token. The returned
// slice is reused by the next call. Batches of more than one token are
// computed as matrix-matrix products (prefill). Errors: empty input, a token
// id outside [0, vocab), or ErrContextFull.
//
// A memory fault while reading the weights (the mapped file was truncated
// or replaced underneath: SIGBUS), on this goroutine or a kernel worker, is
// returned as an error naming the file (FaultError) instead of killing the
// process.
func (s *Session) Forward(tokens []int, all bool) (logits []float32, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if !kernels.IsFault(r) {
				panic(r)
			}
			logits, err = nil, FaultError(s.m.Path, r)
		}
	}()
	return s.forward(tokens, all)
}

// FaultError is the error for a memory fault r (kernels.IsFault) reading
// the weights mapped from path.
func FaultError(path string, r any) error {
	var addr uintptr
	if a, ok := r.(interface{ Addr() uintptr }); ok {
		addr = a.Addr()
	}
	return fmt.Errorf("%s: file changed or was truncated while mapped (a read of its weights at address %#x faulted): copy it again (a .sinf file on a filesystem that cannot keep a mapping runs with --no-mmap, read into memory)", path, addr)
}

func (s *Session) forward(tokens []int, all bool) ([]float32, error) {
	c := s.m.Config
	T := len(tokens)
	if T == 0 {
		return nil, errors.New("forward: no tokens")
	}
	if err := s.checkTokens(tokens); err != nil {
		return nil, err
	}
	s.ensure(T)
	b := &s.buf
	H := c.Hidden
	x := b.x[:T*H]
	for t, id := range tokens {
		s.m.Embed.RowF32(x[t*H:(t+1)*H], id)
	}
	defer s.pool.Prefetch(nil) // a panic (a fault) leaves no weights named
	for i := range s.m.Layers {
		if T == 1 {
			s.pool.Prefetch(s.aheadFor(i + 1))
		}
		s.attention(i, T)
		s.ffn(i, T)
	}
	// The LM head's call reads it now: pages read ahead after this would
	// be ones it has read (and would slow its last chunk).
	s.pool.Prefetch(nil)
	// Final norm and LM head: all positions, or only the last.
	first := 0
	if !all {
		first = T - 1
	}
	n := T - first
	xb := b.xb[:n*H]
	for t := 0; t < n; t++ {
		RMSNorm(xb[t*H:(t+1)*H], x[(first+t)*H:(first+t+1)*H], s.m.Norm, c.RMSNormEps)
	}
	if need := n * c.Vocab; len(b.logits) < need {
		b.logits = make([]float32, need)
	}
	logits := b.logits[:n*c.Vocab]
	if n == 1 {
		kernels.MatVec(s.pool, logits, s.m.LMHead, xb)
	} else {
		kernels.MatMul(s.pool, logits, s.m.LMHead, xb, n)
	}
	s.pos += T
	return logits, nil
}

// checkTokens returns the error of feeding tokens next: past the context
// (ErrContextFull), or an id outside the vocabulary.
func (s *Session) checkTokens(tokens []int) error {
	if s.pos+len(tokens) > s.ctx {
		return fmt.Errorf("%w: %d positions filled + %d new > context %d", ErrContextFull, s.pos, len(tokens), s.ctx)
	}
	for _, t := range tokens {
		if t < 0 || t >= s.m.Config.Vocab {
			return fmt.Errorf("forward: token id %d outside [0, %d)", t, s.m.Config.Vocab)
		}
	}
	return nil
}

// attention runs the self-attention block of layer i on the T tokens in
// buf.x, adding its output to the residual stream (HF LlamaAttention with
// rotate-half RoPE and grouped-query attention).
func (s *Session) attention(i, T int) {
	c := s.m.Config
	l := &s.m.Layers[i]
	b := &s.buf
	H, hd := c.Hidden, c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	x, xb := b.x[:T*H], b.xb[:T*H]
	normRows(xb, x, l.AttnNorm, T, c.RMSNormEps)
	q, k, v := b.q[:T*qd], b.k[:T*kvd], b.v[:T*kvd]
	if T == 1 {
		b.fuseW, b.fuseDst = [3]kernels.Mat{l.Q, l.K, l.V}, [3][]float32{q, k, v}
		kernels.MatVecs(s.pool, b.fuseDst[:], b.fuseW[:], xb)
		addBias(q, l.QBias, 1)
		addBias(k, l.KBias, 1)
		addBias(v, l.VBias, 1)
	} else {
		s.project(q, l.Q, xb, T, l.QBias)
		s.project(k, l.K, xb, T, l.KBias)
		s.project(v, l.V, xb, T, l.VBias)
	}
	half := hd / 2
	for t := 0; t < T; t++ {
		p := s.pos + t
		cos, sin := b.ropeCos[p*half:(p+1)*half], b.ropeSin[p*half:(p+1)*half]
		kernels.Rope(q[t*qd:(t+1)*qd], c.Heads, cos, sin)
		kernels.Rope(k[t*kvd:(t+1)*kvd], c.KVHeads, cos, sin)
	}
	s.kcache[i].Put(s.pos, k)
	s.vcache[i].Put(s.pos, v)

	// out[t, h] = Σ_p softmax_p(q·k_p / √hd) v_p over p ≤ pos+t (causal).
	out := b.attnOut[:T*qd]
	kernels.Attention(s.pool, out, q, s.kcache[i], s.vcache[i],
		kernels.AttnShape{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: hd, Pos: s.pos, T: T})
	// Output projection into xb, then the residual.
	s.project(xb, l.O, out, T, l.OBias)
	kernels.Add(x, xb)
}

// project computes dst[T, w.Rows] = src[T, w.Cols]·wᵀ (+ bias).
func (s *Session) project(dst []float32, w kernels.Mat, src []float32, T int, bias []float32) {
	if T == 1 {
		kernels.MatVec(s.pool, dst, w, src)
	} else {
		kernels.MatMul(s.pool, dst, w, src, T)
	}
	addBias(dst, bias, T)
}

// ffn runs the MLP block of layer i over the T tokens in buf.x, adding its
// output to the residual stream. With an active set (decode) only those rows
// are read: gathered gate/up rows and the matching rows of the transposed
// down_proj; otherwise every loaded neuron is computed.
func (s *Session) ffn(i, T int) {
	c := s.m.Config
	f := &s.m.Layers[i].MLP
	b := &s.buf
	H := c.Hidden
	x, xb, y := b.x[:T*H], b.xb[:T*H], b.xb2[:T*H]
	normRows(xb, x, s.m.Layers[i].MLPNorm, T, c.RMSNormEps)
	active := s.active[i]
	if k := s.perToken[i]; k > 0 && T == 1 {
		s.ffnPerToken(i, k, xb, y)
	} else if active != nil && T == 1 && !s.MaskedReference {
		n := len(active)
		g, u := b.gate[:n], b.up[:n]
		kernels.MatVecRows(s.pool, g, f.Gate, active, xb)
		kernels.MatVecRows(s.pool, u, f.Up, active, xb)
		kernels.SwiGLU(s.pool, g, u)
		if s.Observe != nil {
			s.Observe.ObserveFFN(i, g, 1, s.originalRows(f, active))
		}
		clear(y)
		kernels.AddRows(s.pool, y, f.DownT, active, g)
	} else {
		kept := f.Kept()
		g, u := b.gate[:T*kept], b.up[:T*kept]
		if T == 1 {
			b.fuseW, b.fuseDst = [3]kernels.Mat{f.Gate, f.Up}, [3][]float32{g, u}
			kernels.MatVecs(s.pool, b.fuseDst[:2], b.fuseW[:2], xb)
		} else {
			s.project(g, f.Gate, xb, T, nil)
			s.project(u, f.Up, xb, T, nil)
		}
		kernels.SwiGLU(s.pool, g, u)
		if s.calib != nil && f.Sliced {
			s.calib[i].Add(g, u, T)
		}
		if active != nil { // masked reference: zero what decode would skip
			mask := s.maskFor(f, active)
			if s.mass != nil && T == 1 {
				s.mass.observe(i, g, mask)
			}
			for t := 0; t < T; t++ {
				for j, keep := range mask {
					if !keep {
						g[t*kept+j] = 0
					}
				}
			}
		}
		if s.Observe != nil {
			s.Observe.ObserveFFN(i, g, T, f.Index)
		}
		if f.Sliced {
			if T == 1 {
				clear(y)
				kernels.AddRows(s.pool, y, f.DownT, nil, g)
			} else {
				kernels.MatMulRowsT(s.pool, y, f.DownT, g, T)
			}
		} else {
			s.project(y, f.Down, g, T, nil)
		}
	}
	addFFN(x, y, f.DownBias, T)
}

// addFFN adds an MLP's output y ([T, hidden]) to the residual stream x, then
// the layer's output bias (a reconstructed layer's, else nil), after the
// rows (the CUDA backend adds it the same way, as one more row).
func addFFN(x, y, bias []float32, T int) {
	kernels.Add(x, y)
	addBias(x, bias, T)
}

// maskedRows finishes a per-token layer i computed over every row (the
// oracle, MaskedReference): a = silu(g)·u of every row in g [kept], the
// rows not picked zeroed, then y = Σ_r a_r · downT_r, observed as decode
// sees it (mass, Observe).
func (s *Session) maskedRows(i int, f *MLP, g []float32, rows []int32, y []float32) {
	mask := s.maskFor(f, rows)
	if s.mass != nil {
		s.mass.observe(i, g, mask)
	}
	for j, keep := range mask {
		if !keep {
			g[j] = 0
		}
	}
	if s.Observe != nil {
		s.Observe.ObserveFFN(i, g, 1, f.Index)
	}
	kernels.AddRows(s.pool, y, f.DownT, nil, g)
}

// ffnPerToken computes layer i's MLP for one decoded token over the k rows
// picked from its gate (GateFirst): y = Σ_{r ∈ top k} silu(g_r)·u_r · downT_r
// with g = gate_proj·x over every loaded row, the top k by |silu(g_r)|·w_r
// (w = GateWeights; ties: lower row) and u_r read for those rows only.
// MaskedReference computes up for every row and zeroes the rest instead.
func (s *Session) ffnPerToken(i, k int, xb, y []float32) {
	f := &s.m.Layers[i].MLP
	b := &s.buf
	g := b.gate[:f.Kept()]
	kernels.MatVec(s.pool, g, f.Gate, xb)
	s.ffnFromGate(i, k, g, xb, y)
}

// ffnFromGate is ffnPerToken of layer i after its gate product g =
// gate_proj·xb over every stored row ([kept]; the oracle overwrites it): the
// k rows picked from it, their up_proj rows and the down_proj sum into y
// ([hidden]). The batcher computes g for several sessions at once and
// calls it for each.
func (s *Session) ffnFromGate(i, k int, g, xb, y []float32) {
	f := &s.m.Layers[i].MLP
	b := &s.buf
	kept := f.Kept()
	clear(y)
	if s.oracle { // every row's a, the k largest |a| kept
		u := b.up[:kept]
		kernels.MatVec(s.pool, u, f.Up, xb)
		kernels.SwiGLU(s.pool, g, u)
		s.maskedRows(i, f, g, topScore(b.rows[:0], g, b.sel[:2*kept], k, true), y)
		return
	}
	rows := s.pickRows(i, f, g, xb, k)
	if s.MaskedReference {
		u := b.up[:kept]
		kernels.MatVec(s.pool, u, f.Up, xb)
		kernels.SwiGLU(s.pool, g, u)
		s.maskedRows(i, f, g, rows, y)
		return
	}
	h, u := b.h[:k], b.up[:k]
	kernels.MatVecRows(s.pool, u, f.Up, rows, xb)
	for j, r := range rows {
		h[j] = g[r]
	}
	kernels.SwiGLU(s.pool, h, u)
	if s.Observe != nil {
		s.Observe.ObserveFFN(i, h, 1, s.originalRows(f, rows))
	}
	kernels.AddRows(s.pool, y, f.DownT, rows, h)
}

// pickRows returns GateFirst's k rows of layer i for one token, in
// ascending order, from g = gate_proj·x over every stored row: the largest
// |silu(g_j)|·w_j (topSiLU), w the layer's GateWeights, or on a layer with an
// up_proj sketch w_j = |û_j·‖down_j‖|, û = sketch·x (kernels.SketchMatVec)
// and ‖down_j‖ the row's Norms.Down, which ranks by |silu(g_j)·û_j|·‖down_j‖
// (the CUDA backend computes the same w, then the same key). The scores use
// the b.score and b.sel scratch, the sketch's weights b.up.
func (s *Session) pickRows(i int, f *MLP, g, xb []float32, k int) []int32 {
	b := &s.buf
	kept := len(g)
	if f.UpSketch.Rows == 0 {
		return topSiLU(s.pool, b.rows[:0], b.score[:kept], b.sel[:2*kept], g, s.gateW[i], k)
	}
	w := b.up[:kept]
	kernels.SketchMatVec(s.pool, w, f.UpSketch, xb)
	SketchWeights(w, s.m.RowNorms(i).Down)
	return topSiLU(s.pool, b.rows[:0], b.score[:kept], b.sel[:2*kept], g, w, k)
}

// SketchWeights sets w[j] = |w[j]·down[j]| for j < len(w): GateFirst's row
// weights on a layer with an up_proj sketch (spec §6.2), w the sketch's
// estimate of up_proj·x and down the rows' ‖down_proj column‖ (Norms.Down);
// float32 [n] each.
func SketchWeights(w, down []float32) {
	for j, d := range down[:len(w)] {
		v := w[j] * d
		w[j] = max(v, -v)
	}
}

// topSiLU appends to rows, in ascending order, the k indices j of g with
// the largest |silu(g_j)|·w_j (GateScores; ties: lower index), using score
// ([len(g)] scratch) and sel ([2·len(g)]). 1 ≤ k ≤ len(g).
func topSiLU(p *kernels.Pool, rows []int32, score []float32, sel []uint32, g, w []float32, k int) []int32 {
	gateSiLU(p, score, g, w)
	return topScore(rows, score[:len(g)], sel, k, true)
}

// topScore appends to rows, in ascending order, the k indices of the
// largest score, or with abs the largest |score| (ties: lower index;
// orderKey's order, so −0 ties +0 and a NaN ranks by its bits), using sel
// ([2·len(score)] scratch). 1 ≤ k ≤ len(score). Without a branch on the
// scores: the threshold from kthKey, then one pass that writes every index
// and keeps those above it and the first ties.
func topScore(rows []int32, score []float32, sel []uint32, k int, abs bool) []int32 {
	n := len(score)
	if k >= n {
		for j := range n {
			rows = append(rows, int32(j))
		}
		return rows
	}
	m1 := uint32(keySigned)
	if abs {
		m1 = keyAbs
	}
	keys := sel[:n]
	for j, v := range score {
		keys[j] = scoreKey(v, m1)
	}
	th, above, equal := kthKey(keys, sel[n:2*n], k)
	ties, m := k-above, len(rows)
	rows = slices.Grow(rows, k+1) // the pass writes one past the last kept
	out := rows[:m+k+1]
	if ties == equal { // every key equal to th is kept (no ties left out)
		for j, u := range keys {
			out[m] = int32(j)
			m += b2i(u >= th)
		}
		return out[:m]
	}
	for j, u := range keys {
		out[m] = int32(j)
		eq := b2i(u == th) & b2i(ties > 0)
		ties -= eq
		m += b2i(u > th) | eq
	}
	return out[:m]
}

// GateCalib accumulates, over a GateFirst prefill, each stored row's
// activation mass and gate mass (float64 [kept]): A[j] = Σ_t |a_j(t)| and
// S[j] = Σ_t |silu(g_j(t))| = Σ_t |a_j(t)/u_j(t)|, over the tokens with
// u_j(t) ≠ 0 (a = silu(g)·u). A[j]/S[j] is the mean |u_j| weighted by the
// gate, the prompt's estimate of how far up_proj scales row j's gate.
type GateCalib struct{ A, S []float64 }

// Add accumulates T tokens: a and u are [T, kept] row-major, a the SwiGLU
// output and u the up_proj output, summed in token order.
func (c GateCalib) Add(a, u []float32, T int) {
	kept := len(c.A)
	for t := 0; t < T; t++ {
		at, ut := a[t*kept:(t+1)*kept], u[t*kept:(t+1)*kept]
		for j, uu := range ut {
			if uu != 0 {
				av := math.Abs(float64(at[j]))
				c.A[j] += av
				c.S[j] += av / math.Abs(float64(uu))
			}
		}
	}
}

// GateWeights sets GateFirst's row weights w[j] (float32 [kept]): the
// expected size of row j's contribution per unit of |silu(g_j)|, (A[j]/S[j])
// ·‖down_j‖ from the prompt's calibration c, or ‖up_j‖·‖down_j‖ where the
// prompt gave row j no gate mass or c is empty (float64, rounded once).
// Against ‖up‖·‖down‖ alone, the prompt's estimate lowered stories260k's
// perplexity at φ=0.25 from 51.4 to 39.1 (tinystories-656k 90.9 → 91.0;
// 40 held-out windows); against the gate alone, ‖up‖·‖down‖ had lowered it
// from 52.6 to 32.6 on profiled text.
func GateWeights(w []float32, c GateCalib, n Norms) {
	for j := range w {
		if c.S != nil && c.S[j] > 0 {
			w[j] = float32(c.A[j] / c.S[j] * float64(n.Down[j]))
		} else {
			w[j] = float32(float64(n.Up[j]) * float64(n.Down[j]))
		}
	}
}

// GateScores sets score[j] = |silu(g[j])·w[j]| for j < len(g), with the
// SwiGLU kernel (kernels.SwiGLU: silu(g)·u, vectorised, on p's threads; w
// ≥ 0, so this is |silu(g_j)|·w_j). It is GateFirst's per-token ranking key
// (w = GateWeights); the CUDA backend's sinf_gate_score computes the same
// with its silu_mul. score, g and w are [n] float32.
func GateScores(p *kernels.Pool, score, g, w []float32) {
	gateSiLU(p, score, g, w)
	for j, v := range score[:len(g)] {
		score[j] = math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
	}
}

// gateSiLU sets score[j] = silu(g[j])·w[j] for j < len(g): GateScores but
// the magnitude.
func gateSiLU(p *kernels.Pool, score, g, w []float32) {
	score = score[:len(g)]
	copy(score, g)
	kernels.SwiGLU(p, score, w[:len(g)])
}

// originalRows maps row indices of a sliced layer to original neuron ids
// (for observers); whole layers' rows are already original ids.
func (s *Session) originalRows(f *MLP, rows []int32) []int32 {
	if f.Index == nil {
		return rows
	}
	out := make([]int32, len(rows))
	for j, r := range rows {
		out[j] = f.Index[r]
	}
	return out
}

func (s *Session) maskFor(f *MLP, active []int32) []bool {
	mask := make([]bool, f.Kept())
	for _, r := range active {
		mask[r] = true
	}
	return mask
}

// RMSNorm writes x·w/√(mean(x²)+eps) to dst (HF LlamaRMSNorm): dst, x, w
// [hidden] float32, eps the config's rms_norm_eps. The sum of squares is
// float64 over exact products (float64(v)², 48 bits), so its order of
// summation moves it by a double's rounding only: the CUDA kernel, which sums
// in another order, gets the same float32 scale, and so the same int8 blocks
// when a Q8_0/Q4_0 product quantizes the output (a float32 sum differed in
// its last bit, which flipped a block value and moved the emulated GPU's decode
// logits by 1.8% of the largest on tinystories-656k Q8_0).
// The scale is float64, rounded to float32 once. Eight sums a step (and
// four values a step scaled) took a 576-wide row 610 → 450 ns (2-vCPU Intel
// Xeon): a batched step of four tokens norms 240 such rows.
func RMSNorm(dst, x, w []float32, eps float64) {
	var s0, s1, s2, s3, s4, s5, s6, s7 float64
	i := 0
	for ; i+8 <= len(x); i += 8 {
		y := x[i : i+8 : i+8]
		d0, d1, d2, d3 := float64(y[0]), float64(y[1]), float64(y[2]), float64(y[3])
		d4, d5, d6, d7 := float64(y[4]), float64(y[5]), float64(y[6]), float64(y[7])
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
		s4 += d4 * d4
		s5 += d5 * d5
		s6 += d6 * d6
		s7 += d7 * d7
	}
	for ; i < len(x); i++ {
		d := float64(x[i])
		s0 += d * d
	}
	ss := ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
	r := float32(1 / math.Sqrt(ss/float64(len(x))+eps))
	j := 0
	for ; j+4 <= len(x); j += 4 {
		y, wj, d := x[j:j+4:j+4], w[j:j+4:j+4], dst[j:j+4:j+4]
		d[0] = wj[0] * (y[0] * r)
		d[1] = wj[1] * (y[1] * r)
		d[2] = wj[2] * (y[2] * r)
		d[3] = wj[3] * (y[3] * r)
	}
	for ; j < len(x); j++ {
		dst[j] = w[j] * (x[j] * r)
	}
}

// normRows is RMSNorm of each of the T rows of x ([T, len(w)]) into dst.
func normRows(dst, x, w []float32, T int, eps float64) {
	n := len(w)
	for t := range T {
		RMSNorm(dst[t*n:(t+1)*n], x[t*n:(t+1)*n], w, eps)
	}
}

// addBias adds bias ([n]; nil: nothing) to each of the T rows of x ([T, n]).
func addBias(x, bias []float32, T int) {
	n := len(bias)
	for t := range T {
		xt := x[t*n : (t+1)*n]
		for j, bv := range bias {
			xt[j] += bv
		}
	}
}

// startCalib clears (allocating once) the GateFirst calibration sums of
// every sliced layer; the next Forward adds its tokens (Generate's prefill).
func (s *Session) startCalib() {
	if s.calibBuf == nil {
		s.calibBuf = make([]GateCalib, len(s.m.Layers))
		for i := range s.m.Layers {
			if f := &s.m.Layers[i].MLP; f.Sliced {
				s.calibBuf[i] = GateCalib{A: make([]float64, f.Kept()), S: make([]float64, f.Kept())}
			}
		}
	}
	for _, c := range s.calibBuf {
		clear(c.A)
		clear(c.S)
	}
	s.calib = s.calibBuf
}
