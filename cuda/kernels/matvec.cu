// Decode kernels over weight rows: embedding lookup, dense and gathered
// matrix-vector products, fused SwiGLU over gate/up rows, and the neuron-row
// accumulation of the transposed down_proj. Over block rows (Q8_0 … Q6_K)
// the products first quantize x to int8 blocks of 32 (quantize_x_kernel, the CPU's
// quantizeX; for the K-quants quantize_xk_kernel, one scale per 256, the CPU's
// quantizeXK) and multiply in integers with __dp4a, one weight block per lane
// (the CPU's qdotRows and kquant.go's block dots); the accumulation
// dequantizes each weight in registers (wat).
#include "common.cuh"

namespace {

constexpr int kMatvecWarps = 4; // rows per block (one warp per row)

// dot_row returns W[r,:]·x summed over the warp (every lane gets it).
template <typename T, bool VEC>
__device__ __forceinline__ float dot_row(const T *__restrict__ wr, const float *__restrict__ x, int cols, int lane) {
	float s = 0.f;
	if constexpr (VEC) {
		constexpr int V = VecN<T>::n;
		const int nv = cols / V;
#pragma unroll 4
		for (int i = lane; i < nv; i += 32) {
			float w[V];
			load16(wr + (size_t)i * V, w);
			const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)i * V);
#pragma unroll
			for (int e = 0; e < V / 4; e++) {
				float4 xv = __ldg(xp + e);
				s += w[4 * e] * xv.x;
				s += w[4 * e + 1] * xv.y;
				s += w[4 * e + 2] * xv.z;
				s += w[4 * e + 3] * xv.w;
			}
		}
	} else {
		for (int i = lane; i < cols; i += 32) s += load1(wr + i) * __ldg(x + i);
	}
	return warp_sum(s);
}

// dot_rows2 returns (G[r,:]·x, U[r,:]·x) summed over the warp, both rows read
// in the same loop so that their loads are in flight together.
template <typename T, bool VEC>
__device__ __forceinline__ float2 dot_rows2(const T *__restrict__ gr, const T *__restrict__ ur,
                                            const float *__restrict__ x, int cols, int lane) {
	float sg = 0.f, su = 0.f;
	if constexpr (VEC) {
		constexpr int V = VecN<T>::n;
		const int nv = cols / V;
#pragma unroll 2
		for (int i = lane; i < nv; i += 32) {
			float g[V], u[V];
			load16(gr + (size_t)i * V, g);
			load16(ur + (size_t)i * V, u);
			const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)i * V);
#pragma unroll
			for (int e = 0; e < V / 4; e++) {
				float4 xv = __ldg(xp + e);
				sg += g[4 * e] * xv.x;
				sg += g[4 * e + 1] * xv.y;
				sg += g[4 * e + 2] * xv.z;
				sg += g[4 * e + 3] * xv.w;
				su += u[4 * e] * xv.x;
				su += u[4 * e + 1] * xv.y;
				su += u[4 * e + 2] * xv.z;
				su += u[4 * e + 3] * xv.w;
			}
		}
	} else {
		for (int i = lane; i < cols; i += 32) {
			const float xv = __ldg(x + i);
			sg += load1(gr + i) * xv;
			su += load1(ur + i) * xv;
		}
	}
	return make_float2(warp_sum(sg), warp_sum(su));
}

template <typename T, bool VEC>
__global__ void matvec_kernel(float *__restrict__ dst, const T *__restrict__ w, int cols, const int32_t *__restrict__ rows,
                              int n, const float *__restrict__ x, const float *__restrict__ bias, int accumulate) {
	const int j = blockIdx.x * kMatvecWarps + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (j >= n) return;
	const int r = rows ? rows[j] : j;
	float s = dot_row<T, VEC>(w + (size_t)r * cols, x, cols, lane);
	if (lane == 0) {
		if (bias) s += bias[r];
		dst[j] = accumulate ? dst[j] + s : s;
	}
}

template <typename T, bool VEC>
__global__ void gate_up_kernel(float *__restrict__ dst, const T *__restrict__ g, const T *__restrict__ u, int cols,
                               const int32_t *__restrict__ rows, int n, const float *__restrict__ x) {
	const int j = blockIdx.x * kMatvecWarps + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (j >= n) return;
	const int r = rows ? rows[j] : j;
	const float2 s = dot_rows2<T, VEC>(g + (size_t)r * cols, u + (size_t)r * cols, x, cols, lane);
	if (lane == 0) dst[j] = silu_mul(s.x, s.y);
}

// quantize_x_kernel quantizes x[32·nb] to int8 blocks as the CPU's
// quantizeX does: per block d = max|x|/127 and q = x·(1/d) rounded to
// nearest even (0 for a zero block); xq gets the 32 q of each block, xd its
// d and xs its (8·Σq)·d (what the dtypes with an offset or a minimum
// subtract). One warp per block.
__global__ void quantize_x_kernel(int8_t *__restrict__ xq, float *__restrict__ xd, float *__restrict__ xs,
                                  const float *__restrict__ x, int nb) {
	const int b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (b >= nb) return;
	const float v = x[(size_t)b * 32 + lane];
	const float d = warp_max(fabsf(v)) / 127.f;
	const float id = d != 0.f ? 1.f / d : 0.f;
	int q = __float2int_rn(v * id);
	xq[(size_t)b * 32 + lane] = (int8_t)q;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
	if (lane == 0) {
		xd[b] = d;
		xs[b] = __fmul_rn((float)(8 * q), d);
	}
}

// quantize_xk_kernel is quantize_x_kernel for the K-quants' x, as the CPU's
// quantizeXK does: the eight blocks of each 256 share d = max|x| over the
// 256 / 127 (GGML's Q8_K). One warp per 256, lane l holding element l of
// each of its eight blocks.
__global__ void quantize_xk_kernel(int8_t *__restrict__ xq, float *__restrict__ xd, float *__restrict__ xs,
                                   const float *__restrict__ x, int ns) {
	const int s = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (s >= ns) return;
	float v[8];
	float m = 0.f;
#pragma unroll
	for (int b = 0; b < 8; b++) {
		v[b] = x[(size_t)(8 * s + b) * 32 + lane];
		m = fmaxf(m, fabsf(v[b]));
	}
	const float d = warp_max(m) / 127.f;
	const float id = d != 0.f ? 1.f / d : 0.f;
#pragma unroll
	for (int b = 0; b < 8; b++) {
		int q = __float2int_rn(v[b] * id);
		xq[(size_t)(8 * s + b) * 32 + lane] = (int8_t)q;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
		if (lane == 0) {
			xd[8 * s + b] = d;
			xs[8 * s + b] = __fmul_rn((float)(8 * q), d);
		}
	}
}

// The block dots: one weight block times the matching x blocks (xq their
// int8 values as words, 8 per x block; xd their scales, xs their (8·Σq)·d),
// with the sums over levels in integers (__dp4a) and the float steps in the
// CPU's order (kquant.go, quant.go). sum1 is Σ q_x over words of x.
__device__ __forceinline__ int sum1(int x) { return __dp4a(0x01010101, x, 0); }

// spread4 puts bits 0–3 of h at bit 4 of bytes 0–3 (the fifth bit of four
// Q5 levels).
__device__ __forceinline__ int spread4(unsigned h) {
	return (int)(((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25));
}

__device__ __forceinline__ float qdot_block(const q8_0_t &b, const int *__restrict__ xq, const float *xd, const float *) {
	int s = 0;
#pragma unroll
	for (int i = 0; i < 8; i++) s = __dp4a(ld32(b.qs + 4 * i), __ldg(xq + i), s);
	return block_scale(b.d) * __ldg(xd) * (float)s;
}
__device__ __forceinline__ float qdot_block(const q4_0_t &b, const int *__restrict__ xq, const float *xd, const float *) {
	int s = 0, sx = 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int w = ld32(b.qs + 4 * i);
		const int x0 = __ldg(xq + i), x1 = __ldg(xq + 4 + i);
		s = __dp4a(w & 0x0f0f0f0f, x0, s);
		s = __dp4a((w >> 4) & 0x0f0f0f0f, x1, s);
		sx += sum1(x0) + sum1(x1);
	}
	return block_scale(b.d) * __ldg(xd) * (float)(s - 8 * sx);
}
// q5_dot returns Σ q·q_x over a Q5 block's 5-bit levels q (no offset) and
// Σ q_x.
__device__ __forceinline__ int q5_dot(const uint8_t *qh4, const uint8_t *qs, const int *__restrict__ xq, int &sx) {
	const unsigned qh = (unsigned)ld32(qh4);
	int s = 0;
	sx = 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int w = ld32(qs + 4 * i);
		const int x0 = __ldg(xq + i), x1 = __ldg(xq + 4 + i);
		s = __dp4a((w & 0x0f0f0f0f) | spread4(qh >> (4 * i)), x0, s);
		s = __dp4a(((w >> 4) & 0x0f0f0f0f) | spread4(qh >> (16 + 4 * i)), x1, s);
		sx += sum1(x0) + sum1(x1);
	}
	return s;
}
__device__ __forceinline__ float qdot_block(const q5_0_t &b, const int *__restrict__ xq, const float *xd, const float *) {
	int sx;
	const int s = q5_dot(b.qh, b.qs, xq, sx);
	return block_scale(b.d) * __ldg(xd) * (float)(s - 16 * sx);
}
__device__ __forceinline__ float qdot_block(const q5_1_t &b, const int *__restrict__ xq, const float *xd, const float *xs) {
	int sx;
	const int s = q5_dot(b.qh, b.qs, xq, sx);
	return __fadd_rn(block_scale(b.d) * __ldg(xd) * (float)s, __fmul_rn(block_scale(b.m), __ldg(xs) / 8.f));
}
// k4_dot is the Q4_K (qh null) / Q5_K dot: per group g of 64 elements, the
// low nibbles of qs[32g:] (bit 2g of qh) pair with x block 2g, the high ones
// (bit 2g+1) with x block 2g+1.
template <typename T>
__device__ __forceinline__ float k4_dot(const T &b, const uint8_t *qh, const int *__restrict__ xq, const float *xd,
                                        const float *xs) {
	float s = 0.f, sm = 0.f;
#pragma unroll
	for (int g = 0; g < 4; g++) {
		int s0 = 0, s1 = 0;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			const int w = ld32(b.qs + 32 * g + 4 * i);
			int lo = w & 0x0f0f0f0f, hi = (w >> 4) & 0x0f0f0f0f;
			if (qh) {
				const int h = ld32(qh + 4 * i);
				lo |= ((h >> (2 * g)) & 0x01010101) << 4;
				hi |= ((h >> (2 * g + 1)) & 0x01010101) << 4;
			}
			s0 = __dp4a(lo, __ldg(xq + 16 * g + i), s0);
			s1 = __dp4a(hi, __ldg(xq + 16 * g + 8 + i), s1);
		}
		float c0, m0, c1, m1;
		scale_min_k4(2 * g, b.sc, c0, m0);
		scale_min_k4(2 * g + 1, b.sc, c1, m1);
		s = __fadd_rn(s, __fadd_rn(c0 * __ldg(xd + 2 * g) * (float)s0, c1 * __ldg(xd + 2 * g + 1) * (float)s1));
		sm = __fadd_rn(sm, __fadd_rn(__fmul_rn(m0, __ldg(xs + 2 * g)), __fmul_rn(m1, __ldg(xs + 2 * g + 1))));
	}
	return __fsub_rn(__fmul_rn(block_scale(b.d), s), __fmul_rn(block_scale(b.dmin), sm / 8.f));
}
__device__ __forceinline__ float qdot_block(const q4_k_t &b, const int *__restrict__ xq, const float *xd, const float *xs) {
	return k4_dot(b, nullptr, xq, xd, xs);
}
__device__ __forceinline__ float qdot_block(const q5_k_t &b, const int *__restrict__ xq, const float *xd, const float *xs) {
	return k4_dot(b, b.qh, xq, xd, xs);
}
// Q6_K: element 128h + 32k + l takes x block 4h + k and scale 8h + 2k + l/16.
__device__ __forceinline__ float qdot_block(const q6_k_t &b, const int *__restrict__ xq, const float *xd, const float *) {
	float s = 0.f;
#pragma unroll
	for (int h = 0; h < 2; h++)
#pragma unroll
		for (int k = 0; k < 4; k++) {
			int s0 = 0, s1 = 0, x0 = 0, x1 = 0;
#pragma unroll
			for (int i = 0; i < 8; i++) {
				const int w = ld32(b.ql + 64 * h + 32 * (k & 1) + 4 * i);
				const int hb = ld32(b.qh + 32 * h + 4 * i);
				const int q = ((w >> (4 * (k >> 1))) & 0x0f0f0f0f) | (((hb >> (2 * k)) & 0x03030303) << 4);
				const int x = __ldg(xq + 8 * (4 * h + k) + i);
				if (i < 4) {
					s0 = __dp4a(q, x, s0);
					x0 += sum1(x);
				} else {
					s1 = __dp4a(q, x, s1);
					x1 += sum1(x);
				}
			}
			s0 -= 32 * x0;
			s1 -= 32 * x1;
			s = __fadd_rn(s, __ldg(xd + 4 * h + k) * __fadd_rn((float)b.sc[8 * h + 2 * k] * (float)s0,
			                                                    (float)b.sc[8 * h + 2 * k + 1] * (float)s1));
		}
	return __fmul_rn(block_scale(b.d), s);
}

// QuantX is x quantized by quantize_x: q its int8 blocks as words (8 per
// block), d their scales, s their (8·Σq)·d.
struct QuantX {
	const int *q;
	const float *d, *s;
};

// qdot is qdot_block of weight block b of a row (its x blocks start at
// b·E/32).
template <typename T> __device__ __forceinline__ float qdot(const T *row, int b, QuantX x) {
	constexpr int X = BlockElems<T>::n / 32; // x blocks per weight block
	return qdot_block(row[b], x.q + 8 * X * b, x.d + X * b, x.s + X * b);
}

// matvec_q_kernel: matvec_kernel over rows of nb blocks, x quantized. A lane
// takes whole weight blocks.
template <typename T>
__global__ void matvec_q_kernel(float *__restrict__ dst, const T *__restrict__ w, int nb, const int32_t *__restrict__ rows,
                                int n, QuantX x, const float *__restrict__ bias, int accumulate) {
	const int j = blockIdx.x * kMatvecWarps + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (j >= n) return;
	const int r = rows ? rows[j] : j;
	const T *wr = w + (size_t)r * nb;
	float s = 0.f;
	for (int b = lane; b < nb; b += 32) s += qdot(wr, b, x);
	s = warp_sum(s);
	if (lane == 0) {
		if (bias) s += bias[r];
		dst[j] = accumulate ? dst[j] + s : s;
	}
}

// gate_up_q_kernel: gate_up_kernel over rows of nb blocks, x quantized.
template <typename T>
__global__ void gate_up_q_kernel(float *__restrict__ dst, const T *__restrict__ g, const T *__restrict__ u, int nb,
                                 const int32_t *__restrict__ rows, int n, QuantX x) {
	const int j = blockIdx.x * kMatvecWarps + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (j >= n) return;
	const int r = rows ? rows[j] : j;
	const T *gr = g + (size_t)r * nb, *ur = u + (size_t)r * nb;
	float sg = 0.f, su = 0.f;
	for (int b = lane; b < nb; b += 32) {
		sg += qdot(gr, b, x);
		su += qdot(ur, b, x);
	}
	sg = warp_sum(sg);
	su = warp_sum(su);
	if (lane == 0) dst[j] = silu_mul(sg, su);
}

// add_rows_partial: block (bx, split) sums a[j]·W[r_j, c] over the rows of its
// split for its V·blockDim.x columns into partial[split, c].
template <typename T, bool VEC>
__global__ void add_rows_partial(float *__restrict__ partial, const T *__restrict__ w, int cols,
                                 const int32_t *__restrict__ rows, int n, const float *__restrict__ a, int per_split) {
	constexpr bool vec = VEC && !IsBlock<T>::v; // block rows: always the scalar path (vec_ok)
	constexpr int V = vec ? VecN<T>::n : 1;
	const int split = blockIdx.y;
	const int j0 = split * per_split, j1 = min(n, j0 + per_split);
	const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
	if (c0 >= cols) return;
	float acc[V];
#pragma unroll
	for (int e = 0; e < V; e++) acc[e] = 0.f;
#pragma unroll 4
	for (int j = j0; j < j1; j++) {
		const float aj = __ldg(a + j);
		const int r = rows ? __ldg(rows + j) : j;
		float wv[V];
		if constexpr (vec)
			load16(w + (size_t)r * cols + c0, wv);
		else
			wv[0] = wat(w, r, c0, cols);
#pragma unroll
		for (int e = 0; e < V; e++) acc[e] += aj * wv[e];
	}
	float *out = partial + (size_t)split * cols + c0;
#pragma unroll
	for (int e = 0; e < V; e++) out[e] = acc[e];
}

__global__ void add_rows_reduce(float *__restrict__ dst, const float *__restrict__ partial, int splits, int cols,
                                int accumulate) {
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= cols) return;
	float s = 0.f;
	for (int k = 0; k < splits; k++) s += partial[(size_t)k * cols + c];
	dst[c] = accumulate ? dst[c] + s : s;
}

template <typename T>
__global__ void embed_kernel(float *__restrict__ dst, const T *__restrict__ w, int cols, const int32_t *__restrict__ ids,
                             int id0) {
	const int t = blockIdx.y;
	const int id = ids ? ids[t] : id0;
	for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
		dst[(size_t)t * cols + c] = wat(w, id, c, cols);
}

template <typename T> bool vec_ok(sinf_mat w, sinf_dptr x) {
	if constexpr (IsBlock<T>::v)
		return false;
	else
		return aligned16(w.data) && ((size_t)w.cols * sizeof(T)) % 16 == 0 && (x == 0 || aligned16(x));
}

// sketch_block returns Σ_j (2q_j − 3)·q_x[j] over one SK2 block at b (an F16
// scale, then 8 bytes: element j's 2-bit q at bits 2·(j/8) of byte j%8), the
// x block's int8 values as 8 words: word i (elements 4i … 4i+3) takes bytes
// 4·(i%2) … of the codes shifted by 2·(i/2).
__device__ __forceinline__ int sketch_block(const uint8_t *b, const int *__restrict__ xq) {
	const int lo = ld32(b + 2), hi = ld32(b + 6);
	int s = 0, sx = 0;
#pragma unroll
	for (int i = 0; i < 8; i++) {
		const int x = __ldg(xq + i);
		s = __dp4a(((i & 1 ? hi : lo) >> (2 * (i >> 1))) & 0x03030303, x, s);
		sx += sum1(x);
	}
	return 2 * s - 3 * sx;
}

// sketch_weights_kernel: one warp per row j of the sketch (nb blocks of 10
// bytes), a lane per block: w[j] = |(Σ_b d_w·d_x·sketch_block)·down[j]|.
__global__ void sketch_weights_kernel(float *__restrict__ w, const uint8_t *__restrict__ s, int nb, QuantX x,
                                      const float *__restrict__ down, int n) {
	const int j = blockIdx.x * kMatvecWarps + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (j >= n) return;
	const uint8_t *row = s + (size_t)j * nb * 10;
	float acc = 0.f;
	for (int b = lane; b < nb; b += 32) {
		const uint8_t *blk = row + (size_t)b * 10;
		const uint16_t d = (uint16_t)(blk[0] | (blk[1] << 8));
		acc += block_scale(d) * __ldg(x.d + b) * (float)sketch_block(blk, x.q + 8 * b);
	}
	acc = warp_sum(acc);
	if (lane == 0) w[j] = fabsf(acc * down[j]);
}

// quantize_x quantizes x (w.cols floats) into the context's scratch for a
// product over w's block rows (the K-quants' with one scale per 256; SK2
// sketches' as the 32-element dtypes'); SINF_EINVAL when a row of w is not
// whole blocks.
int quantize_x(sinf_ctx *c, sinf_mat w, sinf_dptr x, QuantX *out) {
	if (w.dtype == SINF_SK2 ? w.cols <= 0 || w.cols % 32 != 0 : !rows_ok(w.dtype, w.cols)) return SINF_EINVAL;
	const int nb = w.cols / 32;
	void *buf = nullptr;
	cudaError_t e = sinf_scratch(c, (size_t)nb * (32 + 2 * sizeof(float)), &buf);
	if (e != cudaSuccess) return sinf_rc(e);
	int8_t *q = static_cast<int8_t *>(buf);
	float *d = reinterpret_cast<float *>(q + (size_t)nb * 32);
	if (w.dtype != SINF_SK2 && block_elems(w.dtype) == 256) {
		const int ns = nb / 8;
		SINF_LAUNCH((ns + kMatvecWarps - 1) / kMatvecWarps, 32 * kMatvecWarps, 0, c->stream, quantize_xk_kernel)(
		    q, d, d + nb, (const float *)dp(x), ns);
	} else {
		SINF_LAUNCH((nb + kMatvecWarps - 1) / kMatvecWarps, 32 * kMatvecWarps, 0, c->stream, quantize_x_kernel)(
		    q, d, d + nb, (const float *)dp(x), nb);
	}
	*out = QuantX{reinterpret_cast<const int *>(q), d, d + nb};
	return sinf_launch_rc();
}

} // namespace

extern "C" int sinf_embed(sinf_ctx *c, sinf_dptr dst, sinf_mat w, sinf_dptr ids, int id0, int T) {
	cudaSetDevice(c->device);
	if (T <= 0) return 0;
	if (!rows_ok(w.dtype, w.cols)) return SINF_EINVAL;
	dim3 grid((w.cols + 255) / 256, T);
	SINF_DISPATCH_ALL(w.dtype, (SINF_LAUNCH(grid, 256, 0, c->stream, embed_kernel<W>)((float *)dp(dst), (const W *)dp(w.data), w.cols,
	                                                                     (const int32_t *)dp(ids), id0)));
	return sinf_launch_rc();
}

extern "C" int sinf_matvec(sinf_ctx *c, sinf_dptr dst, sinf_mat w, sinf_dptr rows, int n, sinf_dptr x, sinf_dptr bias,
                           int accumulate) {
	cudaSetDevice(c->device);
	if (n <= 0) return 0;
	const int blocks = (n + kMatvecWarps - 1) / kMatvecWarps;
	if (is_block(w.dtype)) {
		QuantX xq;
		if (int rc = quantize_x(c, w, x, &xq)) return rc;
		SINF_DISPATCH_BLOCK(w.dtype, SINF_LAUNCH(blocks, 32 * kMatvecWarps, 0, c->stream, matvec_q_kernel<W>)(
		                                 (float *)dp(dst), (const W *)dp(w.data), w.cols / BlockElems<W>::n,
		                                 (const int32_t *)dp(rows), n, xq, (const float *)dp(bias), accumulate));
		return sinf_launch_rc();
	}
	SINF_DISPATCH(w.dtype, {
		if (vec_ok<W>(w, x))
			SINF_LAUNCH(blocks, 32 * kMatvecWarps, 0, c->stream, matvec_kernel<W, true>)(
			    (float *)dp(dst), (const W *)dp(w.data), w.cols, (const int32_t *)dp(rows), n, (const float *)dp(x),
			    (const float *)dp(bias), accumulate);
		else
			SINF_LAUNCH(blocks, 32 * kMatvecWarps, 0, c->stream, matvec_kernel<W, false>)(
			    (float *)dp(dst), (const W *)dp(w.data), w.cols, (const int32_t *)dp(rows), n, (const float *)dp(x),
			    (const float *)dp(bias), accumulate);
	});
	return sinf_launch_rc();
}

extern "C" int sinf_gate_up(sinf_ctx *c, sinf_dptr dst, sinf_mat g, sinf_mat u, sinf_dptr rows, int n, sinf_dptr x) {
	cudaSetDevice(c->device);
	if (n <= 0) return 0;
	if (g.dtype != u.dtype || g.cols != u.cols) return SINF_EINVAL;
	const int blocks = (n + kMatvecWarps - 1) / kMatvecWarps;
	if (is_block(g.dtype)) {
		QuantX xq;
		if (int rc = quantize_x(c, g, x, &xq)) return rc;
		SINF_DISPATCH_BLOCK(g.dtype, SINF_LAUNCH(blocks, 32 * kMatvecWarps, 0, c->stream, gate_up_q_kernel<W>)(
		                                 (float *)dp(dst), (const W *)dp(g.data), (const W *)dp(u.data),
		                                 g.cols / BlockElems<W>::n, (const int32_t *)dp(rows), n, xq));
		return sinf_launch_rc();
	}
	SINF_DISPATCH(g.dtype, {
		if (vec_ok<W>(g, x) && vec_ok<W>(u, 0))
			SINF_LAUNCH(blocks, 32 * kMatvecWarps, 0, c->stream, gate_up_kernel<W, true>)(
			    (float *)dp(dst), (const W *)dp(g.data), (const W *)dp(u.data), g.cols, (const int32_t *)dp(rows), n,
			    (const float *)dp(x));
		else
			SINF_LAUNCH(blocks, 32 * kMatvecWarps, 0, c->stream, gate_up_kernel<W, false>)(
			    (float *)dp(dst), (const W *)dp(g.data), (const W *)dp(u.data), g.cols, (const int32_t *)dp(rows), n,
			    (const float *)dp(x));
	});
	return sinf_launch_rc();
}

extern "C" int sinf_add_rows(sinf_ctx *c, sinf_dptr dst, sinf_mat w, sinf_dptr rows, int n, sinf_dptr a,
                             int accumulate) {
	cudaSetDevice(c->device);
	const int cols = w.cols;
	if (cols <= 0) return 0;
	if (n <= 0) {
		if (accumulate) return 0;
		return sinf_rc(cudaMemsetAsync(dp(dst), 0, (size_t)cols * sizeof(float), c->stream));
	}
	if (!rows_ok(w.dtype, cols)) return SINF_EINVAL;
	constexpr int threads = 128;
	int rc = 0;
	SINF_DISPATCH_ALL(w.dtype, {
		const bool vec = vec_ok<W>(w, 0);
		const int V = vec ? VecN<W>::n : 1;
		const int colBlocks = (cols + threads * V - 1) / (threads * V);
		// Rows are split across blocks (about 32 per block) until there are
		// about 8 blocks per SM; the splits' partial sums are then added in a
		// fixed order, so results do not depend on scheduling.
		int splits = (n + 31) / 32;
		splits = max(1, min(splits, max(1, 8 * c->sm_count / colBlocks)));
		const int per = (n + splits - 1) / splits;
		splits = (n + per - 1) / per;
		void *part = nullptr;
		cudaError_t e = sinf_scratch(c, (size_t)splits * cols * sizeof(float), &part);
		if (e != cudaSuccess) return sinf_rc(e);
		dim3 grid(colBlocks, splits);
		if (vec)
			SINF_LAUNCH(grid, threads, 0, c->stream, add_rows_partial<W, true>)(
			    (float *)part, (const W *)dp(w.data), cols, (const int32_t *)dp(rows), n, (const float *)dp(a), per);
		else
			SINF_LAUNCH(grid, threads, 0, c->stream, add_rows_partial<W, false>)(
			    (float *)part, (const W *)dp(w.data), cols, (const int32_t *)dp(rows), n, (const float *)dp(a), per);
		if ((rc = sinf_launch_rc()) != 0) return rc;
		SINF_LAUNCH((cols + 255) / 256, 256, 0, c->stream, add_rows_reduce)((float *)dp(dst), (const float *)part, splits, cols,
		                                                           accumulate);
	});
	return sinf_launch_rc();
}

extern "C" int sinf_sketch_weights(sinf_ctx *c, sinf_dptr w, sinf_mat s, sinf_dptr x, sinf_dptr down, int n) {
	cudaSetDevice(c->device);
	if (n <= 0) return 0;
	if (s.dtype != SINF_SK2) return SINF_EINVAL;
	QuantX xq;
	if (int rc = quantize_x(c, s, x, &xq)) return rc;
	SINF_LAUNCH((n + kMatvecWarps - 1) / kMatvecWarps, 32 * kMatvecWarps, 0, c->stream, sketch_weights_kernel)(
	    (float *)dp(w), (const uint8_t *)dp(s.data), s.cols / 32, xq, (const float *)dp(down), n);
	return sinf_launch_rc();
}
