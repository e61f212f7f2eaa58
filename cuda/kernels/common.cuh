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

#include <type_traits>

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

// block_sum returns the sum of v (float, double or int) over the block to
// every thread. blockDim.x must be a multiple of 32 (≤ 1024). It
// synchronises the block.
template <typename T> __device__ __forceinline__ T block_sum(T v) {
	__shared__ T part[32];
	__shared__ T total;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	if (lane == 0) part[warp] = v;
	__syncthreads();
	if (warp == 0) {
		T s = lane < nw ? part[lane] : T(0);
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
		if (lane == 0) total = s;
	}
	__syncthreads();
	return total;
}

// silu_mul matches the CPU's swiglu: g/(1+exp(-g))·u with exp in double.
__device__ __forceinline__ float silu_mul(float g, float u) {
	float e = (float)exp(-(double)g);
	return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.f, e)), u);
}

static inline bool aligned16(sinf_dptr p) { return (p & 15) == 0; }

// Block-quantized weights (GGML's layouts, spec/sinf.md §5.2–5.3): a row of K
// elements is K/BE blocks (BlockElems<T>: 32, or 256 for the K-quants). The
// structs have GGML's layout (2-byte alignment, no padding).
//   Q8_0: element i = d·q_i, q int8.
//   Q4_0: d·(q_i − 8), q_i byte i's low nibble (i < 16) or byte i−16's high one.
//   Q5_0: d·(q_i − 16), Q4_0's nibbles with bit 4 of element i in bit i of qh.
//   Q5_1: d·q_i + m, Q5_0's 5-bit q.
//   Q4_K: sub-block j = i/32 of eight, 6-bit scale sc_j and minimum m_j
//         (scale_min_k4); element d·sc_j·q − dmin·m_j, q the low (even j) or
//         high (odd j) nibble of qs[32·(i/64) + i%32].
//   Q5_K: Q4_K with bit 4 of q in bit j of qh[i%32].
//   Q6_K: (d·sc_{i/16})·(q − 32), q 6 bits: the nibble of ql[64h + 32(k&1) + l]
//         (k ≥ 2 the high one) and bits 2k of qh[32h + l], h = i/128,
//         k = i%128/32, l = i%32.
struct q8_0_t {
	static constexpr int elems = 32;
	uint16_t d;
	int8_t qs[32];
};
struct q4_0_t {
	static constexpr int elems = 32;
	uint16_t d;
	uint8_t qs[16];
};
struct q5_0_t {
	static constexpr int elems = 32;
	uint16_t d;
	uint8_t qh[4];
	uint8_t qs[16];
};
struct q5_1_t {
	static constexpr int elems = 32;
	uint16_t d, m;
	uint8_t qh[4];
	uint8_t qs[16];
};
struct q4_k_t {
	static constexpr int elems = 256;
	uint16_t d, dmin;
	uint8_t sc[12];
	uint8_t qs[128];
};
struct q5_k_t {
	static constexpr int elems = 256;
	uint16_t d, dmin;
	uint8_t sc[12];
	uint8_t qh[32];
	uint8_t qs[128];
};
struct q6_k_t {
	static constexpr int elems = 256;
	uint8_t ql[128];
	uint8_t qh[64];
	int8_t sc[16];
	uint16_t d;
};
static_assert(sizeof(q8_0_t) == 34 && sizeof(q4_0_t) == 18 && sizeof(q5_0_t) == 22 && sizeof(q5_1_t) == 24 &&
                  sizeof(q4_k_t) == 144 && sizeof(q5_k_t) == 176 && sizeof(q6_k_t) == 210,
              "GGML block sizes");

// BlockElems<T>::n: the elements of one block (T::elems; 0: T is not a
// block dtype).
template <typename T, typename = void> struct BlockElems {
	static constexpr int n = 0;
};
template <typename T> struct BlockElems<T, std::void_t<decltype(T::elems)>> {
	static constexpr int n = T::elems;
};
template <typename T> struct IsBlock {
	static constexpr bool v = BlockElems<T>::n > 0;
};

__device__ __forceinline__ float block_scale(uint16_t d) { return __half2float(__ushort_as_half(d)); }

// ld32 reads the four bytes at p (2-byte aligned: blocks are) as one
// little-endian word.
__device__ __forceinline__ int ld32(const void *p) {
	const uint16_t *h = static_cast<const uint16_t *>(p);
	return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

// scale_min_k4 returns sub-block j's 6-bit scale and minimum of a Q4_K/Q5_K
// block's 12 scale bytes (spec §5.3).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, float &sc, float &m) {
	if (j < 4) {
		sc = (float)(q[j] & 63);
		m = (float)(q[j + 4] & 63);
	} else {
		sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

// block_elem returns element i of a block exactly as the CPU's
// format.Dequantize computes it (each binary32 operation rounded on its own:
// the _rn intrinsics keep nvcc from fusing them).
__device__ __forceinline__ float block_elem(const q8_0_t &b, int i) { return (float)b.qs[i] * block_scale(b.d); }
__device__ __forceinline__ float block_elem(const q4_0_t &b, int i) {
	const int q = i < 16 ? (b.qs[i] & 15) : (b.qs[i - 16] >> 4);
	return (float)(q - 8) * block_scale(b.d);
}
__device__ __forceinline__ int q5_level(const uint8_t *qh, const uint8_t *qs, int i) {
	const int nib = i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4);
	return nib | (((qh[i >> 3] >> (i & 7)) & 1) << 4);
}
__device__ __forceinline__ float block_elem(const q5_0_t &b, int i) {
	return (float)(q5_level(b.qh, b.qs, i) - 16) * block_scale(b.d);
}
__device__ __forceinline__ float block_elem(const q5_1_t &b, int i) {
	return __fadd_rn(__fmul_rn((float)q5_level(b.qh, b.qs, i), block_scale(b.d)), block_scale(b.m));
}
template <typename T> __device__ __forceinline__ float k4_elem(const T &b, int i, int q) {
	float sc, m;
	scale_min_k4(i / 32, b.sc, sc, m);
	const float d = __fmul_rn(block_scale(b.d), sc), dm = __fmul_rn(block_scale(b.dmin), m);
	return __fsub_rn(__fmul_rn(d, (float)q), dm);
}
__device__ __forceinline__ float block_elem(const q4_k_t &b, int i) {
	const uint8_t v = b.qs[32 * (i / 64) + i % 32];
	return k4_elem(b, i, (i / 32) & 1 ? v >> 4 : v & 15);
}
__device__ __forceinline__ float block_elem(const q5_k_t &b, int i) {
	const int j = i / 32, l = i % 32;
	const uint8_t v = b.qs[32 * (i / 64) + l];
	return k4_elem(b, i, (j & 1 ? v >> 4 : v & 15) | (((b.qh[l] >> j) & 1) << 4));
}
__device__ __forceinline__ float block_elem(const q6_k_t &b, int i) {
	const int h = i / 128, k = (i % 128) / 32, l = i % 32;
	const int q = ((b.ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15) | (((b.qh[32 * h + l] >> (2 * k)) & 3) << 4);
	const float s = __fmul_rn(block_scale(b.d), (float)b.sc[8 * h + 2 * k + l / 16]);
	return __fmul_rn(s, (float)(q - 32));
}

// wat returns element (r, c) of a row-major matrix W of ld elements per row,
// for every weight dtype (the scalar paths: embedding, prefill tiles, the
// neuron-row accumulation of block rows).
template <typename T> __device__ __forceinline__ float wat(const T *W, size_t r, size_t c, size_t ld) {
	if constexpr (IsBlock<T>::v) {
		constexpr int E = BlockElems<T>::n;
		return block_elem(W[r * (ld / E) + c / E], (int)(c % E));
	} else
		return load1(W + r * ld + c);
}

// Dispatch a templated launcher over a weight dtype (W: its element type);
// SINF_DISPATCH takes the float dtypes, SINF_DISPATCH_BLOCK the block ones,
// SINF_DISPATCH_ALL both; each returns SINF_EINVAL for a dtype it does not
// take.
#define SINF_CASE(code, type, ...)                                                                                     \
	case code: {                                                                                                   \
		using W = type;                                                                                              \
		__VA_ARGS__;                                                                                                 \
		break;                                                                                                       \
	}
#define SINF_FLOAT_CASES(...)                                                                                          \
	SINF_CASE(SINF_F32, float, __VA_ARGS__)                                                                        \
	SINF_CASE(SINF_F16, __half, __VA_ARGS__)                                                                       \
	SINF_CASE(SINF_BF16, bf16_t, __VA_ARGS__)
#define SINF_BLOCK_CASES(...)                                                                                          \
	SINF_CASE(SINF_Q8_0, q8_0_t, __VA_ARGS__)                                                                      \
	SINF_CASE(SINF_Q4_0, q4_0_t, __VA_ARGS__)                                                                      \
	SINF_CASE(SINF_Q5_0, q5_0_t, __VA_ARGS__)                                                                      \
	SINF_CASE(SINF_Q5_1, q5_1_t, __VA_ARGS__)                                                                      \
	SINF_CASE(SINF_Q4_K, q4_k_t, __VA_ARGS__)                                                                      \
	SINF_CASE(SINF_Q5_K, q5_k_t, __VA_ARGS__)                                                                      \
	SINF_CASE(SINF_Q6_K, q6_k_t, __VA_ARGS__)
// SINF_SWITCH(dtype, cases...) runs the case of dtype, or returns
// SINF_EINVAL.
#define SINF_SWITCH(dtype, ...)                                                                                        \
	switch (dtype) {                                                                                               \
		__VA_ARGS__                                                                                                \
	default:                                                                                                       \
		return SINF_EINVAL;                                                                                          \
	}
#define SINF_DISPATCH(dtype, ...) SINF_SWITCH(dtype, SINF_FLOAT_CASES(__VA_ARGS__))
#define SINF_DISPATCH_BLOCK(dtype, ...) SINF_SWITCH(dtype, SINF_BLOCK_CASES(__VA_ARGS__))
#define SINF_DISPATCH_ALL(dtype, ...) SINF_SWITCH(dtype, SINF_FLOAT_CASES(__VA_ARGS__) SINF_BLOCK_CASES(__VA_ARGS__))

// block_elems returns the elements of one block of a dtype code: 32, 256 for
// the K-quants, 0 for the float dtypes (and unknown codes).
static inline int block_elems(int dtype) {
	switch (dtype) {
		SINF_BLOCK_CASES(return BlockElems<W>::n)
	default:
		return 0;
	}
}
static inline bool is_block(int dtype) { return block_elems(dtype) > 0; }
// rows_ok: a row of cols elements is whole blocks of dtype.
static inline bool rows_ok(int dtype, int cols) { return !is_block(dtype) || cols % block_elems(dtype) == 0; }
