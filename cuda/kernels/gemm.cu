// Prefill matrix products. F32 weights go to cuBLAS (cublasGemmEx, float32
// compute, no TF32; the tiled kernel when built with SINF_NO_CUBLAS);
// F16/BF16 and block weights to a tiled kernel that converts each
// weight exactly to float32 (a block's element d·q) and multiplies float32
// activations. For block weights the activations are first rounded as the
// CPU's prefill quantizes them (int8 blocks of 32, the K-quants' with one
// scale per 256: x_scale_kernel's scales, applied as the tile is loaded), so
// both compute Σ (d_w·q_w)·(d_x·q_x) and differ by float32 rounding only;
// converting activations to half for the tensor cores would round them
// otherwise.
#include "common.cuh"

namespace {

constexpr int BM = 64, BN = 64, BK = 16, kGemmThreads = 256;

// x_scale_kernel sets d[b] = max|x|/127 over the group of group blocks of 32
// (1, or 8 for the K-quants) holding block b, for the ng·group blocks of X,
// the tokens' rows end to end (K a multiple of 32·group, so no group spans
// two tokens): the CPU's quantizeX / quantizeXK scales. One warp per group.
__global__ void x_scale_kernel(float *__restrict__ d, const float *__restrict__ X, int ng, int group) {
	const int s = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (s >= ng) return;
	float m = 0.f;
	for (int b = 0; b < group; b++) m = fmaxf(m, fabsf(X[((size_t)s * group + b) * 32 + lane]));
	const float v = warp_max(m) / 127.f;
	if (lane < group) d[(size_t)s * group + lane] = v;
}

// gemm_kernel computes C[M, N] (+)= X[M, K]·op(W) (+ bias[N]) where op(W) is
// Wᵀ for W [N, K] (WT) or W for W [K, N] (!WT). Each thread owns a 4×4
// interleaved block of the 64×64 tile. With xd (x_scale_kernel's scales of
// X's blocks of 32), each x is first rounded to q·d, q = x·(1/d) rounded to
// nearest even, as the CPU's quantizeX does.
template <typename T, bool WT>
__global__ void __launch_bounds__(kGemmThreads)
    gemm_kernel(float *__restrict__ C, const float *__restrict__ X, const T *__restrict__ W, int M, int N, int K,
                const float *__restrict__ bias, int accumulate, const float *__restrict__ xd) {
	__shared__ float Xs[BK][BM + 4];
	__shared__ float Ws[BK][BN + 4];
	const int tid = threadIdx.x;
	const int tx = tid & 15, ty = tid >> 4;
	const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
	float acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++) acc[i][j] = 0.f;

	for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
		for (int r = 0; r < (BM * BK) / kGemmThreads; r++) {
			const int e = tid + kGemmThreads * r;
			const int mm = e / BK, kk = e % BK;
			const int gm = m0 + mm, gk = k0 + kk;
			float v = 0.f;
			if (gm < M && gk < K) {
				const size_t xi = (size_t)gm * K + gk;
				v = X[xi];
				if (xd) {
					const float d = xd[xi >> 5];
					const float id = d != 0.f ? 1.f / d : 0.f;
					v = (float)__float2int_rn(v * id) * d;
				}
			}
			Xs[kk][mm] = v;
		}
#pragma unroll
		for (int r = 0; r < (BN * BK) / kGemmThreads; r++) {
			const int e = tid + kGemmThreads * r;
			if constexpr (WT) {
				const int nn = e / BK, kk = e % BK;
				const int gn = n0 + nn, gk = k0 + kk;
				Ws[kk][nn] = (gn < N && gk < K) ? wat(W, gn, gk, K) : 0.f;
			} else {
				const int kk = e / BN, nn = e % BN;
				const int gn = n0 + nn, gk = k0 + kk;
				Ws[kk][nn] = (gn < N && gk < K) ? wat(W, gk, gn, N) : 0.f;
			}
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < BK; kk++) {
			float a[4], b[4];
#pragma unroll
			for (int i = 0; i < 4; i++) a[i] = Xs[kk][ty + 16 * i];
#pragma unroll
			for (int j = 0; j < 4; j++) b[j] = Ws[kk][tx + 16 * j];
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int m = m0 + ty + 16 * i;
		if (m >= M) continue;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const int n = n0 + tx + 16 * j;
			if (n >= N) continue;
			float v = acc[i][j];
			if (bias) v += bias[n];
			float *cp = C + (size_t)m * N + n;
			*cp = accumulate ? *cp + v : v;
		}
	}
}

#ifndef SINF_NO_CUBLAS
__global__ void add_bias_kernel(float *__restrict__ C, const float *__restrict__ bias, int M, int N) {
	const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (size_t)M * N) return;
	C[i] += bias[i % N];
}

int blas_rc(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? 0 : SINF_CUBLAS_BASE + (int)s; }
#endif

} // namespace

extern "C" int sinf_gemm(sinf_ctx *c, sinf_dptr dst, sinf_mat w, sinf_dptr x, int T, sinf_dptr bias, int accumulate) {
	cudaSetDevice(c->device);
	const int M = T, N = w.rows, K = w.cols;
	if (M <= 0 || N <= 0) return 0;
#ifndef SINF_NO_CUBLAS
	if (w.dtype == SINF_F32) {
		// Row-major C[M,N] = X[M,K]·W[N,K]ᵀ is column-major Cᵀ[N,M] = W·Xᵀ
		// with W read as the column-major K×N matrix, transposed.
		const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
		int rc = blas_rc(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, dp(w.data), CUDA_R_32F, K,
		                              dp(x), CUDA_R_32F, K, &beta, dp(dst), CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
		                              CUBLAS_GEMM_DEFAULT));
		if (rc != 0 || !bias) return rc;
		const size_t total = (size_t)M * N;
		SINF_LAUNCH((unsigned)((total + 255) / 256), 256, 0, c->stream, add_bias_kernel)((float *)dp(dst), (const float *)dp(bias), M,
		                                                                         N);
		return sinf_launch_rc();
	}
#endif
	if (!rows_ok(w.dtype, K)) return SINF_EINVAL;
	float *xd = nullptr; // block weights: x's scales, as the CPU quantizes x
	if (is_block(w.dtype)) {
		const int group = block_elems(w.dtype) / 32;
		const size_t nb = (size_t)M * K / 32;
		void *buf = nullptr;
		cudaError_t e = sinf_scratch(c, nb * sizeof(float), &buf);
		if (e != cudaSuccess) return sinf_rc(e);
		xd = static_cast<float *>(buf);
		const int ng = (int)(nb / group), warps = kGemmThreads / 32;
		SINF_LAUNCH((ng + warps - 1) / warps, kGemmThreads, 0, c->stream, x_scale_kernel)(xd, (const float *)dp(x), ng,
		                                                                                  group);
	}
	dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
	SINF_DISPATCH_ALL(w.dtype, SINF_LAUNCH(grid, kGemmThreads, 0, c->stream, gemm_kernel<W, true>)(
	                           (float *)dp(dst), (const float *)dp(x), (const W *)dp(w.data), M, N, K,
	                           (const float *)dp(bias), accumulate, xd));
	return sinf_launch_rc();
}

extern "C" int sinf_gemm_rows_t(sinf_ctx *c, sinf_dptr dst, sinf_mat w, sinf_dptr a, int T, int accumulate) {
	cudaSetDevice(c->device);
	const int M = T, N = w.cols, K = w.rows;
	if (M <= 0 || N <= 0) return 0;
#ifndef SINF_NO_CUBLAS
	if (w.dtype == SINF_F32) {
		// Row-major C[M,N] = A[M,K]·W[K,N] is column-major Cᵀ = Wᵀ·Aᵀ with
		// both read as they lie.
		const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
		return blas_rc(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, dp(w.data), CUDA_R_32F, N, dp(a),
		                            CUDA_R_32F, K, &beta, dp(dst), CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
		                            CUBLAS_GEMM_DEFAULT));
	}
#endif
	if (!rows_ok(w.dtype, N)) return SINF_EINVAL;
	dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
	SINF_DISPATCH_ALL(w.dtype, SINF_LAUNCH(grid, kGemmThreads, 0, c->stream, gemm_kernel<W, false>)(
	                           (float *)dp(dst), (const float *)dp(a), (const W *)dp(w.data), M, N, K, nullptr,
	                           accumulate, nullptr));
	return sinf_launch_rc();
}
