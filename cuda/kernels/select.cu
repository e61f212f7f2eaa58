// Prefill-time dynamic selection (runtime.Counter and runtime.ActiveSet):
// per token, the top round(α·P) of its P positive activations are counted;
// then each layer keeps its static rows and the most counted other rows.
// Both use one block-level primitive: the k best of n 32-bit keys, larger
// first, ties to the lower index, found by an exact 8-bit radix select.
#include <math.h>

#include "common.cuh"

namespace {

constexpr int kSelectThreads = 1024;

// block_top_k calls emit(i) for the k best indices i < n by key(i) (larger
// key first, equal keys: lower index first). Every thread of the block must
// call it with the same n and k; blockDim.x must be a multiple of 32.
template <typename KeyF, typename EmitF> __device__ void block_top_k(int n, int k, KeyF key, EmitF emit) {
	__shared__ unsigned int hist[256];
	__shared__ unsigned int s_prefix, s_rem, s_base;
	__shared__ unsigned int warp_tot[32];
	const int tid = threadIdx.x, bs = blockDim.x;
	const int lane = tid & 31, warp = tid >> 5, nw = bs >> 5;
	if (k <= 0) return;
	if (k >= n) {
		for (int i = tid; i < n; i += bs) emit(i);
		return;
	}
	// Radix select of the k-th largest key τ, 8 bits at a time from the top;
	// rem ends as the number of keys equal to τ that are taken.
	unsigned int prefix = 0, mask = 0, rem = (unsigned int)k;
	for (int shift = 24; shift >= 0; shift -= 8) {
		for (int b = tid; b < 256; b += bs) hist[b] = 0;
		__syncthreads();
		for (int i = tid; i < n; i += bs) {
			const unsigned int kk = key(i);
			if ((kk & mask) == prefix) atomicAdd(&hist[(kk >> shift) & 255u], 1u);
		}
		__syncthreads();
		if (tid == 0) {
			unsigned int cum = 0;
			int b = 255;
			for (; b > 0; b--) {
				if (cum + hist[b] >= rem) break;
				cum += hist[b];
			}
			s_prefix = prefix | ((unsigned int)b << shift);
			s_rem = rem - cum;
		}
		__syncthreads();
		prefix = s_prefix;
		rem = s_rem;
		mask |= 255u << shift;
		__syncthreads();
	}
	// Keys above τ are taken; keys equal to τ in index order until rem.
	if (tid == 0) s_base = 0;
	__syncthreads();
	for (int i0 = 0; i0 < n; i0 += bs) {
		const int i = i0 + tid;
		const unsigned int kk = i < n ? key(i) : 0u;
		const bool eq = i < n && kk == prefix;
		if (i < n && kk > prefix) emit(i);
		const unsigned int ball = __ballot_sync(0xffffffffu, eq);
		if (lane == 0) warp_tot[warp] = __popc(ball);
		__syncthreads();
		unsigned int off = s_base;
		for (int w = 0; w < warp; w++) off += warp_tot[w];
		off += __popc(ball & ((1u << lane) - 1u));
		if (eq && off < rem) emit(i);
		__syncthreads();
		if (tid == 0) {
			unsigned int tot = 0;
			for (int w = 0; w < nw; w++) tot += warp_tot[w];
			s_base += tot;
		}
		__syncthreads();
	}
}

// count_top_kernel: block t counts token t's top round(α·P) positive
// activations. A positive float's bits order as the float does, and every
// positive float has bits ≥ 1, so keying non-positive values 0 leaves them
// out (k ≤ P).
__global__ void __launch_bounds__(kSelectThreads)
    count_top_kernel(int32_t *__restrict__ counts, const float *__restrict__ act, int kept, double alpha) {
	const float *a = act + (size_t)blockIdx.x * kept;
	int pos = 0;
	for (int i = threadIdx.x; i < kept; i += blockDim.x) pos += a[i] > 0.f;
	const int P = block_sum(pos);
	const int k = (int)round(alpha * (double)P); // Go's math.Round: halves away from zero
	if (k <= 0) return;
	block_top_k(
	    kept, k,
	    [&](int i) -> unsigned int {
		    const float v = a[i];
		    return v > 0.f ? __float_as_uint(v) : 0u;
	    },
	    [&](int i) { atomicAdd(&counts[i], 1); });
}

// select_top_kernel: one block; marks rows [0, stat) and the best
// target-stat rows above by count, then writes the marked rows in order.
__global__ void __launch_bounds__(kSelectThreads)
    select_top_kernel(int32_t *__restrict__ rows, const int32_t *__restrict__ counts, unsigned char *__restrict__ mark,
                      int kept, int stat, int target) {
	__shared__ unsigned int warp_tot[32];
	__shared__ unsigned int s_base;
	const int tid = threadIdx.x, bs = blockDim.x;
	const int lane = tid & 31, warp = tid >> 5, nw = bs >> 5;
	for (int i = tid; i < kept; i += bs) mark[i] = i < stat ? 1 : 0;
	__syncthreads();
	block_top_k(
	    kept - stat, target - stat, [&](int i) -> unsigned int { return (unsigned int)counts[stat + i]; },
	    [&](int i) { mark[stat + i] = 1; });
	__threadfence_block();
	__syncthreads();
	if (tid == 0) s_base = 0;
	__syncthreads();
	for (int i0 = 0; i0 < kept; i0 += bs) {
		const int i = i0 + tid;
		const bool on = i < kept && mark[i];
		const unsigned int ball = __ballot_sync(0xffffffffu, on);
		if (lane == 0) warp_tot[warp] = __popc(ball);
		__syncthreads();
		unsigned int off = s_base;
		for (int w = 0; w < warp; w++) off += warp_tot[w];
		off += __popc(ball & ((1u << lane) - 1u));
		if (on && off < (unsigned int)target) rows[off] = i;
		__syncthreads();
		if (tid == 0) {
			unsigned int tot = 0;
			for (int w = 0; w < nw; w++) tot += warp_tot[w];
			s_base += tot;
		}
		__syncthreads();
	}
}

// gate_score_kernel: keys[j] = bits of |silu(g[j])·w[j]| (runtime.GateScores,
// with the CPU's SwiGLU arithmetic: silu_mul).
__global__ void gate_score_kernel(unsigned int *__restrict__ keys, const float *__restrict__ g,
                                  const float *__restrict__ w, int n) {
	const int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= n) return;
	keys[j] = __float_as_uint(fabsf(silu_mul(g[j], w[j])));
}

// gate_calib_kernel: one thread per row j, tokens in order (the CPU's sums).
__global__ void gate_calib_kernel(double *__restrict__ A, double *__restrict__ S, const float *__restrict__ a,
                                  const float *__restrict__ u, int T, int kept) {
	const int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= kept) return;
	double sa = A[j], ss = S[j];
	for (int t = 0; t < T; t++) {
		const float uu = u[(size_t)t * kept + j];
		if (uu != 0.f) {
			const double av = fabs((double)a[(size_t)t * kept + j]);
			sa += av;
			ss += av / fabs((double)uu);
		}
	}
	A[j] = sa;
	S[j] = ss;
}

__global__ void gate_weights_kernel(float *__restrict__ w, const double *__restrict__ A, const double *__restrict__ S,
                                    const float *__restrict__ up, const float *__restrict__ down, int n) {
	const int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= n) return;
	w[j] = S[j] > 0.0 ? (float)(A[j] / S[j] * (double)down[j]) : (float)((double)up[j] * (double)down[j]);
}

// gather_silu_mul_kernel: h[j] = silu(g[rows[j]])·u[j].
__global__ void gather_silu_mul_kernel(float *__restrict__ h, const float *__restrict__ g,
                                       const int32_t *__restrict__ rows, const float *__restrict__ u, int n) {
	const int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j < n) h[j] = silu_mul(g[rows[j]], u[j]);
}

} // namespace

extern "C" int sinf_gate_score(sinf_ctx *c, sinf_dptr keys, sinf_dptr g, sinf_dptr w, int n) {
	cudaSetDevice(c->device);
	if (n <= 0) return 0;
	SINF_LAUNCH((n + 255) / 256, 256, 0, c->stream, gate_score_kernel)((unsigned int *)dp(keys), (const float *)dp(g),
	                                                          (const float *)dp(w), n);
	return sinf_launch_rc();
}

extern "C" int sinf_gate_calib(sinf_ctx *c, sinf_dptr A, sinf_dptr S, sinf_dptr a, sinf_dptr u, int T, int kept) {
	cudaSetDevice(c->device);
	if (T <= 0 || kept <= 0) return 0;
	SINF_LAUNCH((kept + 255) / 256, 256, 0, c->stream, gate_calib_kernel)((double *)dp(A), (double *)dp(S), (const float *)dp(a),
	                                                             (const float *)dp(u), T, kept);
	return sinf_launch_rc();
}

extern "C" int sinf_gate_weights(sinf_ctx *c, sinf_dptr w, sinf_dptr A, sinf_dptr S, sinf_dptr up, sinf_dptr down,
                                 int n) {
	cudaSetDevice(c->device);
	if (n <= 0) return 0;
	SINF_LAUNCH((n + 255) / 256, 256, 0, c->stream, gate_weights_kernel)((float *)dp(w), (const double *)dp(A),
	                                                            (const double *)dp(S), (const float *)dp(up),
	                                                            (const float *)dp(down), n);
	return sinf_launch_rc();
}

extern "C" int sinf_gather_silu_mul(sinf_ctx *c, sinf_dptr h, sinf_dptr g, sinf_dptr rows, sinf_dptr u, int n) {
	cudaSetDevice(c->device);
	if (n <= 0) return 0;
	SINF_LAUNCH((n + 255) / 256, 256, 0, c->stream, gather_silu_mul_kernel)((float *)dp(h), (const float *)dp(g),
	                                                               (const int32_t *)dp(rows), (const float *)dp(u), n);
	return sinf_launch_rc();
}

extern "C" int sinf_count_top(sinf_ctx *c, sinf_dptr counts, sinf_dptr act, int T, int kept, double alpha) {
	cudaSetDevice(c->device);
	if (T <= 0 || kept <= 0) return 0;
	SINF_LAUNCH(T, kSelectThreads, 0, c->stream, count_top_kernel)((int32_t *)dp(counts), (const float *)dp(act), kept, alpha);
	return sinf_launch_rc();
}

extern "C" int sinf_select_top(sinf_ctx *c, sinf_dptr rows, sinf_dptr counts, int kept, int stat, int target) {
	cudaSetDevice(c->device);
	if (target < 0 || target > kept || stat < 0 || stat > target) return SINF_EINVAL;
	if (target == 0) return 0;
	void *mark = nullptr;
	cudaError_t e = sinf_scratch(c, (size_t)kept, &mark);
	if (e != cudaSuccess) return sinf_rc(e);
	SINF_LAUNCH(1, kSelectThreads, 0, c->stream, select_top_kernel)((int32_t *)dp(rows), (const int32_t *)dp(counts),
	                                                       (unsigned char *)mark, kept, stat, target);
	return sinf_launch_rc();
}
