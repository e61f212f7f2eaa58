// Decode kernels over weight rows: embedding lookup, dense and gathered
// matrix-vector products, fused SwiGLU over gate/up rows, and the neuron-row
// accumulation of the transposed down_proj. Over Q8_0/Q4_0 rows the products
// first quantize x to int8 blocks (quantize_x_kernel, the CPU's quantizeX)
// and multiply in integers with __dp4a, one block per lane (the CPU's
// vec_dot_q8_0_q8_0 / vec_dot_q4_0_q8_0); the accumulation dequantizes each
// weight in registers (wat).
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
// d. One warp per block.
__global__ void quantize_x_kernel(int8_t *__restrict__ xq, float *__restrict__ xd, const float *__restrict__ x, int nb) {
	const int b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (b >= nb) return;
	const float v = x[(size_t)b * 32 + lane];
	const float d = warp_max(fabsf(v)) / 127.f;
	const float id = d != 0.f ? 1.f / d : 0.f;
	xq[(size_t)b * 32 + lane] = (int8_t)__float2int_rn(v * id);
	if (lane == 0) xd[b] = d;
}

// ld32 reads the four bytes at p (2-byte aligned: a block's values follow
// its 2-byte scale) as one little-endian word.
__device__ __forceinline__ int ld32(const void *p) {
	const uint16_t *h = static_cast<const uint16_t *>(p);
	return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

// qdot_block returns one weight block times the matching block of x
// quantized (xq: its 32 int8 values as 8 words, xd its scale): d_w·d_x·Σ q_w·q_x
// with the sum in integers (Q4_0: Σ (q_w − 8)·q_x = Σ q_w·q_x − 8·Σ q_x).
__device__ __forceinline__ float qdot_block(const q8_0_t &b, const int *__restrict__ xq, float xd) {
	int s = 0;
#pragma unroll
	for (int i = 0; i < 8; i++) s = __dp4a(ld32(b.qs + 4 * i), __ldg(xq + i), s);
	return block_scale(b.d) * xd * (float)s;
}
__device__ __forceinline__ float qdot_block(const q4_0_t &b, const int *__restrict__ xq, float xd) {
	int s = 0, sx = 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int w = ld32(b.qs + 4 * i);
		const int x0 = __ldg(xq + i), x1 = __ldg(xq + 4 + i);
		s = __dp4a(w & 0x0f0f0f0f, x0, s);
		s = __dp4a((w >> 4) & 0x0f0f0f0f, x1, s);
		sx = __dp4a(0x01010101, x0, sx);
		sx = __dp4a(0x01010101, x1, sx);
	}
	return block_scale(b.d) * xd * (float)(s - 8 * sx);
}

// matvec_q_kernel: matvec_kernel over rows of nb blocks, x quantized.
template <typename T>
__global__ void matvec_q_kernel(float *__restrict__ dst, const T *__restrict__ w, int nb, const int32_t *__restrict__ rows,
                                int n, const int *__restrict__ xq, const float *__restrict__ xd,
                                const float *__restrict__ bias, int accumulate) {
	const int j = blockIdx.x * kMatvecWarps + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (j >= n) return;
	const int r = rows ? rows[j] : j;
	const T *wr = w + (size_t)r * nb;
	float s = 0.f;
	for (int b = lane; b < nb; b += 32) s += qdot_block(wr[b], xq + 8 * b, __ldg(xd + b));
	s = warp_sum(s);
	if (lane == 0) {
		if (bias) s += bias[r];
		dst[j] = accumulate ? dst[j] + s : s;
	}
}

// gate_up_q_kernel: gate_up_kernel over rows of nb blocks, x quantized.
template <typename T>
__global__ void gate_up_q_kernel(float *__restrict__ dst, const T *__restrict__ g, const T *__restrict__ u, int nb,
                                 const int32_t *__restrict__ rows, int n, const int *__restrict__ xq,
                                 const float *__restrict__ xd) {
	const int j = blockIdx.x * kMatvecWarps + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (j >= n) return;
	const int r = rows ? rows[j] : j;
	const T *gr = g + (size_t)r * nb, *ur = u + (size_t)r * nb;
	float sg = 0.f, su = 0.f;
	for (int b = lane; b < nb; b += 32) {
		const float d = __ldg(xd + b);
		sg += qdot_block(gr[b], xq + 8 * b, d);
		su += qdot_block(ur[b], xq + 8 * b, d);
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

// quantize_x quantizes x (cols floats, cols a multiple of 32) into the
// context's scratch for the products over block rows: xq the int8 blocks
// (4-byte aligned, read as words), xd their scales.
int quantize_x(sinf_ctx *c, sinf_dptr x, int cols, const int **xq, const float **xd) {
	if (cols % 32 != 0) return SINF_EINVAL;
	const int nb = cols / 32;
	void *buf = nullptr;
	cudaError_t e = sinf_scratch(c, (size_t)nb * (32 + sizeof(float)), &buf);
	if (e != cudaSuccess) return sinf_rc(e);
	int8_t *q = static_cast<int8_t *>(buf);
	float *d = reinterpret_cast<float *>(q + (size_t)nb * 32);
	SINF_LAUNCH((nb + kMatvecWarps - 1) / kMatvecWarps, 32 * kMatvecWarps, 0, c->stream, quantize_x_kernel)(
	    q, d, (const float *)dp(x), nb);
	*xq = reinterpret_cast<const int *>(q);
	*xd = d;
	return sinf_launch_rc();
}

} // namespace

extern "C" int sinf_embed(sinf_ctx *c, sinf_dptr dst, sinf_mat w, sinf_dptr ids, int id0, int T) {
	cudaSetDevice(c->device);
	if (T <= 0) return 0;
	if (is_block(w.dtype) && w.cols % 32 != 0) return SINF_EINVAL;
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
		const int *xq;
		const float *xd;
		if (int rc = quantize_x(c, x, w.cols, &xq, &xd)) return rc;
		SINF_DISPATCH_BLOCK(w.dtype, SINF_LAUNCH(blocks, 32 * kMatvecWarps, 0, c->stream, matvec_q_kernel<W>)(
		                                 (float *)dp(dst), (const W *)dp(w.data), w.cols / 32, (const int32_t *)dp(rows), n,
		                                 xq, xd, (const float *)dp(bias), accumulate));
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
		const int *xq;
		const float *xd;
		if (int rc = quantize_x(c, x, g.cols, &xq, &xd)) return rc;
		SINF_DISPATCH_BLOCK(g.dtype, SINF_LAUNCH(blocks, 32 * kMatvecWarps, 0, c->stream, gate_up_q_kernel<W>)(
		                                 (float *)dp(dst), (const W *)dp(g.data), (const W *)dp(u.data), g.cols / 32,
		                                 (const int32_t *)dp(rows), n, xq, xd));
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
	if (is_block(w.dtype) && cols % 32 != 0) return SINF_EINVAL;
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
