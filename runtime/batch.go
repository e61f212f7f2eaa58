package runtime

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/selectinfer/sinf/runtime/kernels"
)

// Batcher runs the decode steps of several sessions of one model together
// (continuous batching, as llama-server decodes its slots): the sessions
// that are generating each hand it their next token, and one pass over the
// weights computes all of them — the attention projections, the dense FFN
// and the LM head with kernels.MatVecBatch / AddRowsBatch, which read each
// block of weights once for the batch, and attention over each session's own
// KV cache. Where decode waits on memory, B tokens cost little more than
// one; where it waits on arithmetic, the kernel sets with multi-token
// kernels (x86-64: short float rows, Q8_0, Q4_0) convert or unpack each
// weight once for up to four tokens (README's figures).
// Where every session picks a layer's rows per token from the gate product
// over all stored rows (GateFirst, the oracle), that product goes as one
// batch and each session's picked rows as its own; a layer whose rows a
// session picks otherwise (SelectInfer's active set, the masked references)
// runs that session's own FFN. Every token's logits are bit for bit those of
// Session.Forward (TestBatchedGenerate), so batching never changes a
// generation.
//
// The sessions share the Batcher's pool; their prefills run on it one at a
// time between batched steps, and a request that arrives mid-generation
// joins the next step (continuous admission). A step waits up to Wait for
// the sessions inside Generate that have not yet handed in their token
// (sampling, streaming), then runs with those it has.
type Batcher struct {
	m    *Model
	pool *kernels.Pool
	reqs chan *batchReq
	done chan struct{}
	live atomic.Int64 // sessions inside Generate or Score
	once sync.Once
	buf  buffers
	// Wait is how long a step waits for the live sessions' tokens
	// (default 2 ms); set it before the first session generates.
	Wait time.Duration

	steps, tokens atomic.Uint64
	kv            []kernels.Cache // attention's caches and positions, one step's
	pos           []int
}

// batchReq is one session's request: a decode step of id, or (fn non-nil)
// work that needs the pool to itself.
type batchReq struct {
	s   *Session
	id  int
	fn  func() error
	err chan error
}

// NewBatcher starts a batcher for sessions of m computing on pool (which it
// then owns: only the batcher and its sessions may use it). Close stops it.
func NewBatcher(m *Model, pool *kernels.Pool) *Batcher {
	b := &Batcher{m: m, pool: pool, reqs: make(chan *batchReq), done: make(chan struct{}), Wait: 2 * time.Millisecond}
	go b.loop()
	return b
}

// NewSession returns a session of the batcher's model whose Generate and
// Score go through the batcher (ctx as Model.NewSession). Its Forward must
// not be called while other sessions of the batcher generate.
func (b *Batcher) NewSession(ctx int) *Session {
	s := b.m.NewSession(b.pool, ctx)
	s.batch = b
	s.breq = batchReq{s: s, err: make(chan error, 1)}
	return s
}

// Close stops the batcher once no session is using it.
func (b *Batcher) Close() {
	b.once.Do(func() { close(b.reqs) })
	<-b.done
}

// BatchStats counts the batched decode steps and the tokens they computed:
// tokens/steps is the mean batch.
type BatchStats struct{ Steps, Tokens uint64 }

// Stats returns the counts so far.
func (b *Batcher) Stats() BatchStats { return BatchStats{b.steps.Load(), b.tokens.Load()} }

// generate and score run Session.Generate and Score of a batched session.
func (b *Batcher) generate(s *Session, prompt []int, opt GenerateOptions) (Result, error) {
	b.live.Add(1)
	defer b.live.Add(-1)
	return GenerateOn(batchDecoder{cpuDecoder{s}}, prompt, opt)
}

func (b *Batcher) score(s *Session, prompt, cont []int, sp Sparsity) ([]float64, error) {
	b.live.Add(1)
	defer b.live.Add(-1)
	return ScoreOn(batchDecoder{cpuDecoder{s}}, prompt, cont, sp)
}

// batchDecoder is a batched session as GenerateOn's Decoder: prefill on
// the pool alone, decode steps batched.
type batchDecoder struct{ cpuDecoder }

func (d batchDecoder) Prefill(prompt []int, sp Sparsity) (computed []int, err error) {
	err = d.s.submit(func() error {
		computed, err = d.cpuDecoder.Prefill(prompt, sp)
		return err
	}, 0)
	return computed, err
}

func (d batchDecoder) Decode(id int) error { return d.s.submit(nil, id) }

// submit hands the session's request to its batcher and waits for it.
func (s *Session) submit(fn func() error, id int) error {
	r := &s.breq
	r.fn, r.id = fn, id
	s.batch.reqs <- r
	return <-r.err
}

// loop collects requests into steps: the first one that arrives, then the
// others of the live sessions for up to Wait; work that needs the pool alone
// runs first, in arrival order, then the decode steps as one batch. After
// such work (a prefill) the decode requests gathered with it wait for one
// more gathering, so that the sessions just prefilled join their step: four
// requests admitted at once otherwise decode a step of one, then of two and
// of three before all four go together (TestBatcherAdmitsIntoTheNextStep;
// SmolLM2-135M Q4_0 served to four clients, 2.20–2.36 → 2.31–2.50 times one
// client's tokens/s, README). It keeps one OS thread: as the pool's caller
// it would otherwise resume on another of the Go runtime's threads after
// each wait, and the pool's scheduler signal (kernels' adapt) read two of
// the process's threads competing for a CPU where there was one
// (TestBatcherOneThread has the figures).
func (b *Batcher) loop() {
	defer lockThread()()
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var pending, step []*batchReq
	var ids []int
	var sessions []*Session
	held := false // pending holds decode requests kept back after a prefill
	for {
		if len(pending) == 0 {
			r, ok := <-b.reqs
			if !ok {
				return
			}
			pending = append(pending, r)
		}
		if int64(len(pending)) < b.live.Load() {
			timer.Reset(b.Wait)
		gather:
			for int64(len(pending)) < b.live.Load() {
				select {
				case r, ok := <-b.reqs:
					if !ok {
						break gather
					}
					pending = append(pending, r)
				case <-timer.C:
					break gather
				}
			}
			timer.Stop()
		}
		ran, decodes := false, pending[:0]
		for _, r := range pending {
			if r.fn != nil {
				r.err <- safely(r.fn)
				ran = true
				continue
			}
			decodes = append(decodes, r)
		}
		pending = decodes
		if ran && !held && len(pending) > 0 {
			held = true
			continue
		}
		held = false
		step, ids, sessions = step[:0], ids[:0], sessions[:0]
		for _, r := range pending {
			if err := r.s.checkTokens([]int{r.id}); err != nil {
				r.err <- err
				continue
			}
			step, ids, sessions = append(step, r), append(ids, r.id), append(sessions, r.s)
		}
		pending = pending[:0]
		if len(step) == 0 {
			continue
		}
		err := safely(func() error { return b.decode(sessions, ids) })
		b.steps.Add(1)
		b.tokens.Add(uint64(len(step)))
		for _, r := range step {
			r.err <- err
		}
	}
}

// safely runs f on the batcher's goroutine, where a panic would end the
// process (a handler's panic ends only its request): it becomes the error of
// the requests f served.
func safely(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("batch: internal error: %v", r)
		}
	}()
	return f()
}

// decode feeds ids[t] to sessions ss[t] (checked: checkTokens) at their own
// positions, one pass over the weights, leaving each session's logits where
// Forward leaves them. A memory fault reading the weights is returned as
// Forward returns it.
func (b *Batcher) decode(ss []*Session, ids []int) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if !kernels.IsFault(r) {
				panic(r)
			}
			err = FaultError(b.m.Path, r)
		}
	}()
	m, c, B := b.m, b.m.Config, len(ss)
	bf := &b.buf
	bf.ensure(c, B)
	H := c.Hidden
	x := bf.x[:B*H]
	for t, id := range ids {
		m.Embed.RowF32(x[t*H:(t+1)*H], id)
	}
	defer b.pool.Prefetch(nil) // a panic leaves no weights named
	for i := range m.Layers {
		b.pool.Prefetch(aheadFor(ss, i+1)) // as Session.forward reads ahead
		b.attention(ss, i)
		b.ffn(ss, i)
	}
	b.pool.Prefetch(nil)
	xb := bf.xb[:B*H]
	normRows(xb, x, m.Norm, B, c.RMSNormEps)
	if need := B * c.Vocab; len(bf.logits) < need {
		bf.logits = make([]float32, need)
	}
	logits := bf.logits[:B*c.Vocab]
	kernels.MatVecBatch(b.pool, logits, m.LMHead, xb, B)
	for t, s := range ss {
		if len(s.buf.logits) < c.Vocab {
			s.buf.logits = make([]float32, c.Vocab)
		}
		copy(s.buf.logits, logits[t*c.Vocab:(t+1)*c.Vocab])
		s.pos++
	}
	return nil
}

// aheadFor is Session.aheadFor for a step of the sessions ss: with
// gate_proj where any of them reads it whole (their lists are their
// model's, the same for all).
func aheadFor(ss []*Session, i int) *kernels.Ahead {
	for _, s := range ss {
		if s.gateWhole(i) {
			return s.aheadFor(i)
		}
	}
	return ss[0].aheadFor(i)
}

// attention is Session.attention for one token of each session, at its own
// position and over its own KV cache.
func (b *Batcher) attention(ss []*Session, i int) {
	c := b.m.Config
	l := &b.m.Layers[i]
	bf := &b.buf
	B, H, hd := len(ss), c.Hidden, c.HeadDim
	qd, kvd, half := c.Heads*hd, c.KVHeads*hd, hd/2
	x, xb := bf.x[:B*H], bf.xb[:B*H]
	normRows(xb, x, l.AttnNorm, B, c.RMSNormEps)
	q, k, v := bf.q[:B*qd], bf.k[:B*kvd], bf.v[:B*kvd]
	bf.fuseW, bf.fuseDst = [3]kernels.Mat{l.Q, l.K, l.V}, [3][]float32{q, k, v}
	kernels.MatVecsBatch(b.pool, bf.fuseDst[:], bf.fuseW[:], xb, B)
	addBias(q, l.QBias, B)
	addBias(k, l.KBias, B)
	addBias(v, l.VBias, B)
	out := bf.attnOut[:B*qd]
	b.kv, b.pos = b.kv[:0], b.pos[:0]
	for t, s := range ss {
		p := s.pos
		qt, kt, vt := q[t*qd:(t+1)*qd], k[t*kvd:(t+1)*kvd], v[t*kvd:(t+1)*kvd]
		cos, sin := s.buf.ropeCos[p*half:(p+1)*half], s.buf.ropeSin[p*half:(p+1)*half]
		kernels.Rope(qt, c.Heads, cos, sin)
		kernels.Rope(kt, c.KVHeads, cos, sin)
		s.kcache[i].Put(p, kt)
		s.vcache[i].Put(p, vt)
		b.kv, b.pos = append(b.kv, s.kcache[i]), append(b.pos, p)
	}
	for _, s := range ss {
		b.kv = append(b.kv, s.vcache[i])
	}
	// Every token's heads in one pool call, each as Attention computes it.
	kernels.AttentionBatch(b.pool, out, q, b.kv, b.pos, kernels.AttnShape{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: hd})
	b.project(xb, l.O, out, B, l.OBias)
	kernels.Add(x, xb)
}

// project is Session.project for B tokens of B sessions: MatVec's result
// for each.
func (b *Batcher) project(dst []float32, w kernels.Mat, src []float32, B int, bias []float32) {
	kernels.MatVecBatch(b.pool, dst, w, src, B)
	addBias(dst, bias, B)
}

// ffn is Session.ffn for one token of each session. Where every session
// computes the layer's loaded rows as they are (dense decode, a γ-dense
// file) they go as one batch; otherwise each session runs its own.
func (b *Batcher) ffn(ss []*Session, i int) {
	c := b.m.Config
	f := &b.m.Layers[i].MLP
	bf := &b.buf
	B, H := len(ss), c.Hidden
	x := bf.x[:B*H]
	xb, y := bf.xb[:B*H], bf.xb2[:B*H]
	kept := f.Kept()
	if gateFirst(ss, i) {
		// Rows picked per token from the gate product over every stored
		// row (GateFirst, the oracle): that product as one batch, the rows
		// each session's own.
		normRows(xb, x, b.m.Layers[i].MLPNorm, B, c.RMSNormEps)
		g := bf.gate[:B*kept]
		b.project(g, f.Gate, xb, B, nil)
		for t, s := range ss {
			s.ffnFromGate(i, s.perToken[i], g[t*kept:(t+1)*kept], xb[t*H:(t+1)*H], y[t*H:(t+1)*H])
		}
		addFFN(x, y, f.DownBias, B)
		return
	}
	for _, s := range ss {
		if !s.plainFFN(i) {
			for t, s := range ss {
				s.ensure(1)
				copy(s.buf.x[:H], x[t*H:(t+1)*H])
				s.ffn(i, 1)
				copy(x[t*H:(t+1)*H], s.buf.x[:H])
			}
			return
		}
	}
	normRows(xb, x, b.m.Layers[i].MLPNorm, B, c.RMSNormEps)
	g, u := bf.gate[:B*kept], bf.up[:B*kept]
	bf.fuseW, bf.fuseDst = [3]kernels.Mat{f.Gate, f.Up}, [3][]float32{g, u}
	kernels.MatVecsBatch(b.pool, bf.fuseDst[:2], bf.fuseW[:2], xb, B)
	kernels.SwiGLUBatch(b.pool, g, u, B)
	if f.Sliced {
		clear(y)
		kernels.AddRowsBatch(b.pool, y, f.DownT, g, B)
	} else {
		b.project(y, f.Down, g, B, nil)
	}
	addFFN(x, y, f.DownBias, B)
}

// gateFirst reports whether every session picks layer i's rows per token
// from its gate product over every stored row (Session.ffnPerToken).
func gateFirst(ss []*Session, i int) bool {
	for _, s := range ss {
		if s.perToken[i] == 0 {
			return false
		}
	}
	return true
}

// plainFFN reports whether layer i's decode step computes every loaded row
// with nothing observing it: Session.ffn's dense branch at T = 1.
func (s *Session) plainFFN(i int) bool {
	return s.perToken[i] == 0 && s.active[i] == nil && s.Observe == nil && s.calib == nil && s.mass == nil
}
