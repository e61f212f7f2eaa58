// Package cuda runs sinf models on an NVIDIA GPU: the forward pass of
// runtime.Session (RMSNorm, rotate-half RoPE, GQA attention over a device KV
// cache, SwiGLU, SelectInfer's selective FFN) on the kernels of
// libsinfcuda (kernels/*.cu, C API sinfcuda.h).
//
// Build with -tags cuda after `make cuda` (which compiles the kernels with
// nvcc into build/libsinfcuda.a); without the tag, Open and Available return
// an error saying so. The weights stay where the model maps them: on an
// integrated GPU (Jetson) the mapped file is registered with the driver and
// read in place; on a discrete GPU every tensor is copied once to device
// memory (Options.Mapped keeps the registered file there too).
//
// A Session implements runtime.Generator: Generate and Score follow
// runtime.Session's contract (prefill computes every loaded neuron and, in a
// sparse mode, counts activations on the device to pick each layer's active
// rows; decode computes only those rows). Greedy decoding takes the argmax on
// the device; other sampling copies the logits to the CPU.
package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/selectinfer/sinf/format"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// DefaultContext is the KV cache length when Options.Context is 0 (a device
// KV cache is allocated whole, so the model's max_position_embeddings, often
// 131072, would cost gigabytes).
const DefaultContext = 4096

// maxBatch is the most tokens one forward call takes (a CUDA grid dimension).
const maxBatch = 65535

// Options configure Open.
type Options struct {
	Device  int  // CUDA device ordinal
	Context int  // KV cache positions (0: min(max_position_embeddings, DefaultContext))
	Mapped  bool // read the weights from the registered mapped file on a discrete GPU too
}

// Info describes the device and where the weights are.
type Info struct {
	GPU         string // device name
	Capability  string // compute capability, "9.0"
	Integrated  bool   // shares memory with the CPU (Jetson)
	MemoryBytes int64  // device memory
	Runtime     string // CUDA runtime and driver versions, "12.4"
	Driver      string
	Weights     string // "mapped" (registered file, no copy), "managed" (one managed copy) or "device" (device copy)
	Note        string // why a fallback path was taken, or ""
}

// Session is one sequence on the GPU (runtime.Session's counterpart).
type Session struct {
	m    *runtime.Model
	be   backend
	info Info
	ctx  int // KV cache positions
	pos  int // positions filled

	embed, lmhead weight
	norm          Ptr
	layers        []devLayer
	maxKept       int

	// Batch buffers, room for T tokens.
	T                            int
	x, xb, xb2, q, gate, up, ids Ptr
	ones                         Ptr // [T] float 1.0: the weights of the bias rows
	logits, argmaxOut            Ptr
	kc, vc                       []Ptr // per layer [ctx, kv·hd]
	cos, sin                     Ptr   // [ctx, hd/2]
	counts, active               []Ptr // per sliced layer [kept] int32
	activeN                      []int // rows in active[i]; -1: all rows
	// perToken[i] > 0: decode picks that many rows of layer i per token
	// (GateFirst; counts[i] then holds the keys, active[i] the rows); h
	// [maxKept] holds their SwiGLU.
	perToken    []int
	h           Ptr
	calibrating bool // the forward pass adds to each sliced layer's calA, calS

	allocs     []Ptr
	hostLogits []float32
	closed     bool
}

type devLayer struct {
	attnNorm, mlpNorm     Ptr
	q, k, v, o            weight
	qb, kb, vb, ob        Ptr
	gate, up, down, downT weight
	// sketch is a sliced layer's SK2 up_proj sketch (runtime.MLP.UpSketch,
	// spec §6.2) as an [kept, hidden] matrix; p is 0 when the file stores
	// none. GateFirst then ranks rows by it (sketchWeights).
	sketch weight
	// bias is a reconstructed layer's output bias (runtime.MLP.DownBias) as
	// an F32 [1, hidden] matrix, added as one more row of weight 1 (ones);
	// p is 0 when the file stores none.
	bias       weight
	sliced     bool
	base, kept int
	// GateFirst, allocated on its first use: the row norms (runtime.Model.
	// RowNorms, float [kept]), the prefill's calibration sums (double
	// [kept]) and the row weights (float [kept]).
	upNorm, downNorm, calA, calS, gateW Ptr
}

var _ runtime.Generator = (*Session)(nil)

// Open starts a GPU session for m: it creates a CUDA context on the device,
// places the weights (Info.Weights says how) and allocates the KV cache. The
// error names the reason when there is no usable GPU (built without the cuda
// tag, no driver, no device).
func Open(m *runtime.Model, o Options) (*Session, error) {
	be, err := newBackend(o.Device)
	if err != nil {
		return nil, err
	}
	s, err := newSession(m, be, o)
	if err != nil {
		be.close()
		return nil, err
	}
	return s, nil
}

func newSession(m *runtime.Model, be backend, o Options) (_ *Session, err error) {
	c := m.Config
	ctx := o.Context
	if ctx <= 0 {
		ctx = min(c.MaxContext(), DefaultContext)
	}
	ctx = min(ctx, c.MaxContext())
	if c.HeadDim > 256 {
		return nil, fmt.Errorf("cuda: head_dim %d above 256 is not supported", c.HeadDim)
	}
	if d, ok := unsupportedWeights(m); ok && d.Interleaved() {
		return nil, fmt.Errorf("cuda: %v weights (rows interleaved for the CPU's kernels, spec §5.4) are not supported by the CUDA backend; convert without --interleave, or run this file on the CPU (without --device cuda)", d)
	} else if ok {
		return nil, fmt.Errorf("cuda: %v weights are not supported by the CUDA backend (it takes F32, F16, BF16 and GGML's block dtypes); run this file on the CPU (without --device cuda)", d)
	}
	s := &Session{m: m, be: be, info: be.deviceInfo(), ctx: ctx, layers: make([]devLayer, c.Layers)}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	if err := s.placeWeights(o.Mapped); err != nil {
		return nil, err
	}
	if s.norm, err = s.vec(m.Norm); err != nil {
		return nil, err
	}
	for i := range m.Layers {
		l, d := &m.Layers[i], &s.layers[i]
		for _, v := range []struct {
			dst *Ptr
			src []float32
		}{{&d.attnNorm, l.AttnNorm}, {&d.mlpNorm, l.MLPNorm}, {&d.qb, l.QBias}, {&d.kb, l.KBias}, {&d.vb, l.VBias}, {&d.ob, l.OBias}} {
			if *v.dst, err = s.vec(v.src); err != nil {
				return nil, err
			}
		}
		if b := l.MLP.DownBias; b != nil {
			d.bias = weight{dtype: format.F32, rows: 1, cols: len(b)}
			if d.bias.p, err = s.vec(b); err != nil {
				return nil, err
			}
		}
		d.sliced, d.base, d.kept = l.MLP.Sliced, l.MLP.Base, l.MLP.Kept()
		s.maxKept = max(s.maxKept, d.kept)
	}
	kvd := c.KVHeads * c.HeadDim
	s.kc, s.vc = make([]Ptr, c.Layers), make([]Ptr, c.Layers)
	s.counts, s.active = make([]Ptr, c.Layers), make([]Ptr, c.Layers)
	s.activeN, s.perToken = make([]int, c.Layers), make([]int, c.Layers)
	if s.h, err = s.alloc(4 * s.maxKept); err != nil {
		return nil, err
	}
	for i := range s.kc {
		if s.kc[i], err = s.alloc(4 * ctx * kvd); err != nil {
			return nil, err
		}
		if s.vc[i], err = s.alloc(4 * ctx * kvd); err != nil {
			return nil, err
		}
		s.activeN[i] = -1
		if d := &s.layers[i]; d.sliced {
			if s.counts[i], err = s.alloc(4 * d.kept); err != nil {
				return nil, err
			}
			if s.active[i], err = s.alloc(4 * d.kept); err != nil {
				return nil, err
			}
		}
	}
	// RoPE tables, computed as runtime.NewSession does.
	cos, sin := ropeTables(c, ctx)
	if s.cos, err = s.vec(cos); err != nil {
		return nil, err
	}
	if s.sin, err = s.vec(sin); err != nil {
		return nil, err
	}
	if s.logits, err = s.alloc(4 * c.Vocab); err != nil {
		return nil, err
	}
	if s.argmaxOut, err = s.alloc(256); err != nil {
		return nil, err
	}
	if err := s.ensure(1); err != nil {
		return nil, err
	}
	return s, be.sync()
}

// unsupportedWeights returns the dtype of the first matrix of m the CUDA
// kernels do not take (sinfcuda.h lists the ones they do: F32, F16, BF16,
// Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; not the interleaved rows of spec
// §5.4, a CPU layout).
func unsupportedWeights(m *runtime.Model) (format.DType, bool) {
	return firstWeight(m, func(d format.DType) bool {
		return d != 0 && d != format.F32 && d != format.F16 && d != format.BF16 && !d.Quantized() || d.Interleaved()
	})
}

// firstWeight returns the dtype of m's first weight matrix for which pick
// holds.
func firstWeight(m *runtime.Model, pick func(format.DType) bool) (format.DType, bool) {
	mats := []kernels.Mat{m.Embed, m.LMHead}
	for i := range m.Layers {
		l := &m.Layers[i]
		mats = append(mats, l.Q, l.K, l.V, l.O, l.MLP.Gate, l.MLP.Up, l.MLP.Down, l.MLP.DownT)
	}
	for _, w := range mats {
		if pick(w.DType) {
			return w.DType, true
		}
	}
	return 0, false
}

// placeWeights hands every weight matrix's bytes (each distinct view once:
// a tied head shares the embedding) to the backend and binds the layers'
// matrices to their device addresses.
func (s *Session) placeWeights(mapped bool) error {
	m := s.m
	type ref struct {
		mat *kernels.Mat
		dst *weight
	}
	var refs []ref
	add := func(mat *kernels.Mat, dst *weight) {
		if len(mat.Data) > 0 {
			refs = append(refs, ref{mat, dst})
		}
	}
	add(&m.Embed, &s.embed)
	add(&m.LMHead, &s.lmhead)
	for i := range m.Layers {
		l, d := &m.Layers[i], &s.layers[i]
		add(&l.Q, &d.q)
		add(&l.K, &d.k)
		add(&l.V, &d.v)
		add(&l.O, &d.o)
		add(&l.MLP.Gate, &d.gate)
		add(&l.MLP.Up, &d.up)
		add(&l.MLP.Down, &d.down)
		add(&l.MLP.DownT, &d.downT)
		if sk := l.MLP.UpSketch; sk.Rows > 0 {
			add(&kernels.Mat{DType: format.SK2, Rows: sk.Rows, Cols: sk.Cols, Data: sk.Data}, &d.sketch)
		}
	}
	index := map[*byte]int{}
	var blobs [][]byte
	which := make([]int, len(refs))
	for i, r := range refs {
		key := &r.mat.Data[0]
		j, ok := index[key]
		if !ok || len(blobs[j]) != len(r.mat.Data) {
			j = len(blobs)
			index[key] = j
			blobs = append(blobs, r.mat.Data)
		}
		which[i] = j
	}
	pl, err := s.be.placeWeights(blobs, mapped)
	if err != nil {
		return err
	}
	s.info.Weights, s.info.Note = pl.weights, pl.note
	for i, r := range refs {
		*r.dst = weight{p: pl.ptrs[which[i]], dtype: r.mat.DType, rows: r.mat.Rows, cols: r.mat.Cols}
	}
	return nil
}

// ropeTables returns cos and sin [ctx, hd/2] of runtime.NewSession.
func ropeTables(c runtime.Config, ctx int) (cos, sin []float32) {
	inv := c.RopeInvFreq()
	half := len(inv)
	cos, sin = make([]float32, ctx*half), make([]float32, ctx*half)
	for p := 0; p < ctx; p++ {
		for i, f := range inv {
			a := float64(p) * f
			cos[p*half+i] = float32(math.Cos(a))
			sin[p*half+i] = float32(math.Sin(a))
		}
	}
	return cos, sin
}

func (s *Session) alloc(bytes int) (Ptr, error) {
	p, err := s.be.alloc(bytes)
	if err != nil {
		return 0, err
	}
	s.allocs = append(s.allocs, p)
	return p, nil
}

func (s *Session) freeAlloc(p Ptr) {
	if p == 0 {
		return
	}
	if i := slices.Index(s.allocs, p); i >= 0 {
		s.allocs = slices.Delete(s.allocs, i, i+1)
	}
	s.be.free(p)
}

// vec copies a float32 vector to the device (nil: 0).
func (s *Session) vec(v []float32) (Ptr, error) {
	if v == nil {
		return 0, nil
	}
	p, err := s.alloc(4 * len(v))
	if err != nil {
		return 0, err
	}
	return p, s.be.upload(p, f32Bytes(v))
}

func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

func i32Bytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// ensure makes the batch buffers hold T tokens.
func (s *Session) ensure(T int) error {
	if T <= s.T {
		return nil
	}
	c := s.m.Config
	H, qd := c.Hidden, c.Heads*c.HeadDim
	for _, p := range []Ptr{s.x, s.xb, s.xb2, s.q, s.gate, s.up, s.ids, s.ones} {
		s.freeAlloc(p)
	}
	s.x, s.xb, s.xb2, s.q, s.gate, s.up, s.ids, s.ones, s.T = 0, 0, 0, 0, 0, 0, 0, 0, 0
	var err error
	for _, b := range []struct {
		dst   *Ptr
		elems int
	}{{&s.x, T * H}, {&s.xb, T * H}, {&s.xb2, T * max(H, qd)}, {&s.q, T * qd},
		{&s.gate, T * s.maxKept}, {&s.up, T * s.maxKept}, {&s.ids, T}} {
		if *b.dst, err = s.alloc(4 * b.elems); err != nil {
			return err
		}
	}
	ones := make([]float32, T) // the bias rows' weights (ffn)
	for t := range ones {
		ones[t] = 1
	}
	if s.ones, err = s.vec(ones); err != nil {
		return err
	}
	s.T = T
	return nil
}

// Info returns the device and weight placement.
func (s *Session) Info() Info { return s.info }

// Context returns the KV cache length in positions.
func (s *Session) Context() int { return s.ctx }

// Pos returns the number of positions in the KV cache.
func (s *Session) Pos() int { return s.pos }

// Reset empties the KV cache and the active sets.
func (s *Session) Reset() {
	s.pos = 0
	for i := range s.activeN {
		s.activeN[i] = -1
	}
	clear(s.perToken)
}

// Close releases the device memory, the registered file and the context.
func (s *Session) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.release()
	s.be.close()
}

func (s *Session) release() {
	for _, p := range s.allocs {
		s.be.free(p)
	}
	s.allocs = nil
	s.be.releaseWeights()
}

// forward runs tokens at positions Pos()… through the model, leaving the
// last token's logits in s.logits. With count set, each sliced layer's
// activations are counted into s.counts (runtime.Counter with alpha).
func (s *Session) forward(tokens []int, count bool, alpha float64) error {
	c := s.m.Config
	T := len(tokens)
	if T == 0 {
		return errors.New("forward: no tokens")
	}
	if s.pos+T > s.ctx {
		return fmt.Errorf("%w: %d positions filled + %d new > context %d", runtime.ErrContextFull, s.pos, T, s.ctx)
	}
	if T > maxBatch {
		return fmt.Errorf("forward: %d tokens in one batch; the GPU kernels take at most %d", T, maxBatch)
	}
	for _, t := range tokens {
		if t < 0 || t >= c.Vocab {
			return fmt.Errorf("forward: token id %d outside [0, %d)", t, c.Vocab)
		}
	}
	if err := s.ensure(T); err != nil {
		return err
	}
	be := s.be
	if T == 1 {
		be.embed(s.x, s.embed, 0, tokens[0], 1)
	} else {
		ids := make([]int32, T)
		for i, t := range tokens {
			ids[i] = int32(t)
		}
		if err := be.upload(s.ids, i32Bytes(ids)); err != nil {
			return err
		}
		be.embed(s.x, s.embed, s.ids, 0, T)
	}
	for i := range s.layers {
		s.attention(i, T)
		s.ffn(i, T, count, alpha)
	}
	H := c.Hidden
	be.rmsnorm(s.xb, s.x.add(4*(T-1)*H), s.norm, 1, H, c.RMSNormEps)
	be.matvec(s.logits, s.lmhead, 0, c.Vocab, s.xb, 0, false)
	s.pos += T
	return nil
}

// project computes dst[T, w.rows] (+)= src[T, w.cols]·wᵀ (+ bias).
func (s *Session) project(dst Ptr, w weight, src Ptr, T int, bias Ptr, accumulate bool) {
	if T == 1 {
		s.be.matvec(dst, w, 0, w.rows, src, bias, accumulate)
	} else {
		s.be.gemm(dst, w, src, T, bias, accumulate)
	}
}

func (s *Session) attention(i, T int) {
	c := s.m.Config
	d := &s.layers[i]
	be := s.be
	H, hd := c.Hidden, c.HeadDim
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	be.rmsnorm(s.xb, s.x, d.attnNorm, T, H, c.RMSNormEps)
	// K and V go straight to their cache rows.
	kdst, vdst := s.kc[i].add(4*s.pos*kvd), s.vc[i].add(4*s.pos*kvd)
	s.project(s.q, d.q, s.xb, T, d.qb, false)
	s.project(kdst, d.k, s.xb, T, d.kb, false)
	s.project(vdst, d.v, s.xb, T, d.vb, false)
	be.rope(s.q, s.cos, s.sin, s.pos, T, c.Heads, hd, qd)
	be.rope(kdst, s.cos, s.sin, s.pos, T, c.KVHeads, hd, kvd)
	be.attention(s.xb2, s.q, s.kc[i], s.vc[i], s.pos, T, c.Heads, c.KVHeads, hd)
	// Output projection added to the residual stream.
	s.project(s.x, d.o, s.xb2, T, d.ob, true)
}

// ffn runs layer i's MLP on the T tokens and adds its output, and then the
// layer's output bias (a reconstructed file), to the residual stream x.
func (s *Session) ffn(i, T int, count bool, alpha float64) {
	s.ffnRows(i, T, count, alpha)
	if d := &s.layers[i]; d.bias.p != 0 {
		// x[t] += 1·bias: the bias is one more row of weight 1 (ones),
		// added after the rows as runtime.Session adds it.
		if T == 1 {
			s.be.addRows(s.x, d.bias, 0, 1, s.ones, true)
		} else {
			s.be.gemmRowsT(s.x, d.bias, s.ones, T, true)
		}
	}
}

func (s *Session) ffnRows(i, T int, count bool, alpha float64) {
	c := s.m.Config
	d := &s.layers[i]
	be := s.be
	H := c.Hidden
	be.rmsnorm(s.xb, s.x, d.mlpNorm, T, H, c.RMSNormEps)
	if k := s.perToken[i]; k > 0 && T == 1 {
		// GateFirst (runtime.Session.ffnPerToken, pickRows): the gate of
		// every stored row, the k best by |silu(g)|·w (keys in counts[i]),
		// w the prefill's row weights or, on a layer with an up_proj
		// sketch, |(sketch·x)·‖down‖| per token (in s.up until the up rows
		// overwrite it), then their up rows and transposed down_proj rows.
		be.matvec(s.gate, d.gate, 0, d.kept, s.xb, 0, false)
		w := d.gateW
		if d.sketch.p != 0 {
			be.sketchWeights(s.up, d.sketch, s.xb, d.downNorm, d.kept)
			w = s.up
		}
		be.gateScore(s.counts[i], s.gate, w, d.kept)
		be.selectTop(s.active[i], s.counts[i], d.kept, 0, k)
		be.matvec(s.up, d.up, s.active[i], k, s.xb, 0, false)
		be.gatherSiluMul(s.h, s.gate, s.active[i], s.up, k)
		be.addRows(s.x, d.downT, s.active[i], k, s.h, true)
		return
	}
	if n := s.activeN[i]; n >= 0 && T == 1 {
		// Decode over the active rows: gathered gate/up rows, fused SwiGLU,
		// then the matching rows of the transposed down_proj.
		be.gateUp(s.gate, d.gate, d.up, s.active[i], n, s.xb)
		be.addRows(s.x, d.downT, s.active[i], n, s.gate, true)
		return
	}
	kept := d.kept
	calib := s.calibrating && d.sliced
	switch {
	case T == 1 && !calib:
		be.gateUp(s.gate, d.gate, d.up, 0, kept, s.xb)
	case T == 1:
		be.matvec(s.gate, d.gate, 0, kept, s.xb, 0, false)
		be.matvec(s.up, d.up, 0, kept, s.xb, 0, false)
		be.siluMul(s.gate, s.up, kept)
	default:
		be.gemm(s.gate, d.gate, s.xb, T, 0, false)
		be.gemm(s.up, d.up, s.xb, T, 0, false)
		be.siluMul(s.gate, s.up, T*kept)
	}
	if calib {
		be.gateCalib(d.calA, d.calS, s.gate, s.up, T, kept)
	}
	if count && d.sliced {
		be.countTop(s.counts[i], s.gate, T, kept, alpha)
	}
	switch {
	case d.sliced && T == 1:
		be.addRows(s.x, d.downT, 0, kept, s.gate, true)
	case d.sliced:
		be.gemmRowsT(s.x, d.downT, s.gate, T, true)
	default:
		s.project(s.x, d.down, s.gate, T, 0, true)
	}
}

// startCalib allocates (once) and clears GateFirst's buffers of every
// sliced layer and makes the next forward pass add to the calibration sums
// (runtime.Session's startCalib).
func (s *Session) startCalib() error {
	for i := range s.layers {
		d := &s.layers[i]
		if !d.sliced {
			continue
		}
		if d.gateW == 0 {
			n := s.m.RowNorms(i)
			var err error
			if d.upNorm, err = s.vec(n.Up); err != nil {
				return err
			}
			if d.downNorm, err = s.vec(n.Down); err != nil {
				return err
			}
			if d.calA, err = s.alloc(8 * d.kept); err != nil {
				return err
			}
			if d.calS, err = s.alloc(8 * d.kept); err != nil {
				return err
			}
			if d.gateW, err = s.alloc(4 * d.kept); err != nil {
				return err
			}
		}
		s.be.zero(d.calA, 8*d.kept)
		s.be.zero(d.calS, 8*d.kept)
	}
	s.calibrating = true
	return nil
}

// nextToken picks the next token from s.logits: the argmax on the device
// (greedy), or the sampler over logits copied to the CPU.
func (s *Session) nextToken(sampler *runtime.Sampler) (int, error) {
	if sampler == nil || sampler.Greedy() {
		s.be.argmax(s.argmaxOut, s.logits, s.m.Config.Vocab)
		var id [1]int32
		if err := s.be.download(i32Bytes(id[:]), s.argmaxOut); err != nil {
			return 0, err
		}
		return int(id[0]), nil
	}
	logits, err := s.Logits()
	if err != nil {
		return 0, err
	}
	return sampler.Sample(logits), nil
}

// Logits copies the last token's logits [vocab] to the CPU; the slice is
// reused by the next call.
func (s *Session) Logits() ([]float32, error) {
	if len(s.hostLogits) != s.m.Config.Vocab {
		s.hostLogits = make([]float32, s.m.Config.Vocab)
	}
	return s.hostLogits, s.be.download(f32Bytes(s.hostLogits), s.logits)
}

// Forward runs tokens through the model as runtime.Session.Forward does and
// returns the last token's logits (reused by the next call).
func (s *Session) Forward(tokens []int) ([]float32, error) {
	if err := s.forward(tokens, false, 0); err != nil {
		return nil, err
	}
	return s.Logits()
}

// SetActive sets the rows of layer i's MLP that decode computes (nil: all);
// the layer must be sliced.
func (s *Session) SetActive(layer int, rows []int32) error {
	if rows == nil {
		s.activeN[layer] = -1
		return nil
	}
	d := &s.layers[layer]
	if !d.sliced || len(rows) > d.kept {
		return fmt.Errorf("cuda: layer %d: %d active rows for a layer that is not sliced or stores fewer", layer, len(rows))
	}
	for _, r := range rows {
		if r < 0 || int(r) >= d.kept {
			return fmt.Errorf("cuda: layer %d: active row %d outside [0, %d)", layer, r, d.kept)
		}
	}
	if err := s.be.upload(s.active[layer], i32Bytes(rows)); err != nil {
		return err
	}
	s.activeN[layer] = len(rows)
	return nil
}

// Active copies layer i's active rows to the CPU (nil: all rows).
func (s *Session) Active(layer int) ([]int32, error) {
	n := s.activeN[layer]
	if n < 0 {
		return nil, nil
	}
	rows := make([]int32, n)
	return rows, s.be.download(i32Bytes(rows), s.active[layer])
}

// Generate runs the prompt as one batched prefill computing every loaded
// neuron; in a sparse mode it counts activations and fixes each sliced
// layer's active rows on the device; then it decodes one token at a time
// until MaxTokens, an EOS id, Stop, or the end of the context (runtime.Session's
// contract: both are runtime.GenerateOn). The session must be empty.
func (s *Session) Generate(prompt []int, opt runtime.GenerateOptions) (runtime.Result, error) {
	return runtime.GenerateOn(gpuDecoder{s}, prompt, opt)
}

// Score returns the negative log-likelihood of each token of cont given the
// prompt and the tokens of cont before it (runtime.ScoreOn, as
// runtime.Session.Score: the prompt is one prefill, which fixes the active
// sets in a sparse mode, then cont is fed one token at a time through
// decode).
func (s *Session) Score(prompt, cont []int, sp runtime.Sparsity) ([]float64, error) {
	return runtime.ScoreOn(gpuDecoder{s}, prompt, cont, sp)
}

// gpuDecoder is the Session as the runtime.Decoder of GenerateOn and
// ScoreOn.
type gpuDecoder struct{ s *Session }

func (d gpuDecoder) Model() *runtime.Model                      { return d.s.m }
func (d gpuDecoder) Pos() int                                   { return d.s.pos }
func (d gpuDecoder) Context() int                               { return d.s.ctx }
func (d gpuDecoder) Sync() error                                { return d.s.be.sync() }
func (d gpuDecoder) Decode(id int) error                        { return d.s.forward([]int{id}, false, 0) }
func (d gpuDecoder) Logits() ([]float32, error)                 { return d.s.Logits() }
func (d gpuDecoder) Next(sampler *runtime.Sampler) (int, error) { return d.s.nextToken(sampler) }

// Prefill: the prompt with the activations counted on the device
// (SelectInfer, CoreInfer) or GateFirst's calibration, then the active rows
// (sinf_select_top: runtime.ActiveSet) or GateFirst's row weights and
// per-token count of each sliced layer.
func (d gpuDecoder) Prefill(prompt []int, sp runtime.Sparsity) ([]int, error) {
	s := d.s
	if sp.Mode == runtime.Oracle {
		return nil, errors.New("cuda: mode oracle is a bound measured on the CPU (sinf eval), not a decode mode of the GPU backend")
	}
	count := sp.Mode != runtime.Dense && !sp.Mode.PerToken()
	if count {
		for i, l := range s.layers {
			if l.sliced {
				s.be.zero(s.counts[i], 4*l.kept)
			}
		}
	}
	if sp.Mode.PerToken() {
		if err := s.startCalib(); err != nil {
			return nil, err
		}
	}
	err := s.forward(prompt, count, sp.Alpha)
	s.calibrating = false
	if err != nil {
		return nil, err
	}
	N := s.m.Config.Intermediate
	computed := make([]int, 0, len(s.layers))
	for i, l := range s.layers {
		if count && l.sliced {
			// runtime.ActiveSet on the device.
			target := min(runtime.RoundCount(sp.Phi, N), l.kept)
			static := 0
			if sp.Mode == runtime.SelectInfer {
				static = min(l.base, target)
			}
			s.be.selectTop(s.active[i], s.counts[i], l.kept, static, target)
			s.activeN[i] = target
		}
		if sp.Mode.PerToken() && l.sliced {
			s.be.gateWeights(l.gateW, l.calA, l.calS, l.upNorm, l.downNorm, l.kept)
			s.perToken[i] = min(runtime.RoundCount(sp.Phi, N), l.kept)
		}
		if k := s.perToken[i]; k > 0 {
			computed = append(computed, k)
		} else if n := s.activeN[i]; n >= 0 {
			computed = append(computed, n)
		} else {
			computed = append(computed, l.kept)
		}
	}
	return computed, nil
}
