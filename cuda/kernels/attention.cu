// Causal grouped-query attention over the device KV cache (decode: T = 1;
// prefill: T tokens at once).
#include <math.h>

#include "common.cuh"

namespace {

constexpr int kAttnWarps = 4;
constexpr int kMaxHD = 256;
constexpr int kPerLane = kMaxHD / 32;

// attention_kernel: block (h, t) computes head h of token t. Each warp takes
// chunks of 32 positions: lane i scores position base+i, the chunk updates
// the warp's running max m, sum l and output acc (online softmax), then the
// warps' partial results are combined.
template <bool VEC>
__global__ void __launch_bounds__(32 * kAttnWarps)
    attention_kernel(float *__restrict__ out, const float *__restrict__ q, const float *__restrict__ kc,
                     const float *__restrict__ vc, int pos0, int heads, int kvh, int hd, float scale) {
	__shared__ __align__(16) float qs[kMaxHD];
	__shared__ float wm[kAttnWarps], wl[kAttnWarps];
	__shared__ float wacc[kAttnWarps][kMaxHD];
	const int h = blockIdx.x, t = blockIdx.y;
	const int qd = heads * hd, kvd = kvh * hd;
	const int kvoff = (h / (heads / kvh)) * hd;
	const int n = pos0 + t + 1;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	for (int j = threadIdx.x; j < hd; j += blockDim.x) qs[j] = q[(size_t)t * qd + (size_t)h * hd + j];
	__syncthreads();

	float acc[kPerLane];
#pragma unroll
	for (int d = 0; d < kPerLane; d++) acc[d] = 0.f;
	float m = -INFINITY, l = 0.f;
	for (int base = warp * 32; base < n; base += kAttnWarps * 32) {
		const int p = base + lane;
		float s = -INFINITY;
		if (p < n) {
			const float *kp = kc + (size_t)p * kvd + kvoff;
			float d = 0.f;
			if constexpr (VEC) {
				const float4 *k4 = reinterpret_cast<const float4 *>(kp);
				const float4 *q4 = reinterpret_cast<const float4 *>(qs);
				for (int j = 0; j < hd / 4; j++) {
					const float4 kv = k4[j], qv = q4[j];
					d += qv.x * kv.x;
					d += qv.y * kv.y;
					d += qv.z * kv.z;
					d += qv.w * kv.w;
				}
			} else {
				for (int j = 0; j < hd; j++) d += qs[j] * kp[j];
			}
			s = d * scale;
		}
		const float mn = fmaxf(m, warp_max(s));
		const float corr = expf(m - mn); // 0 on the first chunk (m = -inf)
		const float e = p < n ? expf(s - mn) : 0.f;
		l = l * corr + warp_sum(e);
#pragma unroll
		for (int d = 0; d < kPerLane; d++) acc[d] *= corr;
		const int cnt = min(32, n - base);
		for (int i = 0; i < cnt; i++) {
			const float ei = __shfl_sync(0xffffffffu, e, i);
			const float *vp = vc + (size_t)(base + i) * kvd + kvoff;
#pragma unroll
			for (int d = 0; d < kPerLane; d++) {
				const int j = lane + 32 * d;
				if (j < hd) acc[d] += ei * vp[j];
			}
		}
		m = mn;
	}
	if (lane == 0) {
		wm[warp] = m;
		wl[warp] = l;
	}
#pragma unroll
	for (int d = 0; d < kPerLane; d++) {
		const int j = lane + 32 * d;
		if (j < hd) wacc[warp][j] = acc[d];
	}
	__syncthreads();
	float M = -INFINITY;
#pragma unroll
	for (int w = 0; w < kAttnWarps; w++) M = fmaxf(M, wm[w]);
	float L = 0.f, f[kAttnWarps];
#pragma unroll
	for (int w = 0; w < kAttnWarps; w++) {
		f[w] = expf(wm[w] - M); // 0 for a warp that saw no position
		L += wl[w] * f[w];
	}
	for (int j = threadIdx.x; j < hd; j += blockDim.x) {
		float o = 0.f;
#pragma unroll
		for (int w = 0; w < kAttnWarps; w++) o += wacc[w][j] * f[w];
		out[(size_t)t * qd + (size_t)h * hd + j] = o / L;
	}
}

} // namespace

extern "C" int sinf_attention(sinf_ctx *c, sinf_dptr out, sinf_dptr q, sinf_dptr kc, sinf_dptr vc, int pos0, int T,
                              int heads, int kv_heads, int hd) {
	cudaSetDevice(c->device);
	if (T <= 0) return 0;
	if (hd <= 0 || hd > kMaxHD || kv_heads <= 0 || heads % kv_heads != 0) return SINF_EINVAL;
	const float scale = (float)(1.0 / sqrt((double)hd));
	dim3 grid(heads, T);
	if (hd % 4 == 0 && aligned16(kc))
		SINF_LAUNCH(grid, 32 * kAttnWarps, 0, c->stream, attention_kernel<true>)(
		    (float *)dp(out), (const float *)dp(q), (const float *)dp(kc), (const float *)dp(vc), pos0, heads, kv_heads,
		    hd, scale);
	else
		SINF_LAUNCH(grid, 32 * kAttnWarps, 0, c->stream, attention_kernel<false>)(
		    (float *)dp(out), (const float *)dp(q), (const float *)dp(kc), (const float *)dp(vc), pos0, heads, kv_heads,
		    hd, scale);
	return sinf_launch_rc();
}
