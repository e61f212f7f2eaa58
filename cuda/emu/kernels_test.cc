// kernels_test.cc: every launcher of sinfcuda.h on the CPU emulation, for
// the sanitizers (make cuda-emu runs it under ThreadSanitizer, where a
// missing __syncthreads or a race between a block's threads is a report
// and exit status 66, and under AddressSanitizer + UBSan, where an
// out-of-bounds access is). The values are checked by the Go tests
// (cuda/gpu_test.go against the CPU kernels); this driver checks only what
// it can in a few lines: argmax, the selections, RMSNorm, the dot products
// of matvec, and the half/bfloat16 conversions of cuda_emu.h, exhaustively
// against a nearest-value reference; and the emulator's own primitives
// (shuffles with widths, ballot, atomics, indices of 3-D blocks and grids,
// a barrier with exited threads, a bad launch shape, a deadlock that must
// abort) against the Programming Guide's definitions.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include "../sinfcuda.h"
#include "cuda_emu.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                                             \
	do {                                                                                                           \
		if (!(cond)) {                                                                                             \
			fprintf(stderr, "kernels_test:%d: ", __LINE__);                                                         \
			fprintf(stderr, __VA_ARGS__);                                                                          \
			fprintf(stderr, "\n");                                                                                 \
			failures++;                                                                                            \
		}                                                                                                          \
	} while (0)

#define RC(call) CHECK((call) == 0, "%s failed", #call)

static sinf_ctx *ctx;
static std::mt19937 rng(1);

static sinf_dptr dev(const void *src, size_t bytes) {
	sinf_dptr p = 0;
	RC(sinf_malloc(ctx, bytes, &p));
	if (src) RC(sinf_upload(ctx, p, src, bytes));
	return p;
}

static std::vector<float> randf(size_t n, float scale = 1.f) {
	std::normal_distribution<float> d(0.f, scale);
	std::vector<float> v(n);
	for (auto &x : v) x = d(rng);
	return v;
}

static std::vector<float> get(sinf_dptr p, size_t n) {
	std::vector<float> v(n);
	RC(sinf_download(ctx, v.data(), p, n * 4));
	return v;
}

// quantize_block stores 32 values as one Q8_0 or Q4_0 block (GGML's
// reference rounding) at dst and replaces them by their dequantized values.
static void quantize_block(int dtype, float *v, uint8_t *dst) {
	float amax = 0, mx = 0;
	for (int i = 0; i < 32; i++)
		if (fabsf(v[i]) > amax) amax = fabsf(v[i]), mx = v[i];
	const float d = dtype == SINF_Q8_0 ? amax / 127 : mx / -8;
	const float id = d != 0 ? 1 / d : 0;
	const uint16_t dh = sinf_emu::f32_to_f16(d);
	const float dd = sinf_emu::f16_to_f32(dh);
	memcpy(dst, &dh, 2);
	int q[32];
	for (int i = 0; i < 32; i++)
		q[i] = dtype == SINF_Q8_0 ? (int)nearbyintf(v[i] * id) : std::min(15, (int)(v[i] * id + 8.5f));
	for (int i = 0; i < 32; i++) {
		if (dtype == SINF_Q8_0) {
			dst[2 + i] = (uint8_t)(int8_t)q[i];
			v[i] = (float)q[i] * dd;
		} else {
			if (i < 16) dst[2 + i] = (uint8_t)(q[i] | q[i + 16] << 4);
			v[i] = (float)(q[i] - 8) * dd;
		}
	}
}

static bool is_block(int dtype) { return dtype == SINF_Q8_0 || dtype == SINF_Q4_0; }

// weights returns rows×cols random weights of dtype (F16/BF16 rounded from
// float, Q8_0/Q4_0 quantized; cols a multiple of 32 for those) on the
// device, and their float values.
static sinf_mat weights(int dtype, int rows, int cols, std::vector<float> &vals) {
	vals = randf((size_t)rows * cols, 0.5f);
	if (is_block(dtype)) {
		const size_t bb = dtype == SINF_Q8_0 ? 34 : 18, nb = vals.size() / 32;
		std::vector<uint8_t> b(nb * bb);
		for (size_t k = 0; k < nb; k++) quantize_block(dtype, &vals[32 * k], &b[bb * k]);
		return sinf_mat{dev(b.data(), b.size()), dtype, rows, cols};
	}
	std::vector<uint16_t> h(vals.size());
	const void *src = vals.data();
	size_t es = 4;
	if (dtype != SINF_F32) {
		for (size_t i = 0; i < vals.size(); i++) {
			h[i] = dtype == SINF_F16 ? sinf_emu::f32_to_f16(vals[i]) : sinf_emu::f32_to_bf16(vals[i]);
			vals[i] = dtype == SINF_F16 ? sinf_emu::f16_to_f32(h[i]) : __uint_as_float((unsigned)h[i] << 16);
		}
		src = h.data();
		es = 2;
	}
	return sinf_mat{dev(src, vals.size() * es), dtype, rows, cols};
}

// decode_x returns x as the products over block rows (decode and prefill)
// see it: quantized to int8 blocks (d = max|x|/127, q = x·(1/d) to nearest
// even), dequantized; other dtypes see x as it is.
static std::vector<float> decode_x(int dtype, std::vector<float> x) {
	if (!is_block(dtype)) return x;
	for (size_t b = 0; b < x.size(); b += 32) {
		float amax = 0;
		for (int i = 0; i < 32; i++) amax = std::max(amax, fabsf(x[b + i]));
		const float d = amax / 127.f, id = d != 0 ? 1.f / d : 0.f;
		for (int i = 0; i < 32; i++) x[b + i] = nearbyintf(x[b + i] * id) * d;
	}
	return x;
}

static bool close(float a, float b, float tol) { return fabsf(a - b) <= tol * (1.f + fabsf(b)); }

static void test_matvec_family(int dtype, int rows, int cols) {
	std::vector<float> wv, gv, uv;
	sinf_mat w = weights(dtype, rows, cols, wv);
	sinf_mat g = weights(dtype, rows, cols, gv);
	sinf_mat u = weights(dtype, rows, cols, uv);
	std::vector<float> x = randf(cols);
	sinf_dptr xd = dev(x.data(), cols * 4), out = dev(nullptr, rows * 4), out2 = dev(nullptr, cols * 4);
	std::vector<int32_t> sel;
	for (int r = rows - 1; r >= 0; r -= 3) sel.push_back(r);
	sinf_dptr seld = dev(sel.data(), sel.size() * 4);
	RC(sinf_matvec(ctx, out, w, 0, rows, xd, 0, 0));
	std::vector<float> y = get(out, rows), xq = decode_x(dtype, x);
	for (int r = 0; r < rows; r++) {
		double s = 0;
		for (int c = 0; c < cols; c++) s += (double)wv[(size_t)r * cols + c] * xq[c];
		CHECK(close(y[r], (float)s, 1e-4f), "matvec dtype %d row %d: %g, want %g", dtype, r, y[r], s);
	}
	RC(sinf_matvec(ctx, out, w, seld, (int)sel.size(), xd, 0, 1));
	RC(sinf_gate_up(ctx, out, g, u, seld, (int)sel.size(), xd));
	std::vector<float> a = randf(rows);
	sinf_dptr ad = dev(a.data(), rows * 4);
	RC(sinf_add_rows(ctx, out2, w, 0, rows, ad, 0));
	RC(sinf_add_rows(ctx, out2, w, seld, (int)sel.size(), ad, 1));
	std::vector<int32_t> ids = {0, rows - 1, rows / 2};
	sinf_dptr idd = dev(ids.data(), ids.size() * 4), emb = dev(nullptr, ids.size() * cols * 4);
	RC(sinf_embed(ctx, emb, w, idd, 0, (int)ids.size()));
	RC(sinf_embed(ctx, emb, w, 0, 1, 1));
	// Prefill products: T tokens of x, and the transposed product.
	const int T = 5;
	std::vector<float> xt = randf((size_t)T * cols), at = randf((size_t)T * rows);
	sinf_dptr xtd = dev(xt.data(), xt.size() * 4), atd = dev(at.data(), at.size() * 4);
	sinf_dptr c1 = dev(nullptr, (size_t)T * rows * 4), c2 = dev(nullptr, (size_t)T * cols * 4);
	std::vector<float> bias = randf(rows);
	sinf_dptr bd = dev(bias.data(), rows * 4);
	RC(sinf_gemm(ctx, c1, w, xtd, T, bd, 0));
	std::vector<float> c = get(c1, (size_t)T * rows), xtq = decode_x(dtype, xt);
	for (int t = 0; t < T; t++)
		for (int r = 0; r < rows; r++) {
			double s = bias[r];
			for (int k = 0; k < cols; k++) s += (double)xtq[(size_t)t * cols + k] * wv[(size_t)r * cols + k];
			CHECK(close(c[(size_t)t * rows + r], (float)s, 1e-4f), "gemm dtype %d [%d,%d]", dtype, t, r);
		}
	RC(sinf_gemm_rows_t(ctx, c2, w, atd, T, 1));
	for (sinf_dptr p : {w.data, g.data, u.data, xd, out, out2, seld, ad, idd, emb, xtd, atd, c1, c2, bd})
		RC(sinf_free(ctx, p));
}

static void test_elementwise() {
	const int T = 3, H = 200, heads = 4, kvh = 2, hd = 16, P = 40;
	std::vector<float> x = randf((size_t)T * H), w = randf(H);
	sinf_dptr xd = dev(x.data(), x.size() * 4), wd = dev(w.data(), H * 4), yd = dev(nullptr, x.size() * 4);
	RC(sinf_rmsnorm(ctx, yd, xd, wd, T, H, 1e-5));
	std::vector<float> y = get(yd, x.size());
	for (int t = 0; t < T; t++) {
		double ss = 0;
		for (int i = 0; i < H; i++) ss += (double)x[t * H + i] * x[t * H + i];
		const double r = 1 / sqrt(ss / H + 1e-5);
		for (int i = 0; i < H; i++)
			CHECK(close(y[t * H + i], (float)(w[i] * x[t * H + i] * r), 1e-5f), "rmsnorm [%d,%d]", t, i);
	}
	RC(sinf_silu_mul(ctx, yd, xd, (int)x.size()));
	// RoPE and attention over a KV cache of P positions.
	std::vector<float> cs = randf((size_t)P * hd / 2), sn = randf((size_t)P * hd / 2);
	sinf_dptr cd = dev(cs.data(), cs.size() * 4), sd = dev(sn.data(), sn.size() * 4);
	std::vector<float> q = randf((size_t)T * heads * hd), kc = randf((size_t)P * kvh * hd), vc = randf(kc.size());
	sinf_dptr qd = dev(q.data(), q.size() * 4), kd = dev(kc.data(), kc.size() * 4), vd = dev(vc.data(), vc.size() * 4);
	sinf_dptr od = dev(nullptr, q.size() * 4);
	RC(sinf_rope(ctx, qd, cd, sd, 7, T, heads, hd, heads * hd));
	RC(sinf_attention(ctx, od, qd, kd, vd, 0, T, heads, kvh, hd));
	RC(sinf_attention(ctx, od, qd, kd, vd, P - T, T, heads, kvh, hd));
	// Argmax with a tie: the lowest index wins.
	std::vector<float> v = randf(3000);
	v[1234] = 9.f;
	v[2345] = 9.f;
	sinf_dptr vd2 = dev(v.data(), v.size() * 4), id = dev(nullptr, 4);
	RC(sinf_argmax(ctx, id, vd2, (int)v.size()));
	int32_t best = -1;
	RC(sinf_download(ctx, &best, id, 4));
	CHECK(best == 1234, "argmax = %d, want 1234", best);
	for (sinf_dptr p : {xd, wd, yd, cd, sd, qd, kd, vd, od, vd2, id}) RC(sinf_free(ctx, p));
}

static void test_select() {
	const int T = 4, kept = 2500, stat = 100, target = 700;
	std::vector<float> act = randf((size_t)T * kept);
	sinf_dptr ad = dev(act.data(), act.size() * 4), cd = dev(nullptr, kept * 4), rd = dev(nullptr, target * 4);
	RC(sinf_count_top(ctx, cd, ad, T, kept, 0.3));
	std::vector<int32_t> counts(kept);
	RC(sinf_download(ctx, counts.data(), cd, kept * 4));
	long total = 0;
	for (int c : counts) total += c;
	long want = 0;
	for (int t = 0; t < T; t++) {
		int pos = 0;
		for (int j = 0; j < kept; j++) pos += act[(size_t)t * kept + j] > 0;
		want += lround(0.3 * pos);
	}
	CHECK(total == want, "count_top counted %ld, want %ld", total, want);
	RC(sinf_select_top(ctx, rd, cd, kept, stat, target));
	std::vector<int32_t> rows(target);
	RC(sinf_download(ctx, rows.data(), rd, target * 4));
	for (int i = 0; i < target; i++) {
		CHECK(i >= stat || rows[i] == i, "select_top row %d = %d", i, rows[i]);
		CHECK(i == 0 || rows[i] > rows[i - 1], "select_top rows not ascending at %d", i);
	}
	// GateFirst: calibration, weights, scores, SwiGLU over the rows picked.
	std::vector<float> u = randf((size_t)T * kept);
	sinf_dptr ud = dev(u.data(), u.size() * 4), A = dev(nullptr, kept * 8), S = dev(nullptr, kept * 8);
	sinf_dptr wd = dev(nullptr, kept * 4), keys = dev(nullptr, kept * 4), h = dev(nullptr, target * 4);
	RC(sinf_gate_calib(ctx, A, S, ad, ud, T, kept));
	RC(sinf_gate_weights(ctx, wd, A, S, ud, ad, kept));
	RC(sinf_gate_score(ctx, keys, ad, wd, kept));
	RC(sinf_select_top(ctx, rd, keys, kept, 0, target));
	RC(sinf_gather_silu_mul(ctx, h, ad, rd, ud, target));
	for (sinf_dptr p : {ad, cd, rd, ud, A, S, wd, keys, h}) RC(sinf_free(ctx, p));
}

// nearest returns the 16-bit value whose decoding (dec, over the finite
// values sorted in ascending order) is nearest to f, ties to the even bit
// pattern: the definition of round-to-nearest-even.
static uint16_t nearest(const std::vector<std::pair<double, uint16_t>> &sorted, float f) {
	const double x = f;
	size_t lo = 0, hi = sorted.size() - 1;
	while (hi - lo > 1) {
		const size_t mid = (lo + hi) / 2;
		(sorted[mid].first <= x ? lo : hi) = mid;
	}
	const double dl = x - sorted[lo].first, dh = sorted[hi].first - x;
	if (dl < dh) return sorted[lo].second;
	if (dh < dl) return sorted[hi].second;
	return (sorted[lo].second & 1) ? sorted[hi].second : sorted[lo].second;
}

static void test_conversions() {
	// Every half and every bfloat16 decodes to the float it denotes and
	// encodes back to itself.
	std::vector<std::pair<double, uint16_t>> halves, bfs;
	for (unsigned b = 0; b < 65536; b++) {
		const float f = sinf_emu::f16_to_f32((uint16_t)b);
		const unsigned e = (b >> 10) & 31, m = b & 1023;
		const double want = e == 31 ? (m ? NAN : INFINITY) : ldexp(e ? 1024 + m : m, (e ? (int)e : 1) - 25);
		if (e != 31) {
			CHECK(f == (float)((b & 0x8000) ? -want : want), "half %04x decodes to %g", b, f);
			CHECK(sinf_emu::f32_to_f16(f) == b, "half %04x does not round-trip", b);
			if (!(b & 0x8000)) halves.push_back({want, (uint16_t)b});
		} else {
			CHECK(m ? isnan(f) : isinf(f), "half %04x decodes to %g", b, f);
		}
		const float g = __uint_as_float(b << 16);
		if (!isnan(g)) {
			CHECK(sinf_emu::f32_to_bf16(g) == b, "bf16 %04x does not round-trip", b);
			if (!(b & 0x8000) && !isinf(g)) bfs.push_back({(double)g, (uint16_t)b});
		}
	}
	std::sort(halves.begin(), halves.end());
	std::sort(bfs.begin(), bfs.end());
	// Random floats (and the midpoints between halves) round to the nearest,
	// ties to even; beyond the largest half by half an ulp, to infinity.
	std::uniform_int_distribution<uint32_t> bits(0, 0x7f7fffffu);
	std::vector<float> probes;
	for (int i = 0; i < 200000; i++) probes.push_back(__uint_as_float(bits(rng)));
	for (size_t i = 0; i + 1 < halves.size(); i++) probes.push_back((float)((halves[i].first + halves[i + 1].first) / 2));
	for (int i = 0; i < 20000; i++) probes.push_back(std::uniform_real_distribution<float>(0, 70000)(rng));
	for (float f : probes) {
		const uint16_t h = sinf_emu::f32_to_f16(f);
		const uint16_t want = f >= 65520.f ? 0x7c00 : nearest(halves, f);
		CHECK(h == want, "f32_to_f16(%.9g) = %04x, want %04x", f, h, want);
		CHECK(sinf_emu::f32_to_f16(-f) == (want | 0x8000), "f32_to_f16(-%.9g)", f);
		const uint16_t b = sinf_emu::f32_to_bf16(f);
		const double top = bfs.back().first, ulp = top - bfs[bfs.size() - 2].first;
		const uint16_t wantb = (double)f >= top + ulp / 2 ? 0x7f80 : nearest(bfs, f);
		CHECK(b == wantb, "f32_to_bf16(%.9g) = %04x, want %04x", f, b, wantb);
	}
	CHECK(isnan(sinf_emu::f16_to_f32(sinf_emu::f32_to_f16(NAN))), "NaN → half is not NaN");
	CHECK(sinf_emu::f32_to_bf16(NAN) >> 7 == 0xff, "NaN → bf16 is not NaN");
}

// ---- The emulator's own primitives, against the Programming Guide ----------

// primitives_kernel: per thread, the results of each warp primitive and the
// thread's indices, in out[block][thread][8].
__global__ void primitives_kernel(int *out, unsigned *counter) {
	const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	const int n = blockDim.x * blockDim.y * blockDim.z;
	const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
	int *o = out + ((size_t)block * n + tid) * 8;
	const int lane = tid & 31;
	o[0] = __shfl_xor_sync(0xffffffffu, 100 + lane, 5);
	o[1] = __shfl_sync(0xffffffffu, 100 + lane, 3, 16);
	o[2] = __shfl_down_sync(0xffffffffu, 100 + lane, 4, 16);
	o[3] = __shfl_up_sync(0xffffffffu, 100 + lane, 2);
	o[4] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
	atomicAdd(counter, 1u);
	__shared__ int stage[64];
	stage[tid] = tid * 7;
	__syncthreads();
	o[5] = stage[n - 1 - tid]; // written by another warp before the barrier
	o[6] = (int)(threadIdx.x | threadIdx.y << 8 | threadIdx.z << 16);
	o[7] = (int)(blockIdx.x | blockIdx.y << 8 | blockIdx.z << 16);
}

// exit_early_kernel: half the block returns before the barrier; the rest
// must still pass it (a barrier counts the threads that have not exited).
__global__ void exit_early_kernel(int *out) {
	__shared__ int v[64];
	if (threadIdx.x >= 32) return;
	v[threadIdx.x] = (int)threadIdx.x;
	__syncthreads();
	out[threadIdx.x] = v[31 - threadIdx.x];
}

// divergent_kernel: half of warp 1 waits at a full-warp shuffle while the
// rest of the block waits at the barrier: neither can complete (undefined
// on a GPU, where it hangs or corrupts), and the emulator must abort.
__global__ void divergent_kernel(int *out) {
	if (threadIdx.x >= 32 && threadIdx.x < 48)
		out[0] = __shfl_xor_sync(0xffffffffu, 1, 1);
	else
		__syncthreads();
}

static void test_primitives() {
	const dim3 grid(2, 3, 1), block(16, 2, 2);
	const int nb = 6, nt = 64;
	std::vector<int> out((size_t)nb * nt * 8, -1);
	unsigned counter = 0;
	SINF_EMU_LAUNCH(grid, block, 0, 0, primitives_kernel)(out.data(), &counter);
	CHECK(counter == (unsigned)(nb * nt), "atomicAdd counted %u, want %d", counter, nb * nt);
	for (int b = 0; b < nb; b++)
		for (int t = 0; t < nt; t++) {
			const int *o = &out[((size_t)b * nt + t) * 8];
			const int lane = t & 31, seg = lane & ~15;
			unsigned ballot = 0;
			for (int l = 0; l < 32; l++) ballot |= (l % 3 == 0 ? 1u : 0u) << l;
			CHECK(o[0] == 100 + (lane ^ 5), "shfl_xor lane %d: %d", lane, o[0]);
			CHECK(o[1] == 100 + seg + 3, "shfl width 16 lane %d: %d", lane, o[1]);
			CHECK(o[2] == 100 + ((lane & 15) + 4 < 16 ? lane + 4 : lane), "shfl_down lane %d: %d", lane, o[2]);
			CHECK(o[3] == 100 + (lane >= 2 ? lane - 2 : lane), "shfl_up lane %d: %d", lane, o[3]);
			CHECK((unsigned)o[4] == ballot, "ballot lane %d: %#x", lane, o[4]);
			CHECK(o[5] == (nt - 1 - t) * 7, "shared after the barrier, thread %d: %d", t, o[5]);
			CHECK(o[6] == ((t % 16) | ((t / 16) % 2) << 8 | (t / 32) << 16), "threadIdx of %d: %#x", t, o[6]);
			CHECK(o[7] == ((b % 2) | (b / 2) << 8), "blockIdx of %d: %#x", b, o[7]);
		}
	std::vector<int> e(32, -1);
	SINF_EMU_LAUNCH(1, 64, 0, 0, exit_early_kernel)(e.data());
	for (int i = 0; i < 32; i++) CHECK(e[i] == 31 - i, "exit_early %d: %d", i, e[i]);
	// A bad shape is a launch error, as on the GPU.
	SINF_EMU_LAUNCH(1, 2048, 0, 0, exit_early_kernel)(e.data());
	CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block launched");
#ifndef __SANITIZE_THREAD__ // TSan's state in a forked child is its own
	// The divergent barrier aborts (in a child process).
	fflush(stderr);
	const pid_t pid = fork();
	if (pid == 0) {
		if (!getenv("SINF_EMU_SHOW_ABORT")) freopen("/dev/null", "w", stderr);
		int x = 0;
		SINF_EMU_LAUNCH(1, 64, 0, 0, divergent_kernel)(&x);
		_exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "a divergent __syncthreads did not abort (status %#x)",
	      status);
#endif
}

int main() {
	sinf_device_info info;
	if (sinf_ctx_create(0, &ctx, &info) != 0) {
		fprintf(stderr, "kernels_test: no emulated device\n");
		return 1;
	}
	for (int dtype : {SINF_F32, SINF_F16, SINF_BF16}) {
		test_matvec_family(dtype, 70, 96);  // vector loads, several add_rows splits
		test_matvec_family(dtype, 33, 100); // scalar loads (rows not 16-byte multiples)
	}
	for (int dtype : {SINF_Q8_0, SINF_Q4_0}) {
		test_matvec_family(dtype, 70, 96);  // three blocks a row
		test_matvec_family(dtype, 33, 1088); // 34 blocks: lanes take two
	}
	test_elementwise();
	test_select();
	test_conversions();
	test_primitives();
	sinf_ctx_destroy(ctx);
	if (failures) {
		fprintf(stderr, "kernels_test: %d failures\n", failures);
		return 1;
	}
	printf("kernels_test: every launcher ran on the emulator (%s), checks passed\n", info.name);
	return 0;
}
