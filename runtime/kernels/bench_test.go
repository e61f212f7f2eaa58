package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/selectinfer/sinf/format"
)

// Benchmarks at the shapes of the shared models. Each reports the weight
// bytes it reads per call as B/s (b.SetBytes), to be compared with
// BenchmarkReadBandwidth, the plain read of a 256 MiB buffer. Like a decode
// step, which streams every layer's weights, each call reads a different copy
// of the matrix, the copies totalling at least 256 MiB, so the weights come
// from memory rather than from the last-level cache.
//
//	go test -run '^$' -bench . -benchtime 2s ./runtime/kernels/
//
// SINF_KERNELS=avx2 (or generic, ...) measures another kernel set.

type benchShape struct {
	name       string
	rows, cols int
}

var (
	// SmolLM2-135M: hidden 576, intermediate 1536.
	smolFFN  = benchShape{"smol-ffn", 1536, 576}  // gate/up_proj, transposed down_proj
	smolDown = benchShape{"smol-down", 576, 1536} // down_proj as stored
	// Llama-3.2-1B: hidden 2048, intermediate 8192, vocab 128256.
	llamaFFN  = benchShape{"llama1b-ffn", 8192, 2048}
	llamaDown = benchShape{"llama1b-down", 2048, 8192}
	llamaHead = benchShape{"llama1b-lmhead", 128256, 2048}
)

var benchThreads = []int{1, 2}

// benchSet is a matrix's copies; next returns them in turn.
type benchSet struct {
	mats []Mat
	i    int
}

func (s *benchSet) next() Mat {
	s.i = (s.i + 1) % len(s.mats)
	return s.mats[s.i]
}

const benchStream = 256 << 20 // bytes of weight copies per shape

// benchCache keeps the last shape's copies across its sub-benchmarks.
var benchCache struct {
	key string
	set *benchSet
}

func benchMats(sh benchShape, d format.DType) *benchSet {
	key := fmt.Sprintf("%s/%v", sh.name, d)
	if benchCache.key == key {
		return benchCache.set
	}
	benchCache.key, benchCache.set = "", nil // let the old copies go first
	m := benchMat(sh, d)
	set := &benchSet{mats: []Mat{m}}
	for len(set.mats)*m.Bytes() < benchStream {
		c := m
		c.Data = append([]byte(nil), m.Data...)
		set.mats = append(set.mats, c)
	}
	benchCache.key, benchCache.set = key, set
	return set
}

func benchMat(sh benchShape, d format.DType) Mat {
	// Values from a table of normal samples: finite, not subnormal.
	rng := rand.New(rand.NewPCG(uint64(sh.rows), uint64(sh.cols)))
	const tn = 4096
	var t16 [tn]uint16
	var t32 [tn]uint32
	for i := range tn {
		f := float32(rng.NormFloat64())
		t32[i] = math.Float32bits(f)
		if d == format.F16 {
			t16[i] = format.F32ToF16(f)
		} else {
			t16[i] = format.F32ToBF16(f)
		}
	}
	n := sh.rows * sh.cols
	if d.Quantized() {
		f := make([]float32, n)
		s := rng.Uint64()
		for i := range f {
			s ^= s << 13
			s ^= s >> 7
			s ^= s << 17
			f[i] = math.Float32frombits(t32[s%tn])
		}
		b, err := format.Quantize(nil, f, d)
		if err != nil {
			panic(err)
		}
		return Mat{DType: d, Rows: sh.rows, Cols: sh.cols, Data: b}
	}
	b := make([]byte, n*d.Size())
	s := rng.Uint64()
	for i := 0; i < n; i++ {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		if d == format.F32 {
			binary.LittleEndian.PutUint32(b[4*i:], t32[s%tn])
		} else {
			binary.LittleEndian.PutUint16(b[2*i:], t16[s%tn])
		}
	}
	return Mat{DType: d, Rows: sh.rows, Cols: sh.cols, Data: b}
}

// benchRows returns a sorted random half of [0, n): a decode active set.
func benchRows(n int) []int32 {
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	rows := make([]int32, 0, n/2)
	for _, r := range rng.Perm(n)[:n/2] {
		rows = append(rows, int32(r))
	}
	slices.Sort(rows)
	return rows
}

func benchVec(n int) []float32 {
	rng := rand.New(rand.NewPCG(9, uint64(n)))
	return randVec(rng, n)
}

// forBench runs f for every dtype and thread count under name/shape.
func forBench(b *testing.B, shapes []benchShape, f func(b *testing.B, p *Pool, sh benchShape, d format.DType)) {
	for _, sh := range shapes {
		for _, d := range append(weightDTypes, quantDTypes...) {
			if d.Quantized() && sh.cols%blockElems(d) != 0 {
				continue // rows of 576 are no K-quant super-blocks
			}
			for _, th := range benchThreads {
				b.Run(fmt.Sprintf("%s/%v/t%d", sh.name, d, th), func(b *testing.B) {
					p := NewPool(th)
					defer p.Close()
					f(b, p, sh, d)
				})
			}
		}
	}
}

func BenchmarkReadBandwidth(b *testing.B) {
	const size = 256 << 20
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	for _, th := range benchThreads {
		b.Run(fmt.Sprintf("256MiB/t%d", th), func(b *testing.B) {
			p := NewPool(th)
			defer p.Close()
			b.SetBytes(size)
			for b.Loop() {
				readPass(p, buf)
			}
		})
	}
}

func BenchmarkMatVec(b *testing.B) {
	forBench(b, []benchShape{smolFFN, smolDown, llamaFFN, llamaDown, llamaHead}, func(b *testing.B, p *Pool, sh benchShape, d format.DType) {
		ws := benchMats(sh, d)
		w := ws.mats[0]
		x, dst := benchVec(w.Cols), make([]float32, w.Rows)
		b.SetBytes(int64(w.Bytes()))
		for b.Loop() {
			MatVec(p, dst, ws.next(), x)
		}
	})
}

// BenchmarkMatVecRows reads a random half of the gate/up rows.
func BenchmarkMatVecRows(b *testing.B) {
	forBench(b, []benchShape{smolFFN, llamaFFN}, func(b *testing.B, p *Pool, sh benchShape, d format.DType) {
		ws := benchMats(sh, d)
		w := ws.mats[0]
		rows := benchRows(w.Rows)
		x, dst := benchVec(w.Cols), make([]float32, len(rows))
		b.SetBytes(int64(len(rows) * w.RowBytes()))
		for b.Loop() {
			MatVecRows(p, dst, ws.next(), rows, x)
		}
	})
}

// BenchmarkAddRows accumulates every row of the transposed down_proj
// ([intermediate, hidden]) ("all") or a random half of them ("half").
func BenchmarkAddRows(b *testing.B) {
	for _, half := range []bool{false, true} {
		name := "all"
		if half {
			name = "half"
		}
		b.Run(name, func(b *testing.B) {
			forBench(b, []benchShape{smolFFN, llamaFFN}, func(b *testing.B, p *Pool, sh benchShape, d format.DType) {
				ws := benchMats(sh, d)
				w := ws.mats[0]
				var rows []int32
				n := w.Rows
				if half {
					rows = benchRows(w.Rows)
					n = len(rows)
				}
				a, dst := benchVec(n), make([]float32, w.Cols)
				b.SetBytes(int64(n * w.RowBytes()))
				for b.Loop() {
					AddRows(p, dst, ws.next(), rows, a)
				}
			})
		})
	}
}

const benchT = 32 // prefill tokens

// BenchmarkMatMul is a 32-token prefill through gate/up_proj; it also reports
// GFLOP/s.
func BenchmarkMatMul(b *testing.B) {
	forBench(b, []benchShape{smolFFN, llamaFFN}, func(b *testing.B, p *Pool, sh benchShape, d format.DType) {
		ws := benchMats(sh, d)
		w := ws.mats[0]
		x, dst := benchVec(benchT*w.Cols), make([]float32, benchT*w.Rows)
		b.SetBytes(int64(w.Bytes()))
		for b.Loop() {
			MatMul(p, dst, ws.next(), x, benchT)
		}
		b.ReportMetric(2*float64(benchT*w.Rows*w.Cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// BenchmarkMatMulRowsT is a 32-token prefill through the transposed
// down_proj; it also reports GFLOP/s.
func BenchmarkMatMulRowsT(b *testing.B) {
	forBench(b, []benchShape{smolFFN, llamaFFN}, func(b *testing.B, p *Pool, sh benchShape, d format.DType) {
		ws := benchMats(sh, d)
		w := ws.mats[0]
		a, dst := benchVec(benchT*w.Rows), make([]float32, benchT*w.Cols)
		b.SetBytes(int64(w.Bytes()))
		for b.Loop() {
			MatMulRowsT(p, dst, ws.next(), a, benchT)
		}
		b.ReportMetric(2*float64(benchT*w.Rows*w.Cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// BenchmarkRawSets times each runnable set's raw decode kernels on rows that
// stay in L2 (128 rows of 2048 weights: 1 MiB of F32, 512 KiB of F16/BF16,
// 272 KiB of Q8_0, 144 KiB of Q4_0), so that the instructions, not memory,
// set the pace: the per-operation measurement that picks each set's kernels
// (a wide form that loses takes the narrower one; isa_amd64.go records the
// choices). dotRows and qdotRows are the decode dots (gate/up_proj,
// attention, the LM head), axpy4 and qaxpy4 the neuron-row accumulation of
// down_proj.weight_t. B/s is weight bytes; cpu-ns/op is the thread's own CPU
// time per call (Linux; steadier than ns/op on a shared machine, where the
// thread waits for a CPU between its slices).
//
//	go test -run '^$' -bench RawSets ./runtime/kernels/
func BenchmarkRawSets(b *testing.B) {
	const rows, cols = 128, 2048
	x := benchVec(cols)
	nb := cols / 32
	xq, xd := make([]int8, 64*nb), make([]float32, 2*nb)
	quantizeX(xq, xd, x)
	dst := make([]float32, rows)
	acc := make([]float32, cols)
	a := benchVec(rows)
	for _, d := range append(weightDTypes, quantDTypes...) {
		w := benchMat(benchShape{"l2", rows, cols}, d)
		base, rb := dataPtr(w), w.RowBytes()
		row := func(r int) unsafe.Pointer { return unsafe.Add(base, r*rb) }
		for _, ks := range kernelSets() {
			var dot, axpy func()
			if d.Quantized() {
				// nbw: weight blocks a row; the K-quants have an x of their own
				q, nbw, xq, xd := qIndex(d), cols/blockElems(d), xq, xd
				if d.KQuant() {
					xq, xd = make([]int8, 64*nb), make([]float32, 2*nb)
					quantizeXFor(d)(xq, xd, x)
				}
				dot = func() { ks.qdotRows[q](base, rb, nil, &xq[0], &xd[0], nbw, rows, &dst[0], 0) }
				axpy = func() {
					for r := 0; r < rows; r += 4 {
						ks.qaxpy4[q](&acc[0], row(r), row(r+1), row(r+2), row(r+3), row(r+4), row(r+5), row(r+6), row(r+7), a[r], a[r+1], a[r+2], a[r+3], nbw)
					}
				}
			} else {
				i := dtIndex(d)
				dot = func() { ks.dotRows[i](base, rb, nil, &x[0], cols, rows, &dst[0], 0) }
				axpy = func() {
					for r := 0; r < rows; r += 4 {
						ks.axpy4[i](&acc[0], row(r), row(r+1), row(r+2), row(r+3), row(r+4), row(r+5), row(r+6), row(r+7), a[r], a[r+1], a[r+2], a[r+3], cols)
					}
				}
			}
			for _, op := range []struct {
				name string
				f    func()
			}{{"dot", dot}, {"axpy", axpy}} {
				b.Run(fmt.Sprintf("%s/%v/%s", op.name, d, ks.name), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					b.SetBytes(int64(len(w.Data)))
					cpu0 := threadCPU()
					for b.Loop() {
						op.f()
					}
					if cpu := threadCPU() - cpu0; cpu > 0 {
						b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
					}
				})
			}
		}
	}
}

// threadCPU returns the calling thread's CPU time so far in ns
// (CLOCK_THREAD_CPUTIME_ID; 0 where it cannot be read).
func threadCPU() int64 { return threadCPUTime() }

// BenchmarkRawGemm times the integer prefill kernels of each set (and each
// variant this CPU runs, qgemmVariants) on one L1-resident packed group of
// eight rows of 2048 weights by four tokens: qgemm (GMAC/s) and qpack (the
// repacking, B/s of weights).
//
//	go test -run '^$' -bench RawGemm ./runtime/kernels/
func BenchmarkRawGemm(b *testing.B) {
	const rows, cols, nb = 16, 2048, 2048 / 32
	x := benchVec(4 * cols)
	xq, xd := make([]int8, 4*2*cols), make([]float32, 4*2*nb)
	for j := range 4 {
		quantizeX(xq[j*2*cols:(j+1)*2*cols], xd[j*2*nb:(j+1)*2*nb], x[j*cols:(j+1)*cols])
	}
	dst := make([]float32, 4*rows)
	pack := make([]byte, 2*nb*qpackStride)
	sets := map[string]qgemmKernels{}
	for _, ks := range kernelSets() {
		sets[ks.name] = qgemmKernels{ks.qpack, ks.qgemm, ks.qrows}
	}
	for name, k := range qgemmVariants() {
		sets[name] = k
	}
	for _, d := range []format.DType{format.Q8_0, format.Q4_0} {
		w := benchMat(benchShape{"l1", rows, cols}, d)
		q := qIndex(d)
		// the repacking of whole matrices streamed from memory, as prefill reads them
		ws := benchMats(llamaFFN, d)
		for name, k := range sets {
			if k.gemm[q] == nil {
				continue
			}
			b.Run(fmt.Sprintf("pack-stream/%v/%s", d, name), func(b *testing.B) {
				big := make([]byte, qpackBytes+2*nb*qpackStride)
				b.SetBytes(int64(ws.mats[0].Bytes()))
				for b.Loop() {
					m := ws.next()
					for r := 0; r+k.rows <= m.Rows; r += k.rows {
						k.pack[q](&big[(r/8*nb*qpackStride)%qpackBytes], unsafe.Add(dataPtr(m), r*m.RowBytes()), m.RowBytes(), nb)
					}
				}
			})
		}
		for name, k := range sets {
			if k.gemm[q] == nil {
				continue
			}
			k.pack[q](&pack[0], dataPtr(w), w.RowBytes(), nb)
			b.Run(fmt.Sprintf("gemm/%v/%s", d, name), func(b *testing.B) {
				for b.Loop() {
					k.gemm[q](&pack[0], &xq[0], 2*cols, &xd[nb], 4*2*nb, nb, &dst[0], 4*rows, unsafe.Pointer(&pack[0]))
				}
				b.ReportMetric(float64(4*k.rows*cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
			b.Run(fmt.Sprintf("pack/%v/%s", d, name), func(b *testing.B) {
				b.SetBytes(int64(len(w.Data)))
				for b.Loop() {
					k.pack[q](&pack[0], dataPtr(w), w.RowBytes(), nb)
				}
			})
		}
	}
}

// BenchmarkAttentionDecode times one decode token's attention (T = 1) at
// position n over a layer's KV cache, cycling through enough layers' caches
// (each its own allocation, as a session's) that they come from memory, as
// in a decode step that runs every layer in turn; B=4 is AttentionBatch of
// four such tokens, each over its own caches (a batched server step). B/s
// counts the cache bytes read (n+1 positions of keys and values a token).
func BenchmarkAttentionDecode(b *testing.B) {
	shapes := []struct {
		name                   string
		heads, kvHeads, layers int
	}{{"smol", 9, 3, 30}, {"llama1b", 32, 8, 16}}
	for _, sh := range shapes {
		for _, d := range []format.DType{format.F32, format.F16} {
			for _, n := range []int{70, 1000} {
				for _, B := range []int{1, 4} {
					for _, th := range benchThreads {
						b.Run(fmt.Sprintf("%s/%v/pos%d/B=%d/t%d", sh.name, d, n, B, th), func(b *testing.B) {
							benchAttention(b, AttnShape{Heads: sh.heads, KVHeads: sh.kvHeads, HeadDim: 64, Pos: n, T: 1}, d, B, sh.layers, th)
						})
					}
				}
			}
		}
	}
}

func benchAttention(b *testing.B, a AttnShape, d format.DType, B, layers, threads int) {
	n, kvd := a.Pos, a.KVHeads*a.HeadDim
	copies := max(layers, int(benchStream/int64(2*B*(n+1)*kvd*d.Size())/8))
	kv := make([][]Cache, copies) // each copy: B key caches, then B value caches
	pos := make([]int, B)
	row := benchVec(kvd)
	for l := range kv {
		kv[l] = make([]Cache, 2*B)
		for i := range kv[l] {
			kv[l][i] = NewCache(d, n+1, a.KVHeads, a.HeadDim)
			for p := 0; p <= n; p++ {
				kv[l][i].Put(p, row)
			}
		}
	}
	for t := range pos {
		pos[t] = n
	}
	q, out := benchVec(B*a.Heads*a.HeadDim), make([]float32, B*a.Heads*a.HeadDim)
	p := NewPool(threads)
	defer p.Close()
	b.SetBytes(int64(2 * B * (n + 1) * kvd * d.Size()))
	l := 0
	for b.Loop() {
		if B == 1 {
			Attention(p, out, q, kv[l][0], kv[l][1], a)
		} else {
			AttentionBatch(p, out, q, kv[l], pos, a)
		}
		l = (l + 1) % copies
	}
}

// BenchmarkAttentionPrefill times the attention of a T-token prompt (Pos 0)
// computed blocked (attendBlock) and one token-head pair at a time
// (attendHead, "pairs"); B/s counts the cache bytes of the T positions.
func BenchmarkAttentionPrefill(b *testing.B) {
	for _, sh := range []struct {
		name           string
		heads, kvHeads int
	}{{"smol", 9, 3}, {"llama1b", 32, 8}} {
		for _, T := range []int{64, 512} {
			for _, d := range []format.DType{format.F32, format.F16} {
				for _, th := range benchThreads {
					for _, pairs := range []bool{false, true} {
						name := fmt.Sprintf("%s/T=%d/%v/t%d/blocked", sh.name, T, d, th)
						if pairs {
							name = name[:len(name)-len("blocked")] + "pairs"
						}
						b.Run(name, func(b *testing.B) {
							a := AttnShape{Heads: sh.heads, KVHeads: sh.kvHeads, HeadDim: 64, T: T}
							kc, vc := NewCache(d, T, a.KVHeads, a.HeadDim), NewCache(d, T, a.KVHeads, a.HeadDim)
							kc.Put(0, benchVec(T*a.KVHeads*a.HeadDim))
							vc.Put(0, benchVec(T*a.KVHeads*a.HeadDim))
							q, out := benchVec(T*a.Heads*a.HeadDim), make([]float32, T*a.Heads*a.HeadDim)
							p := NewPool(th)
							defer p.Close()
							attnPairs = pairs
							defer func() { attnPairs = false }()
							b.SetBytes(int64(2 * T * a.KVHeads * a.HeadDim * d.Size()))
							for b.Loop() {
								Attention(p, out, q, kc, vc, a)
							}
						})
					}
				}
			}
		}
	}
}
