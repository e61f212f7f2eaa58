/*
 * sinfcuda.h: the C API of libsinfcuda (the .cu files in cuda/kernels), the CUDA kernels
 * of sinf's forward pass. The Go package cuda calls it through cgo.
 *
 * Conventions
 *  - Device addresses are passed as sinf_dptr (a 64-bit integer), never as C
 *    pointers, so Go never holds them as pointers; 0 means "none".
 *  - Weights are row-major [rows, cols] matrices of dtype F32, F16, BF16 or a
 *    GGML block dtype, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (the codes of
 *    format.DType below; a block row is cols/32 blocks, cols/256 for the
 *    K-quants, spec/sinf.md §5.2–5.3), read in place; activations, the KV
 *    cache and every accumulation are float32. Decode products over block
 *    rows quantize x to int8 blocks of 32 (as the CPU's MatVec does) and
 *    multiply in integers (__dp4a).
 *  - Kernel launchers are asynchronous on the context's stream; they return 0
 *    or a CUDA error code (launch errors only: execution errors surface at
 *    sinf_sync or a copy to the host). sinf_error_string names a code.
 *  - Host code may call one context from one thread at a time.
 *
 * This header includes only standard C headers, so cgo can compile the Go
 * side (go vet, go build) without the CUDA toolkit; linking needs
 * cuda/build/libsinfcuda.a, libcudart and libcublas (make cuda).
 */
#ifndef SINFCUDA_H
#define SINFCUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t sinf_dptr;

enum {
	SINF_F32 = 1,
	SINF_F16 = 2,
	SINF_BF16 = 3,
	SINF_Q8_0 = 6,
	SINF_Q4_0 = 7,
	SINF_Q4_K = 8,
	SINF_Q5_K = 9,
	SINF_Q6_K = 10,
	SINF_Q5_0 = 11,
	SINF_Q5_1 = 12,
	SINF_SK2 = 13 /* only for sinf_sketch_weights */
};

/* A weight matrix [rows, cols] of dtype at device address data. */
typedef struct {
	sinf_dptr data;
	int32_t dtype;
	int32_t rows, cols;
} sinf_mat;

typedef struct {
	char name[256];
	int major, minor;               /* compute capability */
	int integrated;                 /* cudaDevAttrIntegrated (Jetson: 1) */
	int host_register_supported;    /* cudaDevAttrHostRegisterSupported */
	int host_register_readonly;     /* cudaDevAttrHostRegisterReadOnlySupported */
	int can_map_host;               /* cudaDevAttrCanMapHostMemory */
	int pageable_uses_host_pt;      /* cudaDevAttrPageableMemoryAccessUsesHostPageTables */
	int managed_memory;             /* cudaDevAttrManagedMemory */
	int sm_count;
	size_t total_mem;
	int runtime_version, driver_version;
} sinf_device_info;

typedef struct sinf_ctx sinf_ctx;

/* Errors. */
const char *sinf_error_string(int code);
/* sinf_device_count stores the number of CUDA devices; it returns the error of
 * cudaGetDeviceCount (no driver, insufficient driver, no device). */
int sinf_device_count(int *n);
int sinf_versions(int *runtime_version, int *driver_version);

/* Contexts: a device, a stream, a cuBLAS handle and scratch memory. */
int sinf_ctx_create(int device, sinf_ctx **out, sinf_device_info *info);
void sinf_ctx_destroy(sinf_ctx *ctx);
int sinf_sync(sinf_ctx *ctx);

/* Memory. sinf_malloc and sinf_malloc_managed return zeroed memory. */
int sinf_malloc(sinf_ctx *ctx, size_t bytes, sinf_dptr *out);
int sinf_malloc_managed(sinf_ctx *ctx, size_t bytes, sinf_dptr *out);
int sinf_free(sinf_ctx *ctx, sinf_dptr p);
/* sinf_host_register page-locks the host range [host, host+bytes) (a
 * page-aligned address, passed as an integer) for the device
 * (cudaHostRegisterMapped, plus cudaHostRegisterReadOnly when readonly) and
 * stores its device address. */
int sinf_host_register(sinf_ctx *ctx, uintptr_t host, size_t bytes, int readonly, sinf_dptr *dev);
int sinf_host_unregister(sinf_ctx *ctx, uintptr_t host);
/* Copies: host to device (synchronous; host memory may be pageable or a
 * mapped file), device to host (synchronous: waits for the stream), device to
 * device and memset (asynchronous). */
int sinf_upload(sinf_ctx *ctx, sinf_dptr dst, const void *src, size_t bytes);
int sinf_download(sinf_ctx *ctx, void *dst, sinf_dptr src, size_t bytes);
int sinf_copy(sinf_ctx *ctx, sinf_dptr dst, sinf_dptr src, size_t bytes);
int sinf_memset0(sinf_ctx *ctx, sinf_dptr p, size_t bytes);

/* Kernels. Shapes in the comments; T tokens are rows of row-major buffers. */

/* dst[t, :] = float(w[ids[t], :]) for t < T; ids == 0: the single id0. */
int sinf_embed(sinf_ctx *ctx, sinf_dptr dst, sinf_mat w, sinf_dptr ids, int id0, int T);
/* dst[t] = x[t]·w/sqrt(mean(x[t]²)+eps), x and dst [T, H] (HF LlamaRMSNorm). */
int sinf_rmsnorm(sinf_ctx *ctx, sinf_dptr dst, sinf_dptr x, sinf_dptr w, int T, int H, double eps);
/* dst[j] (+)= W[r_j, :]·x (+ bias[r_j]) for j < n, r_j = rows[j] (rows == 0:
 * r_j = j): the dense and the gathered matrix-vector product. */
int sinf_matvec(sinf_ctx *ctx, sinf_dptr dst, sinf_mat w, sinf_dptr rows, int n, sinf_dptr x, sinf_dptr bias,
                int accumulate);
/* dst[j] = silu(G[r_j]·x)·(U[r_j]·x) for j < n (fused SwiGLU over gathered
 * gate/up rows; rows == 0: every row j < n). */
int sinf_gate_up(sinf_ctx *ctx, sinf_dptr dst, sinf_mat gate, sinf_mat up, sinf_dptr rows, int n, sinf_dptr x);
/* dst[c] (+)= Σ_j a[j]·W[r_j, c]: the neuron-row accumulation of the
 * transposed down_proj [kept, hidden] (rows == 0: r_j = j). */
int sinf_add_rows(sinf_ctx *ctx, sinf_dptr dst, sinf_mat w, sinf_dptr rows, int n, sinf_dptr a, int accumulate);
/* dst[t, r] (+)= Σ_c x[t, c]·W[r, c] (+ bias[r]) for t < T: prefill
 * projections, dst [T, rows], x [T, cols]. */
int sinf_gemm(sinf_ctx *ctx, sinf_dptr dst, sinf_mat w, sinf_dptr x, int T, sinf_dptr bias, int accumulate);
/* dst[t, c] (+)= Σ_k a[t, k]·W[k, c] for t < T: the prefill transposed
 * down_proj, dst [T, cols], a [T, rows]. */
int sinf_gemm_rows_t(sinf_ctx *ctx, sinf_dptr dst, sinf_mat w, sinf_dptr a, int T, int accumulate);
/* g[i] = silu(g[i])·u[i] for i < n. */
int sinf_silu_mul(sinf_ctx *ctx, sinf_dptr g, sinf_dptr u, int n);
/* HF rotate-half RoPE in place on x [T, stride], heads of hd at h·hd, token t
 * at position pos0+t; cos, sin [positions, hd/2]. */
int sinf_rope(sinf_ctx *ctx, sinf_dptr x, sinf_dptr cos, sinf_dptr sin, int pos0, int T, int heads, int hd,
              int stride);
/* Causal GQA attention of T query tokens at positions pos0.. over the KV
 * cache kc, vc [positions, kv_heads·hd] (positions ≤ pos0+t seen by token t):
 * out [T, heads·hd] = softmax(q·kᵀ/sqrt(hd))·v. */
int sinf_attention(sinf_ctx *ctx, sinf_dptr out, sinf_dptr q, sinf_dptr kc, sinf_dptr vc, int pos0, int T,
                   int heads, int kv_heads, int hd);
/* out[0] (int32) = the index of the largest x[i], i < n (lowest on ties). */
int sinf_argmax(sinf_ctx *ctx, sinf_dptr out, sinf_dptr x, int n);
/* Prefill dynamic selection (runtime.Counter): for each token t < T of act
 * [T, kept], P = the number of positive act[t, j], and the round(alpha·P)
 * largest of them (ties: lower j) add 1 to counts[j] (int32 [kept]). */
int sinf_count_top(sinf_ctx *ctx, sinf_dptr counts, sinf_dptr act, int T, int kept, double alpha);
/* runtime.ActiveSet: rows [0, static_rows) and then the target-static_rows
 * rows j ≥ static_rows of highest counts[j] (ties: lower j); writes them in
 * ascending order to rows (int32 [target]). */
int sinf_select_top(sinf_ctx *ctx, sinf_dptr rows, sinf_dptr counts, int kept, int static_rows, int target);

/* GateFirst's per-token key (runtime.GateScores): keys[j] (uint32 [n]) =
 * the bits of the float |silu(g[j])·w[j]| (sinf_silu_mul's arithmetic);
 * non-negative floats order as their bits, so sinf_select_top (static 0)
 * then picks the rows with the largest keys. */
int sinf_gate_score(sinf_ctx *ctx, sinf_dptr keys, sinf_dptr g, sinf_dptr w, int n);
/* GateFirst's row weights on a layer with an up_proj sketch
 * (runtime.SketchWeights): w[j] = |(s[j]·x)·down[j]| for j < n, s an SK2
 * matrix [n, cols] (spec §5.2; cols a multiple of 32), its products over x
 * quantized to int8 blocks as sinf_matvec's (Σ (2q − 3)·q_x in integers per
 * block, times d_w·d_x); x float [cols], w and down float [n]. SINF_EINVAL
 * for another dtype or a partial block. */
int sinf_sketch_weights(sinf_ctx *ctx, sinf_dptr w, sinf_mat s, sinf_dptr x, sinf_dptr down, int n);
/* GateFirst's prefill calibration (runtime.GateCalib.Add): for j < kept and
 * t < T in token order, where u[t, j] != 0: A[j] += |a[t, j]| and S[j] +=
 * |a[t, j]|/|u[t, j]| in double; a, u [T, kept] float, A, S double [kept]. */
int sinf_gate_calib(sinf_ctx *ctx, sinf_dptr A, sinf_dptr S, sinf_dptr a, sinf_dptr u, int T, int kept);
/* runtime.GateWeights: w[j] = (float)(A[j]/S[j]·down[j]) where S[j] > 0,
 * else (float)(up[j]·down[j]) in double; w, up, down float [n]. */
int sinf_gate_weights(sinf_ctx *ctx, sinf_dptr w, sinf_dptr A, sinf_dptr S, sinf_dptr up, sinf_dptr down, int n);
/* h[j] = silu(g[rows[j]])·u[j] for j < n: GateFirst's SwiGLU over the rows
 * picked, g the gate of every stored row, u the gathered up rows. */
int sinf_gather_silu_mul(sinf_ctx *ctx, sinf_dptr h, sinf_dptr g, sinf_dptr rows, sinf_dptr u, int n);

/* Benchmarks: the device-to-device copy bandwidth (bytes read + written per
 * second, the best of iters copies of bytes), and the seconds the stream
 * takes between two marks. */
int sinf_copy_bandwidth(sinf_ctx *ctx, size_t bytes, int iters, double *bytes_per_s);
int sinf_timer_start(sinf_ctx *ctx);
int sinf_timer_stop(sinf_ctx *ctx, double *seconds);

#ifdef __cplusplus
}
#endif

#endif
