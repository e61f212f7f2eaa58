// Contexts, device queries, memory and copies.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

extern "C" const char *sinf_error_string(int code) {
	if (code == SINF_EINVAL) return "invalid argument to a sinf kernel (dtype, shape or alignment)";
#ifndef SINF_NO_CUBLAS
	if (code >= SINF_CUBLAS_BASE && code < SINF_EINVAL) {
		switch (code - SINF_CUBLAS_BASE) {
		case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS: not initialized";
		case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS: allocation failed";
		case CUBLAS_STATUS_INVALID_VALUE: return "cuBLAS: invalid value";
		case CUBLAS_STATUS_ARCH_MISMATCH: return "cuBLAS: architecture mismatch";
		case CUBLAS_STATUS_EXECUTION_FAILED: return "cuBLAS: execution failed";
		case CUBLAS_STATUS_NOT_SUPPORTED: return "cuBLAS: not supported";
		default: return "cuBLAS: error";
		}
	}
#endif
	return cudaGetErrorString((cudaError_t)code);
}

extern "C" int sinf_device_count(int *n) {
	*n = 0;
	return sinf_rc(cudaGetDeviceCount(n));
}

extern "C" int sinf_versions(int *rt, int *drv) {
	*rt = 0;
	*drv = 0;
	cudaRuntimeGetVersion(rt);
	return sinf_rc(cudaDriverGetVersion(drv));
}

static int attr(int *v, cudaDeviceAttr a, int dev) {
	*v = 0;
	cudaError_t e = cudaDeviceGetAttribute(v, a, dev);
	if (e != cudaSuccess) {
		*v = 0;
		cudaGetLastError(); // an attribute this driver does not know reads as 0
	}
	return 0;
}

extern "C" int sinf_ctx_create(int device, sinf_ctx **out, sinf_device_info *info) {
	*out = nullptr;
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) return sinf_rc(e);
	if (device < 0 || device >= n) return sinf_rc(cudaErrorInvalidDevice);
	if ((e = cudaSetDevice(device)) != cudaSuccess) return sinf_rc(e);
	// Mapped host memory (always on with unified addressing; harmless when the
	// context already exists).
	e = cudaSetDeviceFlags(cudaDeviceMapHost);
	if (e != cudaSuccess) cudaGetLastError();

	cudaDeviceProp prop;
	if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) return sinf_rc(e);
	memset(info, 0, sizeof *info);
	snprintf(info->name, sizeof info->name, "%s", prop.name);
	info->major = prop.major;
	info->minor = prop.minor;
	info->sm_count = prop.multiProcessorCount;
	info->total_mem = prop.totalGlobalMem;
	attr(&info->integrated, cudaDevAttrIntegrated, device);
	attr(&info->host_register_supported, cudaDevAttrHostRegisterSupported, device);
	attr(&info->host_register_readonly, cudaDevAttrHostRegisterReadOnlySupported, device);
	attr(&info->can_map_host, cudaDevAttrCanMapHostMemory, device);
	attr(&info->pageable_uses_host_pt, cudaDevAttrPageableMemoryAccessUsesHostPageTables, device);
	attr(&info->managed_memory, cudaDevAttrManagedMemory, device);
	cudaRuntimeGetVersion(&info->runtime_version);
	cudaDriverGetVersion(&info->driver_version);

	sinf_ctx *c = (sinf_ctx *)calloc(1, sizeof(sinf_ctx));
	if (!c) return sinf_rc(cudaErrorMemoryAllocation);
	c->device = device;
	c->sm_count = prop.multiProcessorCount;
	if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
		free(c);
		return sinf_rc(e);
	}
#ifndef SINF_NO_CUBLAS
	cublasStatus_t s = cublasCreate(&c->blas);
	if (s != CUBLAS_STATUS_SUCCESS) {
		cudaStreamDestroy(c->stream);
		free(c);
		return SINF_CUBLAS_BASE + (int)s;
	}
	cublasSetStream(c->blas, c->stream);
	// No TF32: float32 products stay float32, as on the CPU.
	cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
#endif
	cudaEventCreate(&c->t0);
	cudaEventCreate(&c->t1);
	*out = c;
	return 0;
}

extern "C" void sinf_ctx_destroy(sinf_ctx *c) {
	if (!c) return;
	cudaSetDevice(c->device);
	cudaStreamSynchronize(c->stream);
	if (c->scratch) cudaFree(c->scratch);
	cudaEventDestroy(c->t0);
	cudaEventDestroy(c->t1);
#ifndef SINF_NO_CUBLAS
	cublasDestroy(c->blas);
#endif
	cudaStreamDestroy(c->stream);
	free(c);
}

extern "C" int sinf_sync(sinf_ctx *c) {
	cudaSetDevice(c->device);
	cudaError_t e = cudaStreamSynchronize(c->stream);
	if (e == cudaSuccess) e = cudaGetLastError();
	return sinf_rc(e);
}

cudaError_t sinf_scratch(sinf_ctx *c, size_t bytes, void **out) {
	if (bytes > c->scratch_bytes) {
		cudaError_t e = cudaStreamSynchronize(c->stream);
		if (e != cudaSuccess) return e;
		if (c->scratch) cudaFree(c->scratch);
		c->scratch = nullptr;
		c->scratch_bytes = 0;
		size_t n = bytes + bytes / 4 + 4096;
		if ((e = cudaMalloc(&c->scratch, n)) != cudaSuccess) return e;
		c->scratch_bytes = n;
	}
	*out = c->scratch;
	return cudaSuccess;
}

extern "C" int sinf_malloc(sinf_ctx *c, size_t bytes, sinf_dptr *out) {
	cudaSetDevice(c->device);
	void *p = nullptr;
	*out = 0;
	cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) return sinf_rc(e);
	if ((e = cudaMemsetAsync(p, 0, bytes, c->stream)) != cudaSuccess) {
		cudaFree(p);
		return sinf_rc(e);
	}
	*out = (sinf_dptr)(uintptr_t)p;
	return 0;
}

extern "C" int sinf_malloc_managed(sinf_ctx *c, size_t bytes, sinf_dptr *out) {
	cudaSetDevice(c->device);
	void *p = nullptr;
	*out = 0;
	cudaError_t e = cudaMallocManaged(&p, bytes ? bytes : 1, cudaMemAttachGlobal);
	if (e != cudaSuccess) return sinf_rc(e);
	if ((e = cudaMemsetAsync(p, 0, bytes, c->stream)) != cudaSuccess || (e = cudaStreamSynchronize(c->stream)) != cudaSuccess) {
		cudaFree(p);
		return sinf_rc(e);
	}
	*out = (sinf_dptr)(uintptr_t)p;
	return 0;
}

extern "C" int sinf_free(sinf_ctx *c, sinf_dptr p) {
	cudaSetDevice(c->device);
	if (!p) return 0;
	cudaStreamSynchronize(c->stream);
	return sinf_rc(cudaFree(dp(p)));
}

extern "C" int sinf_host_register(sinf_ctx *c, uintptr_t addr, size_t bytes, int readonly, sinf_dptr *dev) {
	cudaSetDevice(c->device);
	void *host = (void *)addr;
	*dev = 0;
	unsigned flags = cudaHostRegisterMapped;
	if (readonly) flags |= cudaHostRegisterReadOnly;
	cudaError_t e = cudaHostRegister(host, bytes, flags);
	if (e != cudaSuccess) {
		cudaGetLastError();
		return sinf_rc(e);
	}
	void *d = nullptr;
	if ((e = cudaHostGetDevicePointer(&d, host, 0)) != cudaSuccess) {
		cudaGetLastError();
		cudaHostUnregister(host);
		return sinf_rc(e);
	}
	*dev = (sinf_dptr)(uintptr_t)d;
	return 0;
}

extern "C" int sinf_host_unregister(sinf_ctx *c, uintptr_t addr) {
	cudaSetDevice(c->device);
	cudaStreamSynchronize(c->stream);
	return sinf_rc(cudaHostUnregister((void *)addr));
}

extern "C" int sinf_upload(sinf_ctx *c, sinf_dptr dst, const void *src, size_t bytes) {
	cudaSetDevice(c->device);
	if (!bytes) return 0;
	cudaError_t e = cudaMemcpyAsync(dp(dst), src, bytes, cudaMemcpyHostToDevice, c->stream);
	if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
	return sinf_rc(e);
}

extern "C" int sinf_download(sinf_ctx *c, void *dst, sinf_dptr src, size_t bytes) {
	cudaSetDevice(c->device);
	if (!bytes) return sinf_sync(c);
	cudaError_t e = cudaMemcpyAsync(dst, dp(src), bytes, cudaMemcpyDeviceToHost, c->stream);
	if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
	return sinf_rc(e);
}

extern "C" int sinf_copy(sinf_ctx *c, sinf_dptr dst, sinf_dptr src, size_t bytes) {
	cudaSetDevice(c->device);
	if (!bytes) return 0;
	return sinf_rc(cudaMemcpyAsync(dp(dst), dp(src), bytes, cudaMemcpyDeviceToDevice, c->stream));
}

extern "C" int sinf_memset0(sinf_ctx *c, sinf_dptr p, size_t bytes) {
	cudaSetDevice(c->device);
	if (!bytes) return 0;
	return sinf_rc(cudaMemsetAsync(dp(p), 0, bytes, c->stream));
}

extern "C" int sinf_copy_bandwidth(sinf_ctx *c, size_t bytes, int iters, double *bps) {
	cudaSetDevice(c->device);
	*bps = 0;
	void *a = nullptr, *b = nullptr;
	cudaError_t e = cudaMalloc(&a, bytes);
	if (e != cudaSuccess) return sinf_rc(e);
	if ((e = cudaMalloc(&b, bytes)) != cudaSuccess) {
		cudaFree(a);
		return sinf_rc(e);
	}
	cudaMemsetAsync(a, 1, bytes, c->stream);
	cudaMemsetAsync(b, 0, bytes, c->stream);
	float best = 0;
	for (int i = 0; i <= iters && e == cudaSuccess; i++) { // the first copy warms up
		cudaEventRecord(c->t0, c->stream);
		cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, c->stream);
		cudaEventRecord(c->t1, c->stream);
		if ((e = cudaEventSynchronize(c->t1)) != cudaSuccess) break;
		float ms = 0;
		cudaEventElapsedTime(&ms, c->t0, c->t1);
		if (i > 0 && ms > 0 && (best == 0 || ms < best)) best = ms;
	}
	cudaFree(a);
	cudaFree(b);
	if (e != cudaSuccess) return sinf_rc(e);
	if (best > 0) *bps = 2.0 * (double)bytes / (best / 1e3);
	return 0;
}

extern "C" int sinf_timer_start(sinf_ctx *c) {
	cudaSetDevice(c->device);
	return sinf_rc(cudaEventRecord(c->t0, c->stream));
}

extern "C" int sinf_timer_stop(sinf_ctx *c, double *seconds) {
	cudaSetDevice(c->device);
	*seconds = 0;
	cudaError_t e = cudaEventRecord(c->t1, c->stream);
	if (e == cudaSuccess) e = cudaEventSynchronize(c->t1);
	if (e != cudaSuccess) return sinf_rc(e);
	float ms = 0;
	e = cudaEventElapsedTime(&ms, c->t0, c->t1);
	*seconds = ms / 1e3;
	return sinf_rc(e);
}
