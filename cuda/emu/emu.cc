// emu.cc: the launcher, the fiber scheduler and the runtime/cuBLAS calls of
// the CPU emulation (cuda_emu.h). Each host thread that launches kernels has
// its own pool of fibers (one per CUDA thread of the largest block it ran);
// a block's fibers run in thread order, each until it must wait (a barrier
// or a warp primitive) or exits.
#include "cuda_emu.h"

#include <stdlib.h>
#include <sys/mman.h>

#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define SINF_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define SINF_EMU_TSAN 1
extern "C" {
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
}
#define SINF_TSAN_NO_SYNC 1u // __tsan_switch_to_fiber_no_sync
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace sinf_emu {

thread_local std::atomic<const Thread *> tls_current{nullptr};

namespace {

// ---- Context switch -------------------------------------------------------------

#if defined(__x86_64__)
// sinf_emu_switch saves the callee-saved registers and the stack pointer of
// the running context in *save and resumes the context whose stack pointer is
// to; sinf_emu_trampoline starts a fiber (its Fiber* in rbx) in fiber_entry.
extern "C" void sinf_emu_switch(void **save, void *to);
extern "C" void sinf_emu_fiber_entry(void *fiber);
asm(R"(
	.text
	.globl sinf_emu_switch
	.type sinf_emu_switch,@function
sinf_emu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size sinf_emu_switch, .-sinf_emu_switch
	.globl sinf_emu_trampoline
	.type sinf_emu_trampoline,@function
sinf_emu_trampoline:
	movq %rbx, %rdi
	call sinf_emu_fiber_entry@PLT
	ud2
	.size sinf_emu_trampoline, .-sinf_emu_trampoline
)");
extern "C" void sinf_emu_trampoline();
#endif

constexpr size_t kStackBytes = 256 * 1024;
constexpr int kMaxThreads = 1024;

enum State { kRunnable, kAtBarrier, kAtWarp, kDone };

// relaxed loads and stores: the fibers of a host thread never run at once,
// but ThreadSanitizer treats each as a thread; the emulator's bookkeeping is
// atomic so that only the kernels' own accesses can race.
template <typename T> T ld(const T &v) { return __atomic_load_n(&v, __ATOMIC_RELAXED); }
template <typename T> void st(T &v, T x) { __atomic_store_n(&v, x, __ATOMIC_RELAXED); }

struct Worker;

struct Fiber {
	Thread t;
	Worker *w;
	char *stack;
#if defined(__x86_64__)
	void *sp;
#else
	ucontext_t uc;
#endif
	int state;
	// The pending warp operation: what this lane offers and asks for.
	uint64_t offer, result;
	int src;
	int pred;
#ifdef SINF_EMU_TSAN
	void *tsan;
#endif
#ifdef SINF_EMU_ASAN
	void *fake_stack;
#endif
};

enum WarpOp { kShuffle = 1, kBallot, kSyncwarp };

struct Warp {
	unsigned mask;    // of the pending operation
	unsigned arrived; // lanes at it
	unsigned exited;  // lanes that returned (or do not exist)
	int op;
	const char *what;
	int sync; // __syncwarp's TSan sync object (its address)
};

// Worker is one host thread's emulator state.
struct Worker {
	std::vector<Fiber *> fibers;
	const std::function<void()> *body = nullptr;
	const char *kernel = "";
	int n = 0;          // threads of the running block
	int live = 0;       // not yet exited
	int at_barrier = 0; // waiting at __syncthreads
	int barrier;        // __syncthreads' TSan sync object (its address)
	std::vector<Warp> warps;
	Fiber *cur = nullptr;
#if defined(__x86_64__)
	void *sched_sp = nullptr;
#else
	ucontext_t sched_uc;
#endif
#ifdef SINF_EMU_TSAN
	void *sched_tsan = nullptr;
#endif
#ifdef SINF_EMU_ASAN
	void *sched_fake = nullptr;
	const void *sched_bottom = nullptr;
	size_t sched_size = 0;
#endif
	~Worker() {
		for (Fiber *f : fibers) {
			munmap(f->stack, kStackBytes);
#ifdef SINF_EMU_TSAN
			__tsan_destroy_fiber(f->tsan);
#endif
			delete f;
		}
	}
};

thread_local Worker tls_worker;

[[noreturn]] void fatal(const Worker &w, const char *fmt, const char *what) {
	fprintf(stderr, "cuda emulator: kernel %s: ", w.kernel);
	fprintf(stderr, fmt, what);
	fprintf(stderr, "\n");
	abort();
}

// to_scheduler suspends the running fiber; sync orders its memory before
// whatever runs next (only at its exit: the end of a block).
void to_scheduler(Fiber *f, bool sync) {
	Worker &w = *f->w;
#ifdef SINF_EMU_TSAN
	__tsan_switch_to_fiber(w.sched_tsan, sync ? 0 : SINF_TSAN_NO_SYNC);
#else
	(void)sync;
#endif
#ifdef SINF_EMU_ASAN
	__sanitizer_start_switch_fiber(&f->fake_stack, w.sched_bottom, w.sched_size);
#endif
#if defined(__x86_64__)
	sinf_emu_switch(&f->sp, w.sched_sp);
#else
	swapcontext(&f->uc, &w.sched_uc);
#endif
#ifdef SINF_EMU_ASAN
	__sanitizer_finish_switch_fiber(f->fake_stack, &w.sched_bottom, &w.sched_size);
#endif
}

// run_fiber resumes f until it waits or exits.
void run_fiber(Worker &w, Fiber *f) {
	st(w.cur, f);
	tls_current.store(&f->t, std::memory_order_relaxed);
#ifdef SINF_EMU_TSAN
	__tsan_switch_to_fiber(f->tsan, 0);
#endif
#ifdef SINF_EMU_ASAN
	__sanitizer_start_switch_fiber(&w.sched_fake, f->stack, kStackBytes);
#endif
#if defined(__x86_64__)
	sinf_emu_switch(&w.sched_sp, f->sp);
#else
	swapcontext(&w.sched_uc, &f->uc);
#endif
#ifdef SINF_EMU_ASAN
	__sanitizer_finish_switch_fiber(w.sched_fake, nullptr, nullptr);
#endif
	tls_current.store(nullptr, std::memory_order_relaxed);
}

void release_barrier(Worker &w) {
	for (int i = 0; i < w.n; i++)
		if (ld(w.fibers[i]->state) == kAtBarrier) st(w.fibers[i]->state, (int)kRunnable);
	st(w.at_barrier, 0);
}

// thread_exit: the fiber's kernel body returned.
void thread_exit(Worker &w, Fiber *f) {
	st(f->state, (int)kDone);
	st(w.live, ld(w.live) - 1);
	Warp &wp = w.warps[f->t.linear >> 5];
	const unsigned bit = 1u << (f->t.linear & 31);
	st(wp.exited, ld(wp.exited) | bit);
	if (ld(wp.arrived) != 0 && (ld(wp.mask) & bit))
		fatal(w, "a lane exited while its warp waits for it at %s", wp.what);
	const int live = ld(w.live), at = ld(w.at_barrier);
	if (at > 0 && at == live) release_barrier(w);
}

void fiber_loop(Fiber *f) {
	Worker &w = *f->w;
#ifdef SINF_EMU_ASAN
	__sanitizer_finish_switch_fiber(nullptr, &w.sched_bottom, &w.sched_size);
#endif
	for (;;) {
		(*ld(w.body))();
		thread_exit(w, f);
		to_scheduler(f, true);
	}
}

#if defined(__x86_64__)
extern "C" void sinf_emu_fiber_entry(void *fiber) { fiber_loop(static_cast<Fiber *>(fiber)); }
#else
void uc_entry(unsigned hi, unsigned lo) {
	fiber_loop(reinterpret_cast<Fiber *>(((uintptr_t)hi << 32) | (uintptr_t)lo));
}
#endif

Fiber *new_fiber(Worker &w) {
	Fiber *f = new Fiber();
	f->w = &w;
	void *s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (s == MAP_FAILED) {
		fprintf(stderr, "cuda emulator: cannot map a fiber stack\n");
		abort();
	}
	f->stack = static_cast<char *>(s);
	mprotect(f->stack, 4096, PROT_NONE); // guard page: a stack overflow faults
#if defined(__x86_64__)
	uintptr_t top = ((uintptr_t)(f->stack + kStackBytes)) & ~(uintptr_t)15;
	void **sp = reinterpret_cast<void **>(top);
	sp[-1] = (void *)&sinf_emu_trampoline; // return address of sinf_emu_switch
	sp[-2] = nullptr;                      // rbp
	sp[-3] = f;                            // rbx
	for (int i = 4; i <= 7; i++) sp[-i] = nullptr;
	f->sp = sp - 7;
#else
	getcontext(&f->uc);
	f->uc.uc_stack.ss_sp = f->stack;
	f->uc.uc_stack.ss_size = kStackBytes;
	f->uc.uc_link = nullptr;
	makecontext(&f->uc, (void (*)())uc_entry, 2, (unsigned)((uintptr_t)f >> 32), (unsigned)(uintptr_t)f);
#endif
#ifdef SINF_EMU_TSAN
	f->tsan = __tsan_create_fiber(0);
#endif
	return f;
}

void run_block(Worker &w) {
	st(w.live, w.n);
	st(w.at_barrier, 0);
	for (int i = 0; i < w.n; i++) st(w.fibers[i]->state, (int)kRunnable);
	for (size_t k = 0; k < w.warps.size(); k++) {
		Warp &wp = w.warps[k];
		const int lanes = w.n - 32 * (int)k;
		st(wp.arrived, 0u);
		st(wp.exited, lanes >= 32 ? 0u : ~((1u << lanes) - 1u));
	}
	while (ld(w.live) > 0) {
		bool ran = false;
		for (int i = 0; i < w.n; i++) {
			Fiber *f = w.fibers[i];
			if (ld(f->state) == kRunnable) {
				run_fiber(w, f);
				ran = true;
			}
		}
		if (!ran) {
			int barrier = 0, warp = 0;
			for (int i = 0; i < w.n; i++) {
				const int s = ld(w.fibers[i]->state);
				barrier += s == kAtBarrier;
				warp += s == kAtWarp;
			}
			fprintf(stderr,
			        "cuda emulator: kernel %s: deadlock: %d threads wait at __syncthreads, %d at a warp primitive, "
			        "%d exited (a barrier in divergent code?)\n",
			        w.kernel, barrier, warp, w.n - ld(w.live));
			abort();
		}
	}
}

// The runtime's last error (cudaGetLastError), per host thread.
thread_local cudaError_t tls_last_error = cudaSuccess;

} // namespace

int run_grid(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()> &body, const char *name) {
	const unsigned long long n = (unsigned long long)block.x * block.y * block.z;
	if (n == 0 || n > kMaxThreads || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
	    grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 || shared_bytes != 0) {
		tls_last_error = cudaErrorInvalidConfiguration;
		return cudaErrorInvalidConfiguration;
	}
	Worker &w = tls_worker;
	if (ld(w.cur) != nullptr) {
		fprintf(stderr, "cuda emulator: kernel %s launched from inside a kernel\n", name);
		abort();
	}
#ifdef SINF_EMU_TSAN
	if (!w.sched_tsan) w.sched_tsan = __tsan_get_current_fiber();
#endif
	while (w.fibers.size() < n) w.fibers.push_back(new_fiber(w));
	st(w.body, &body);
	w.kernel = name;
	w.n = (int)n;
	w.warps.assign((n + 31) / 32, Warp{});
	for (int i = 0; i < w.n; i++) {
		Thread &t = w.fibers[i]->t;
		t.thread_idx = uint3{(unsigned)i % block.x, ((unsigned)i / block.x) % block.y, (unsigned)i / (block.x * block.y)};
		t.block_dim = block;
		t.grid_dim = grid;
		t.linear = i;
	}
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				for (int i = 0; i < w.n; i++) w.fibers[i]->t.block_idx = uint3{x, y, z};
				run_block(w);
			}
	st(w.cur, (Fiber *)nullptr);
	st(w.body, (const std::function<void()> *)nullptr);
	return 0;
}

void syncthreads() {
	Worker &w = tls_worker;
	Fiber *f = ld(w.cur);
#ifdef SINF_EMU_TSAN
	__tsan_release(&w.barrier);
#endif
	const int at = ld(w.at_barrier) + 1;
	if (at == ld(w.live)) {
		release_barrier(w);
	} else {
		st(w.at_barrier, at);
		st(f->state, (int)kAtBarrier);
		to_scheduler(f, false);
	}
#ifdef SINF_EMU_TSAN
	__tsan_acquire(&w.barrier);
#endif
}

namespace {

// warp_op: the calling lane joins its warp's operation; the last lane of
// mask to arrive completes it for every lane.
void warp_op(int op, unsigned mask, const char *what) {
	Worker &w = tls_worker;
	Fiber *f = ld(w.cur);
	const int lane = f->t.linear & 31, base = f->t.linear & ~31;
	Warp &wp = w.warps[f->t.linear >> 5];
	const unsigned bit = 1u << lane;
	if (!(mask & bit)) fatal(w, "%s: the calling lane is not in its mask", what);
	if (ld(wp.exited) & mask) fatal(w, "%s: the mask names a lane that exited or does not exist", what);
	unsigned arrived = ld(wp.arrived);
	if (arrived == 0) {
		st(wp.mask, mask);
		st(wp.op, op);
		st(wp.what, what);
	} else if (ld(wp.mask) != mask || ld(wp.op) != op) {
		fatal(w, "%s: the lanes of a warp wait at different warp primitives or masks", what);
	}
	arrived |= bit;
	if (arrived != mask) {
		st(wp.arrived, arrived);
		st(f->state, (int)kAtWarp);
		to_scheduler(f, false);
		return;
	}
	// Complete: every lane of mask is here.
	unsigned ballot = 0;
	if (op == kBallot)
		for (int l = 0; l < 32; l++)
			if ((mask >> l & 1u) && ld(w.fibers[base + l]->pred)) ballot |= 1u << l;
	for (int l = 0; l < 32; l++) {
		if (!(mask >> l & 1u)) continue;
		Fiber *g = w.fibers[base + l];
		uint64_t r = 0;
		if (op == kShuffle) {
			const int s = ld(g->src);
			if (s < 0 || s >= 32 || !(mask >> s & 1u)) fatal(w, "%s reads a lane outside its mask", what);
			r = ld(w.fibers[base + s]->offer);
		} else if (op == kBallot) {
			r = ballot;
		}
		st(g->result, r);
		if (g != f) st(g->state, (int)kRunnable);
	}
	st(wp.arrived, 0u);
}

} // namespace

uint64_t warp_exchange(unsigned mask, uint64_t v, int src, const char *what) {
	Fiber *f = ld(tls_worker.cur);
	st(f->offer, v);
	st(f->src, src & 31);
	warp_op(kShuffle, mask, what);
	return ld(f->result);
}

unsigned warp_ballot(unsigned mask, bool pred) {
	Fiber *f = ld(tls_worker.cur);
	st(f->pred, (int)pred);
	warp_op(kBallot, mask, "__ballot_sync");
	return (unsigned)ld(f->result);
}

void syncwarp(unsigned mask) {
	Worker &w = tls_worker;
	Warp &wp = w.warps[ld(w.cur)->t.linear >> 5];
#ifdef SINF_EMU_TSAN
	__tsan_release(&wp.sync);
#endif
	warp_op(kSyncwarp, mask, "__syncwarp");
#ifdef SINF_EMU_TSAN
	__tsan_acquire(&wp.sync);
#else
	(void)wp;
#endif
}

} // namespace sinf_emu

// ---- Runtime API ----------------------------------------------------------------

using sinf_emu::tls_last_error;

struct sinf_emu_stream {
	unsigned flags;
};
struct sinf_emu_event {
	std::chrono::steady_clock::time_point t;
	bool recorded;
};
struct sinf_emu_blas {
	cudaStream_t stream;
};

namespace {

// Allocations and host registrations, for cudaFree and
// cudaHostGetDevicePointer to check their arguments.
std::mutex mem_mu;
std::map<uintptr_t, size_t> &allocations() {
	static std::map<uintptr_t, size_t> m;
	return m;
}
std::map<uintptr_t, size_t> &registrations() {
	static std::map<uintptr_t, size_t> m;
	return m;
}

int env_int(const char *name, int def) {
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

cudaError_t ok() { return cudaSuccess; }

cudaError_t fail(cudaError_t e) {
	tls_last_error = e;
	return e;
}

} // namespace

const char *cudaGetErrorString(cudaError_t e) {
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorInvalidDevicePointer: return "invalid device pointer";
	case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
	case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
	case cudaErrorNotSupported: return "operation not supported";
	default: return "unknown error";
	}
}

cudaError_t cudaGetLastError() {
	cudaError_t e = tls_last_error;
	tls_last_error = cudaSuccess;
	return e;
}
cudaError_t cudaPeekAtLastError() { return tls_last_error; }

// One emulated device, unless SINF_EMU_DEVICES says otherwise (0: none, to
// test the no-device path).
cudaError_t cudaGetDeviceCount(int *n) {
	*n = env_int("SINF_EMU_DEVICES", 1);
	return *n > 0 ? ok() : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int d) {
	int n = 0;
	cudaGetDeviceCount(&n);
	return d >= 0 && d < n ? ok() : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaSetDeviceFlags(unsigned) { return ok(); }

// The emulated device: compute capability 8.0; SINF_EMU_SMS multiprocessors
// (default 2: sinf_add_rows splits its rows by the SM count);
// SINF_EMU_INTEGRATED=1 makes it an integrated GPU (a Jetson: weights are
// read in place from registered host memory).
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
	if (cudaSetDevice(d) != cudaSuccess) return cudaErrorInvalidDevice;
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "sinf CUDA emulator (CPU)");
	p->totalGlobalMem = (size_t)16 << 30;
	p->major = 8;
	p->minor = 0;
	p->multiProcessorCount = env_int("SINF_EMU_SMS", 2);
	p->integrated = env_int("SINF_EMU_INTEGRATED", 0);
	p->canMapHostMemory = 1;
	p->managedMemory = 1;
	return ok();
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
	cudaDeviceProp p;
	if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return cudaErrorInvalidDevice;
	switch (a) {
	case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
	case cudaDevAttrIntegrated: *v = p.integrated; break;
	case cudaDevAttrCanMapHostMemory: *v = 1; break;
	case cudaDevAttrManagedMemory: *v = 1; break;
	case cudaDevAttrPageableMemoryAccess: *v = 0; break;
	case cudaDevAttrPageableMemoryAccessUsesHostPageTables: *v = 0; break;
	case cudaDevAttrHostRegisterSupported: *v = 1; break;
	case cudaDevAttrHostRegisterReadOnlySupported: *v = 1; break;
	default: *v = 0; return fail(cudaErrorInvalidValue);
	}
	return ok();
}

cudaError_t cudaRuntimeGetVersion(int *v) {
	*v = 11080;
	return ok();
}
cudaError_t cudaDriverGetVersion(int *v) {
	*v = 12020;
	return ok();
}
cudaError_t cudaDeviceSynchronize() { return ok(); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
	*s = new sinf_emu_stream{flags};
	return ok();
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
	delete s;
	return ok();
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return ok(); }

cudaError_t cudaMalloc(void **p, size_t bytes) {
	*p = nullptr;
	const size_t n = (bytes + 255) & ~(size_t)255;
	void *m = aligned_alloc(256, n ? n : 256);
	if (!m) return fail(cudaErrorMemoryAllocation);
	std::lock_guard<std::mutex> g(mem_mu);
	allocations()[(uintptr_t)m] = bytes;
	*p = m;
	return ok();
}

cudaError_t cudaMallocManaged(void **p, size_t bytes, unsigned) { return cudaMalloc(p, bytes); }

cudaError_t cudaFree(void *p) {
	if (!p) return ok();
	{
		std::lock_guard<std::mutex> g(mem_mu);
		auto it = allocations().find((uintptr_t)p);
		if (it == allocations().end()) return fail(cudaErrorInvalidDevicePointer);
		allocations().erase(it);
	}
	free(p);
	return ok();
}

// Host registration: the device address of registered host memory is the
// host address (unified addressing); ranges may not overlap.
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned) {
	if (!p || !bytes) return fail(cudaErrorInvalidValue);
	const uintptr_t a = (uintptr_t)p;
	std::lock_guard<std::mutex> g(mem_mu);
	auto &r = registrations();
	auto it = r.lower_bound(a);
	if ((it != r.end() && it->first < a + bytes) ||
	    (it != r.begin() && std::prev(it)->first + std::prev(it)->second > a))
		return fail(cudaErrorHostMemoryAlreadyRegistered);
	r[a] = bytes;
	return ok();
}

cudaError_t cudaHostUnregister(void *p) {
	std::lock_guard<std::mutex> g(mem_mu);
	if (registrations().erase((uintptr_t)p) == 0) return fail(cudaErrorHostMemoryNotRegistered);
	return ok();
}

cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned) {
	*d = nullptr;
	const uintptr_t a = (uintptr_t)h;
	std::lock_guard<std::mutex> g(mem_mu);
	auto &r = registrations();
	auto it = r.upper_bound(a);
	if (it == r.begin() || std::prev(it)->first + std::prev(it)->second <= a) return fail(cudaErrorInvalidValue);
	*d = h;
	return ok();
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind) {
	if (bytes && (!dst || !src)) return fail(cudaErrorInvalidValue);
	if (bytes) memmove(dst, src, bytes);
	return ok();
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k, cudaStream_t) {
	return cudaMemcpy(dst, src, bytes, k);
}
cudaError_t cudaMemset(void *p, int v, size_t bytes) {
	if (bytes && !p) return fail(cudaErrorInvalidValue);
	if (bytes) memset(p, v, bytes);
	return ok();
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t) { return cudaMemset(p, v, bytes); }

cudaError_t cudaEventCreate(cudaEvent_t *e) {
	*e = new sinf_emu_event{{}, false};
	return ok();
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
	delete e;
	return ok();
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
	if (!e) return fail(cudaErrorInvalidResourceHandle);
	e->t = std::chrono::steady_clock::now();
	e->recorded = true;
	return ok();
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? ok() : fail(cudaErrorInvalidResourceHandle); }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
	*ms = 0;
	if (!a || !b || !a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle);
	*ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
	return ok();
}

// ---- cuBLAS -----------------------------------------------------------------------

cublasStatus_t cublasCreate(cublasHandle_t *h) {
	*h = new sinf_emu_blas{nullptr};
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
	if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
	h->stream = s;
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t) {
	return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

// The reference product: each C element one float32 sum over l in order
// (cuBLAS's order is its own; results agree to rounding).
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
	if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
	if (at != CUDA_R_32F || bt != CUDA_R_32F || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if (m < 0 || n < 0 || k < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
	    (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || lda < (ta == CUBLAS_OP_N ? m : k) ||
	    ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m || lda < 1 || ldb < 1 || ldc < 1)
		return CUBLAS_STATUS_INVALID_VALUE;
	const float a = *(const float *)alpha, b = *(const float *)beta;
	const float *Ap = (const float *)A, *Bp = (const float *)B;
	float *Cp = (float *)C;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float s = 0.f;
			for (int l = 0; l < k; l++) {
				const float av = ta == CUBLAS_OP_N ? Ap[i + (size_t)l * lda] : Ap[l + (size_t)i * lda];
				const float bv = tb == CUBLAS_OP_N ? Bp[l + (size_t)j * ldb] : Bp[j + (size_t)l * ldb];
				s += av * bv;
			}
			float &c = Cp[i + (size_t)j * ldc];
			c = b == 0.f ? a * s : a * s + b * c;
		}
	return CUBLAS_STATUS_SUCCESS;
}
