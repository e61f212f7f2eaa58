// RMSNorm, RoPE, SwiGLU and argmax.
#include <limits.h>
#include <math.h>

#include "common.cuh"

namespace {

__global__ void rmsnorm_kernel(float *__restrict__ dst, const float *__restrict__ x, const float *__restrict__ w, int H,
                               double eps) {
	const float *xt = x + (size_t)blockIdx.x * H;
	float *dt = dst + (size_t)blockIdx.x * H;
	// As the CPU (runtime.RMSNorm): exact squares summed in double, so the
	// order of summation does not change the float scale; the scale in
	// double, rounded to float once.
	double ss = 0.0;
	for (int i = threadIdx.x; i < H; i += blockDim.x) {
		const double v = xt[i];
		ss += v * v;
	}
	ss = block_sum(ss);
	const float r = (float)(1.0 / sqrt(ss / (double)H + eps));
	for (int i = threadIdx.x; i < H; i += blockDim.x) dt[i] = __fmul_rn(w[i], __fmul_rn(xt[i], r));
}

// rope_kernel: one thread per (token, head, i < hd/2) pair. Products are
// rounded separately (no fused multiply-add), as the CPU computes them.
__global__ void rope_kernel(float *__restrict__ x, const float *__restrict__ cosT, const float *__restrict__ sinT, int pos0,
                            int T, int heads, int hd, int stride) {
	const int half = hd / 2;
	const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= (long long)T * heads * half) return;
	const int i = (int)(idx % half);
	const int h = (int)((idx / half) % heads);
	const int t = (int)(idx / ((long long)half * heads));
	float *xh = x + (size_t)t * stride + (size_t)h * hd;
	const size_t p = (size_t)(pos0 + t) * half + i;
	const float c = cosT[p], s = sinT[p];
	const float a = xh[i], b = xh[i + half];
	xh[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
	xh[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

__global__ void silu_mul_kernel(float *__restrict__ g, const float *__restrict__ u, int n) {
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) g[i] = silu_mul(g[i], u[i]);
}

// better reports whether (v2, i2) beats (v1, i1): larger value, then lower index.
__device__ __forceinline__ bool better(float v2, int i2, float v1, int i1) {
	return v2 > v1 || (v2 == v1 && i2 < i1);
}

__global__ void argmax_kernel(int32_t *__restrict__ out, const float *__restrict__ x, int n) {
	__shared__ float sv[32];
	__shared__ int si[32];
	float bv = -INFINITY;
	int bi = INT_MAX;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		const float v = x[i];
		if (bi == INT_MAX || v > bv) {
			bv = v;
			bi = i;
		}
	}
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const float v = __shfl_xor_sync(0xffffffffu, bv, o);
		const int i = __shfl_xor_sync(0xffffffffu, bi, o);
		if (better(v, i, bv, bi)) {
			bv = v;
			bi = i;
		}
	}
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (lane == 0) {
		sv[warp] = bv;
		si[warp] = bi;
	}
	__syncthreads();
	if (warp == 0) {
		bv = lane < nw ? sv[lane] : -INFINITY;
		bi = lane < nw ? si[lane] : INT_MAX;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			const float v = __shfl_xor_sync(0xffffffffu, bv, o);
			const int i = __shfl_xor_sync(0xffffffffu, bi, o);
			if (better(v, i, bv, bi)) {
				bv = v;
				bi = i;
			}
		}
		if (lane == 0) out[0] = bi == INT_MAX ? 0 : bi;
	}
}

} // namespace

extern "C" int sinf_rmsnorm(sinf_ctx *c, sinf_dptr dst, sinf_dptr x, sinf_dptr w, int T, int H, double eps) {
	cudaSetDevice(c->device);
	if (T <= 0) return 0;
	SINF_LAUNCH(T, 256, 0, c->stream, rmsnorm_kernel)((float *)dp(dst), (const float *)dp(x), (const float *)dp(w), H, eps);
	return sinf_launch_rc();
}

extern "C" int sinf_rope(sinf_ctx *c, sinf_dptr x, sinf_dptr cosT, sinf_dptr sinT, int pos0, int T, int heads, int hd,
                         int stride) {
	cudaSetDevice(c->device);
	const long long n = (long long)T * heads * (hd / 2);
	if (n <= 0) return 0;
	SINF_LAUNCH((unsigned)((n + 255) / 256), 256, 0, c->stream, rope_kernel)((float *)dp(x), (const float *)dp(cosT),
	                                                                (const float *)dp(sinT), pos0, T, heads, hd, stride);
	return sinf_launch_rc();
}

extern "C" int sinf_silu_mul(sinf_ctx *c, sinf_dptr g, sinf_dptr u, int n) {
	cudaSetDevice(c->device);
	if (n <= 0) return 0;
	SINF_LAUNCH((n + 255) / 256, 256, 0, c->stream, silu_mul_kernel)((float *)dp(g), (const float *)dp(u), n);
	return sinf_launch_rc();
}

extern "C" int sinf_argmax(sinf_ctx *c, sinf_dptr out, sinf_dptr x, int n) {
	cudaSetDevice(c->device);
	SINF_LAUNCH(1, 1024, 0, c->stream, argmax_kernel)((int32_t *)dp(out), (const float *)dp(x), n);
	return sinf_launch_rc();
}
