// cuda_emu.h: a CPU emulation of the CUDA execution model, enough of it for
// sinf's kernels (cuda/kernels/*.cu) to compile unchanged as host C++
// (g++ -x c++ -I cuda/emu/include) and run: make cuda-emu.
//
// Execution model (CUDA C++ Programming Guide, "Programming Model" and
// "C++ Language Extensions"):
//   - A launch runs the grid's blocks one after another on the calling host
//     thread; the threads of a block run as fibers (one stack each) that
//     switch only where CUDA threads must wait for each other: __syncthreads
//     (a barrier of the block's threads that have not exited) and the warp
//     primitives (__shfl*_sync, __ballot_sync, __syncwarp), which wait for
//     every lane named in their mask (32-lane warps, lane = threadIdx linear
//     index % 32). A barrier that can never complete (a __syncthreads in
//     divergent code, a shuffle whose mask names an exited lane) aborts
//     with a message naming it.
//   - __shared__ variables are one copy per host thread, shared by the fibers
//     of the block that runs on it: blocks of a launch run one at a time, so
//     that copy is the block's shared memory.
//   - Device memory is host memory (cudaMalloc is aligned_alloc), so
//     AddressSanitizer sees every out-of-bounds kernel access.
//   - Under ThreadSanitizer every fiber is a TSan fiber switched without
//     synchronisation; only __syncthreads (release, then acquire), atomics and
//     the end of a block order memory between the threads of a block, so a
//     missing __syncthreads is a reported data race.
//   - Streams are synchronous: a launch returns after its grid has run.
//
// What the emulator cannot reproduce is in cuda/README.md (timing,
// coalescing, the GPU's own expf/fused multiply-adds, warp scheduling).
#pragma once

// SINF_CUDA_EMU tells common.cuh to launch through the emulator.
#define SINF_CUDA_EMU 1

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- Qualifiers -------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local
#define __constant__ static

// ---- Vector types (CUDA's vector_types.h layout and alignment) ---------------

struct uint3 {
	unsigned int x, y, z;
};
struct dim3 {
	unsigned int x, y, z;
	constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
};
struct __attribute__((aligned(8))) float2 {
	float x, y;
};
struct __attribute__((aligned(16))) float4 {
	float x, y, z, w;
};
struct __attribute__((aligned(16))) uint4 {
	unsigned int x, y, z, w;
};
struct __attribute__((aligned(16))) int4 {
	int x, y, z, w;
};
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

// ---- The emulator's state and primitives (cuda/emu/emu.cc) -------------------

namespace sinf_emu {

// Thread is one CUDA thread of the running block: its indices, as the
// kernel reads them.
struct Thread {
	uint3 thread_idx;
	uint3 block_idx;
	dim3 block_dim;
	dim3 grid_dim;
	int linear; // threadIdx.x + blockDim.x·(threadIdx.y + blockDim.y·threadIdx.z)
};

// tls_current is the CUDA thread running on this host thread (only inside a
// kernel); a relaxed atomic, so that ThreadSanitizer sees no race on the
// emulator's own bookkeeping.
extern thread_local std::atomic<const Thread *> tls_current;
static inline const Thread &current() { return *tls_current.load(std::memory_order_relaxed); }

// run_grid runs body (the kernel applied to its arguments) for every thread
// of grid × block; it returns 0, or cudaErrorInvalidConfiguration for a bad
// shape (also left for cudaGetLastError).
int run_grid(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()> &body, const char *name);

void syncthreads();
// warp_exchange: the calling lane offers v (64 bits) and receives the value
// that lane src (of its warp) offered, after every lane of mask arrived.
uint64_t warp_exchange(unsigned mask, uint64_t v, int src, const char *what);
// warp_ballot: the bits of the lanes of mask whose pred is true.
unsigned warp_ballot(unsigned mask, bool pred);
void syncwarp(unsigned mask);

// Launcher<P...> runs a kernel void(P...) over a grid when called with its
// arguments (SINF_LAUNCH).
template <typename... P> struct Launcher {
	void (*kernel)(P...);
	dim3 grid, block;
	size_t shared_bytes;
	const char *name;
	template <typename... A> void operator()(A &&...a) const {
		static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
		std::tuple<std::decay_t<P>...> args(static_cast<std::decay_t<P>>(std::forward<A>(a))...);
		auto k = kernel;
		run_grid(grid, block, shared_bytes, [&] { std::apply(k, args); }, name);
	}
};

template <typename... P>
Launcher<P...> launch(dim3 grid, dim3 block, size_t shared_bytes, const void * /*stream*/, void (*kernel)(P...),
                      const char *name) {
	return Launcher<P...>{kernel, grid, block, shared_bytes, name};
}

template <typename T> static inline uint64_t to_bits(T v) {
	static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 64 bits");
	uint64_t b = 0;
	memcpy(&b, &v, sizeof v);
	return b;
}
template <typename T> static inline T from_bits(uint64_t b) {
	T v;
	memcpy(&v, &b, sizeof v);
	return v;
}

} // namespace sinf_emu

// SINF_LAUNCH(grid, block, shared bytes, stream, kernel)(args...) is
// kernel<<<grid, block, shared bytes, stream>>>(args...) (common.cuh).
#define SINF_EMU_LAUNCH(grid, block, shmem, stream, ...)                                                             \
	::sinf_emu::launch((grid), (block), (shmem), (const void *)(stream), __VA_ARGS__, #__VA_ARGS__)

// ---- Built-in variables -----------------------------------------------------

#define threadIdx (::sinf_emu::current().thread_idx)
#define blockIdx (::sinf_emu::current().block_idx)
#define blockDim (::sinf_emu::current().block_dim)
#define gridDim (::sinf_emu::current().grid_dim)
#define warpSize 32

// ---- Synchronisation, warp primitives, atomics ------------------------------

static inline void __syncthreads() { ::sinf_emu::syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { ::sinf_emu::syncwarp(mask); }
static inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

static inline int sinf_emu_lane() { return ::sinf_emu::current().linear & 31; }

// Shuffles (Programming Guide, "Warp Shuffle Functions"): width is a power
// of two ≤ 32 splitting the warp into segments; a source outside the
// segment (down/up) returns the caller's own value.
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
	const int lane = sinf_emu_lane();
	const int s = (lane & ~(width - 1)) + (src & (width - 1));
	return ::sinf_emu::from_bits<T>(::sinf_emu::warp_exchange(mask, ::sinf_emu::to_bits(v), s, "__shfl_sync"));
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
	const int lane = sinf_emu_lane();
	int s = lane ^ lane_mask;
	if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
	return ::sinf_emu::from_bits<T>(::sinf_emu::warp_exchange(mask, ::sinf_emu::to_bits(v), s, "__shfl_xor_sync"));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
	const int lane = sinf_emu_lane();
	int s = lane + (int)delta;
	if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
	return ::sinf_emu::from_bits<T>(::sinf_emu::warp_exchange(mask, ::sinf_emu::to_bits(v), s, "__shfl_down_sync"));
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
	const int lane = sinf_emu_lane();
	int s = lane - (int)delta;
	if (s < 0 || (s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
	return ::sinf_emu::from_bits<T>(::sinf_emu::warp_exchange(mask, ::sinf_emu::to_bits(v), s, "__shfl_up_sync"));
}
static inline unsigned __ballot_sync(unsigned mask, int pred) { return ::sinf_emu::warp_ballot(mask, pred != 0); }
static inline int __all_sync(unsigned mask, int pred) { return ::sinf_emu::warp_ballot(mask, pred != 0) == mask; }
static inline int __any_sync(unsigned mask, int pred) { return ::sinf_emu::warp_ballot(mask, pred != 0) != 0; }

// Atomics return the old value; they are real atomics (TSan sees them as
// synchronised, as the GPU's are).
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline float atomicAdd(float *p, float v) {
	float old, sum;
	__atomic_load(p, &old, __ATOMIC_RELAXED);
	do {
		sum = old + v;
	} while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return old;
}
template <typename T> static inline T sinf_emu_atomic_max(T *p, T v) {
	T old = __atomic_load_n(p, __ATOMIC_RELAXED);
	while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
	return old;
}
static inline int atomicMax(int *p, int v) { return sinf_emu_atomic_max(p, v); }
static inline unsigned atomicMax(unsigned *p, unsigned v) { return sinf_emu_atomic_max(p, v); }

// ---- Loads, bit casts, integer intrinsics -------------------------------------

template <typename T> static inline T __ldg(const T *p) { return *p; }

static inline float __uint_as_float(unsigned int b) {
	float f;
	memcpy(&f, &b, 4);
	return f;
}
static inline unsigned int __float_as_uint(float f) {
	unsigned int b;
	memcpy(&b, &f, 4);
	return b;
}
static inline float __int_as_float(int b) { return __uint_as_float((unsigned)b); }
static inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }

// __dp4a (sm_61+): the four signed 8-bit products of a and b summed into c.
static inline int __dp4a(int a, int b, int c) {
	for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
	return c;
}

// Correctly rounded float arithmetic (the _rn intrinsics): the host's IEEE
// float operations, with contraction off (make cuda-emu passes
// -ffp-contract=off, so no other product is fused either).
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __frcp_rn(float a) { return 1.f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
// __float2int_rn: round to nearest, ties to even (the host's default
// rounding mode, which the emulator never changes).
static inline int __float2int_rn(float a) { return (int)nearbyintf(a); }

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

// ---- Half precision (cuda_fp16.h) and bfloat16 (cuda_bf16.h) -----------------

struct __half {
	unsigned short __x;
};
struct __half2 {
	__half x, y;
};
typedef __half half;
typedef __half2 half2;
struct __nv_bfloat16 {
	unsigned short __x;
};
typedef __nv_bfloat16 nv_bfloat16;

namespace sinf_emu {

// f16_to_f32 is exact (every half is a float).
static inline float f16_to_f32(unsigned short h) {
	const unsigned sign = (unsigned)(h & 0x8000u) << 16;
	const unsigned exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
	unsigned bits;
	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (man << 13); // inf, NaN (payload kept)
	} else if (exp != 0) {
		bits = sign | ((exp + 112) << 23) | (man << 13);
	} else if (man == 0) {
		bits = sign;
	} else { // subnormal: man·2⁻²⁴, normalised
		int e = -1;
		unsigned m = man;
		do {
			m <<= 1;
			e++;
		} while ((m & 0x400u) == 0);
		bits = sign | ((unsigned)(112 - e) << 23) | ((m & 0x3ffu) << 13);
	}
	return __uint_as_float(bits);
}

// f32_to_f16 rounds to nearest, ties to even (__float2half_rn), with
// overflow to infinity and gradual underflow; NaN stays NaN (quiet).
static inline unsigned short f32_to_f16(float f) {
	const unsigned x = __float_as_uint(f);
	const unsigned short sign = (unsigned short)((x >> 16) & 0x8000u);
	const unsigned ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
	if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); // ≥ 65520 rounds to inf
	if (ax >= 0x38800000u) {                                        // normal half
		const unsigned r = ax + 0xfffu + ((ax >> 13) & 1u);          // round half to even on bit 13
		return (unsigned short)(sign | ((r - 0x38000000u) >> 13));
	}
	if (ax < 0x33000000u) return sign; // below half the smallest subnormal: ±0
	// Subnormal half: value = m·2^(e-150) with the implicit bit, shifted to
	// units of 2⁻²⁴, rounded to nearest even.
	const unsigned e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
	const unsigned shift = 126 - e; // 14 … 24
	const unsigned q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
	const unsigned rq = q + (rem > half || (rem == half && (q & 1u)));
	return (unsigned short)(sign | rq);
}

// f32_to_bf16 rounds to nearest, ties to even (__float2bfloat16_rn); NaN
// stays NaN (quiet).
static inline unsigned short f32_to_bf16(float f) {
	const unsigned x = __float_as_uint(f);
	if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
	return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

} // namespace sinf_emu

static inline float __half2float(__half h) { return ::sinf_emu::f16_to_f32(h.__x); }
static inline __half __float2half(float f) { return __half{::sinf_emu::f32_to_f16(f)}; }
static inline __half __float2half_rn(float f) { return __half{::sinf_emu::f32_to_f16(f)}; }
static inline __half __ushort_as_half(unsigned short b) { return __half{b}; }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half_rn(a), __float2half_rn(b)}; }
static inline float __low2float(__half2 h) { return __half2float(h.x); }
static inline float __high2float(__half2 h) { return __half2float(h.y); }
static inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((unsigned)b.__x << 16); }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16{::sinf_emu::f32_to_bf16(f)}; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{::sinf_emu::f32_to_bf16(f)}; }

// ---- Runtime API (cuda_runtime.h), over host memory -------------------------

enum cudaError_t {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidDevicePointer = 17,
	cudaErrorInsufficientDriver = 35,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorNotReady = 600,
	cudaErrorIllegalAddress = 700,
	cudaErrorHostMemoryAlreadyRegistered = 712,
	cudaErrorHostMemoryNotRegistered = 713,
	cudaErrorLaunchFailure = 719,
	cudaErrorNotSupported = 801,
};
typedef enum cudaError_t cudaError;

enum cudaDeviceAttr {
	cudaDevAttrMultiProcessorCount = 16,
	cudaDevAttrIntegrated = 18,
	cudaDevAttrCanMapHostMemory = 19,
	cudaDevAttrManagedMemory = 83,
	cudaDevAttrPageableMemoryAccess = 88,
	cudaDevAttrPageableMemoryAccessUsesHostPageTables = 100,
	cudaDevAttrHostRegisterSupported = 99,
	cudaDevAttrHostRegisterReadOnlySupported = 113,
};

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4,
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaDeviceMapHost 0x08
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaHostRegisterIoMemory 0x04
#define cudaHostRegisterReadOnly 0x08
#define cudaMemAttachGlobal 0x01

struct cudaDeviceProp {
	char name[256];
	size_t totalGlobalMem;
	int major, minor;
	int multiProcessorCount;
	int integrated;
	int canMapHostMemory;
	int managedMemory;
};

struct sinf_emu_stream;
struct sinf_emu_event;
typedef sinf_emu_stream *cudaStream_t;
typedef sinf_emu_event *cudaEvent_t;

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaSetDeviceFlags(unsigned flags);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaMallocManaged(void **p, size_t bytes, unsigned flags = cudaMemAttachGlobal);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void *p);
cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned flags);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

// ---- cuBLAS (cublas_v2.h): cublasGemmEx in float32, by a reference product ---

enum cublasStatus_t {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_ALLOC_FAILED = 3,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_ARCH_MISMATCH = 8,
	CUBLAS_STATUS_MAPPING_ERROR = 11,
	CUBLAS_STATUS_EXECUTION_FAILED = 13,
	CUBLAS_STATUS_INTERNAL_ERROR = 14,
	CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
struct sinf_emu_blas;
typedef sinf_emu_blas *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
// cublasGemmEx: C = alpha·op(A)·op(B) + beta·C, column-major, m×n result,
// k inner; float32 data and compute only (what sinf uses).
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);
