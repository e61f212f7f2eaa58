// Shared definitions of the sinf CUDA kernels: the context, dtype handling,
// vector loads and block reductions.
#pragma once

// SINF_NO_CUBLAS (make cuda-portable) builds without cuBLAS: F32 prefill
// products then use the tiled kernel too, and the library needs only the
// CUDA runtime (linked statically there).
#ifndef SINF_NO_CUBLAS
#include <cublas_v2.h>
#endif
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../sinfcuda.h"

// SINF_LAUNCH(grid, block, shared bytes, stream, kernel)(args...) launches
// kernel: kernel<<<grid, block, shared bytes, stream>>>(args...) under nvcc,
// the CPU emulator's launcher when the kernels are compiled as host C++
// against cuda/emu (make cuda-emu), whose cuda_runtime.h defines
// SINF_CUDA_EMU. The kernel comes last so that a template's commas need no
// parentheses.
#ifdef SINF_CUDA_EMU
#define SINF_LAUNCH(grid, block, shmem, stream, ...) SINF_EMU_LAUNCH(grid, block, shmem, stream, __VA_ARGS__)
#else
#define SINF_LAUNCH(grid, block, shmem, stream, ...) __VA_ARGS__<<<grid, block, shmem, stream>>>
#endif

struct sinf_ctx {
	int device;
	cudaStream_t stream;
#ifndef SINF_NO_CUBLAS
	cublasHandle_t blas;
#endif
	int sm_count;
	void *scratch;         // device scratch (add_rows partial sums, selection masks)
	size_t scratch_bytes;
	cudaEvent_t t0, t1;    // sinf_timer_*
};

// Error codes: CUDA runtime errors as they are; cuBLAS statuses offset by
// SINF_CUBLAS_BASE; argument errors SINF_EINVAL.
#define SINF_CUBLAS_BASE 100000
#define SINF_EINVAL 200001

// scratch returns at least bytes of device scratch, growing it (after the
// stream drains, so no queued kernel still reads the old buffer).
cudaError_t sinf_scratch(sinf_ctx *ctx, size_t bytes, void **out);

static inline int sinf_rc(cudaError_t e) { return (int)e; }
static inline int sinf_launch_rc() { return (int)cudaGetLastError(); }

static inline void *dp(sinf_dptr p) { return (void *)(uintptr_t)p; }

// bf16 is stored as its 16 bits; float(b) = bits << 16 exactly.
struct bf16_t {
	uint16_t bits;
};

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(bf16_t v) { return __uint_as_float(((uint32_t)v.bits) << 16); }

// Two 16-bit elements packed in a 32-bit word, element 0 in the low half
// (little-endian).
template <typename T> __device__ __forceinline__ float lo16(uint32_t w);
template <typename T> __device__ __forceinline__ float hi16(uint32_t w);
template <> __device__ __forceinline__ float lo16<__half>(uint32_t w) {
	return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
}
template <> __device__ __forceinline__ float hi16<__half>(uint32_t w) {
	return __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}
template <> __device__ __forceinline__ float lo16<bf16_t>(uint32_t w) { return __uint_as_float(w << 16); }
template <> __device__ __forceinline__ float hi16<bf16_t>(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// VecN<T>: elements of T in one 16-byte load.
template <typename T> struct VecN {
	static constexpr int n = 16 / sizeof(T);
};

// load16 reads 16 bytes at p (16-byte aligned) and converts them to float.
template <typename T> __device__ __forceinline__ void load16(const T *p, float *out) {
	uint4 u = __ldg(reinterpret_cast<const uint4 *>(p));
	if constexpr (sizeof(T) == 4) {
		out[0] = __uint_as_float(u.x);
		out[1] = __uint_as_float(u.y);
		out[2] = __uint_as_float(u.z);
		out[3] = __uint_as_float(u.w);
	} else {
		out[0] = lo16<T>(u.x);
		out[1] = hi16<T>(u.x);
		out[2] = lo16<T>(u.y);
		out[3] = hi16<T>(u.y);
		out[4] = lo16<T>(u.z);
		out[5] = hi16<T>(u.z);
		out[6] = lo16<T>(u.w);
		out[7] = hi16<T>(u.w);
	}
}

// load1 reads one element (any alignment of its type).
template <typename T> __device__ __forceinline__ float load1(const T *p) { return to_f(*p); }
template <> __device__ __forceinline__ float load1<float>(const float *p) { return __ldg(p); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum returns the sum of v over the block to every thread. blockDim.x
// must be a multiple of 32 (≤ 1024). It synchronises the block.
__device__ __forceinline__ float block_sum(float v) {
	__shared__ float part[32];
	__shared__ float total;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	if (lane == 0) part[warp] = v;
	__syncthreads();
	if (warp == 0) {
		float s = lane < nw ? part[lane] : 0.f;
		s = warp_sum(s);
		if (lane == 0) total = s;
	}
	__syncthreads();
	return total;
}

__device__ __forceinline__ int block_sum_int(int v) {
	__shared__ int ipart[32];
	__shared__ int itotal;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	if (lane == 0) ipart[warp] = v;
	__syncthreads();
	if (warp == 0) {
		int s = lane < nw ? ipart[lane] : 0;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
		if (lane == 0) itotal = s;
	}
	__syncthreads();
	return itotal;
}

// silu_mul matches the CPU's swiglu: g/(1+exp(-g))·u with exp in double.
__device__ __forceinline__ float silu_mul(float g, float u) {
	float e = (float)exp(-(double)g);
	return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.f, e)), u);
}

static inline bool aligned16(sinf_dptr p) { return (p & 15) == 0; }

// Dispatch a templated launcher over a weight dtype; returns SINF_EINVAL for
// an unknown one.
#define SINF_DISPATCH(dtype, ...)                                                                               \
	switch (dtype) {                                                                                               \
	case SINF_F32: {                                                                                               \
		using W = float;                                                                                             \
		__VA_ARGS__;                                                                                                    \
		break;                                                                                                       \
	}                                                                                                              \
	case SINF_F16: {                                                                                               \
		using W = __half;                                                                                            \
		__VA_ARGS__;                                                                                                    \
		break;                                                                                                       \
	}                                                                                                              \
	case SINF_BF16: {                                                                                              \
		using W = bf16_t;                                                                                            \
		__VA_ARGS__;                                                                                                    \
		break;                                                                                                       \
	}                                                                                                              \
	default:                                                                                                       \
		return SINF_EINVAL;                                                                                          \
	}
