# sinf — build, test, benchmark. `make demo` runs the main job on the embedded default model.
GO ?= go

.PHONY: build demo test test-arm64 fuzz bench memcheck vet clean

build:
	$(GO) build -o bin/ ./cmd/sinf ./cmd/sinf-run

demo: build
	tools/demo.sh

vet:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# The test command of README.md and .ci/run: vet, the CUDA kernels and
# backend on the CPU emulation (cuda-emu: needs g++ with its sanitizer
# runtimes), every test, the race detector on the concurrent code, a few
# seconds of each fuzz target.
test: vet
	$(MAKE) cuda-emu
	$(MAKE) fuzz FUZZTIME=smoke
	$(GO) test -race ./runtime/kernels/ ./convert/profile/ ./runtime/ ./cmd/internal/serve/
	$(GO) test ./...

# arm64 (the Jetson's CPU) under qemu-user-static: correctness only. -cpu max
# has every feature (the dotprod and neon kernel sets both run); a Cortex-A53
# (ARMv8.0) has no dot product, so detection must leave out the dotprod set.
test-arm64:
	QEMU_CPU=max GOARCH=arm64 $(GO) test -timeout 20m -exec qemu-aarch64-static ./runtime/... ./format/
	QEMU_CPU=cortex-a53 GOARCH=arm64 $(GO) test -timeout 20m -exec qemu-aarch64-static ./runtime/kernels/

# Every reader of a file from outside, one fuzz target each, one after the
# other (FUZZTIME each). FUZZFLAGS=-parallel=1 on a shared machine.
# FUZZTIME=smoke (make test) runs each target for a count of inputs (0.5–8
# s each on a 2-vCPU Zen 3): a duration makes Go's fuzz coordinator
# (before Go 1.27, go.dev/issue/75804) fail now and then with "context
# deadline exceeded" when a worker is mid-input at the deadline, with no
# failing input.
FUZZTIME ?= 10m
FUZZ_TARGETS = FuzzOpen:./format/:50000x FuzzSafetensors:./convert/hf/:80000x FuzzNew:./runtime/tokenizer/:15000x FuzzRead:./convert/scores/:5000x
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; rest=$${t#*:}; pkg=$${rest%%:*}; ft=$(FUZZTIME); \
		if [ "$$ft" = smoke ]; then ft=$${rest#*:}; fi; \
		echo "fuzz $$name $$pkg for $$ft"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $$ft $(FUZZFLAGS) $$pkg; \
	done

bench:
	$(GO) test -run '^$$' -bench . ./runtime/kernels/

# The memory model against a measured Llama-3.2-1B shape (random weights,
# 2.3 GB of safetensors and a 2 GB .sinf under /tmp; a few minutes): what
# TestMemoryModel checks only when SINF_LLAMA1B names such a file.
SINF_SHARED ?= ../shared
LLAMA1B ?= /tmp/sinf-llama1b
memcheck: build
	[ -f $(LLAMA1B).sinf ] || { bin/sinf synth --shape llama-3.2-1b --tokenizer $(SINF_SHARED)/tokenizers/llama3 --dtype f16 --quiet --force --out $(LLAMA1B) && \
		bin/sinf convert --model $(LLAMA1B) --random --gamma 0.7 --quiet --out $(LLAMA1B).sinf; }
	SINF_LLAMA1B=$(LLAMA1B).sinf $(GO) test -count=1 -v -run TestMemoryModel ./cmd/sinf/

clean:
	rm -rf bin out

# CUDA (--device cuda): nvcc compiles cuda/kernels/*.cu into
# cuda/build/libsinfcuda.a, then every command is built with -tags cuda
# (linking it, libcudart and libcublas). nvcc: tools/install-cuda.sh.
# Debian bookworm's CUDA 11.8 supports every arch below (sm_87: 11.4+,
# sm_90: 11.8+); the compute_90 PTX lets newer GPUs JIT the kernels.
# CGO_CFLAGS carries the library's hash so that go rebuilds (relinks) the
# cuda package whenever the library changes.
NVCC ?= $(shell command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_ARCHS ?= 80 86 87 90
CUDA_GENCODE = $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3 -std=c++17 -Xcompiler -fPIC,-Wall $(CUDA_GENCODE)
CUDA_LIB = cuda/build/libsinfcuda.a
CUDA_OBJS = $(patsubst cuda/kernels/%.cu,cuda/build/%.o,$(wildcard cuda/kernels/*.cu))
CUDA_GO = CGO_CFLAGS="-O2 -g -DSINF_CUDA_LIB=$$(sha256sum $(CUDA_LIB) | cut -c1-16)" $(GO)

.PHONY: cuda cuda-lib cuda-vet cuda-test

cuda/build/%.o: cuda/kernels/%.cu cuda/kernels/common.cuh cuda/sinfcuda.h
	@mkdir -p cuda/build
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(CUDA_LIB): $(CUDA_OBJS)
	rm -f $@
	ar rcs $@ $^

cuda-lib: $(CUDA_LIB)

cuda: $(CUDA_LIB)
	$(CUDA_GO) build -tags cuda -o bin/ ./cmd/...

# What CI runs after tools/install-cuda.sh (no GPU needed: the GPU tests skip).
cuda-vet: $(CUDA_LIB)
	$(CUDA_GO) vet -tags cuda ./...
	$(CUDA_GO) test -tags cuda -run XXX ./...

# On a GPU machine: every cuda test (they skip without a GPU).
cuda-test: $(CUDA_LIB)
	$(CUDA_GO) test -tags cuda -count=1 ./cuda/

# Binaries for a GPU machine without Go or with another CUDA version (what
# tools/cuda-check.sh runs when it cannot build there): no cuBLAS, the CUDA
# runtime linked statically, stripped; only the driver is needed to run them.
CUDA_PORTABLE = cuda/build/portable
CUDA_PORTABLE_OBJS = $(patsubst cuda/kernels/%.cu,$(CUDA_PORTABLE)/%.o,$(wildcard cuda/kernels/*.cu))
CUDA_PORTABLE_GO = CGO_CFLAGS="-O2 -g -DSINF_CUDA_LIB=$$(sha256sum $(CUDA_PORTABLE)/libsinfcuda.a | cut -c1-16)" $(GO)

.PHONY: cuda-portable

$(CUDA_PORTABLE)/%.o: cuda/kernels/%.cu cuda/kernels/common.cuh cuda/sinfcuda.h
	@mkdir -p $(CUDA_PORTABLE)
	$(NVCC) $(NVCCFLAGS) -DSINF_NO_CUBLAS -c $< -o $@

$(CUDA_PORTABLE)/libsinfcuda.a: $(CUDA_PORTABLE_OBJS)
	rm -f $@
	ar rcs $@ $^

cuda-portable: $(CUDA_PORTABLE)/libsinfcuda.a
	$(CUDA_PORTABLE_GO) build -tags cuda,cudaportable -ldflags='-s -w' -o $(CUDA_PORTABLE)/ ./cmd/sinf ./cmd/sinf-run
	$(CUDA_PORTABLE_GO) test -c -tags cuda,cudaportable -ldflags='-s -w' -o $(CUDA_PORTABLE)/cuda.test ./cuda/

# The CPU emulation of the CUDA execution model (cuda/emu, cuda/README.md):
# the same kernel sources compiled as host C++ by g++, so every kernel and
# the whole backend (cuda.Session through cgo) run without a GPU or nvcc.
#   cuda-emu-lib: cuda/build/emu (-O2) and cuda/build/emu-asan
#                 (-fsanitize=address,undefined); -tags cuda,cudaemu links
#                 the first, go test -asan the second.
#   cuda-emu:     the kernel driver under ThreadSanitizer (a missing
#                 __syncthreads is a race it reports) and under ASan+UBSan,
#                 then every cuda test (kernels against the CPU, whole
#                 models against runtime.Session) under ASan+UBSan.
CXX ?= g++
EMU_CXXFLAGS = -std=c++17 -g -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-parameter -ffp-contract=off -fPIC \
	-fno-omit-frame-pointer -Icuda/emu/include
EMU_SAN = -fsanitize=address,undefined -fno-sanitize-recover=undefined
EMU_SRCS = $(wildcard cuda/kernels/*.cu) cuda/emu/emu.cc
EMU_DEPS = $(EMU_SRCS) cuda/kernels/common.cuh cuda/sinfcuda.h cuda/emu/cuda_emu.h $(wildcard cuda/emu/include/*.h)
EMU_OBJS = $(patsubst cuda/kernels/%.cu,%.o,$(wildcard cuda/kernels/*.cu)) emu.o
EMU_GO = CGO_CFLAGS="-O2 -g -DSINF_CUDA_LIB=$$(cat cuda/build/emu/*.a cuda/build/emu-asan/*.a | sha256sum | cut -c1-16)" $(GO)

.PHONY: cuda-emu cuda-emu-lib

# emu_lib(dir, flags): every source compiled to dir/*.o, archived as
# dir/libsinfcuda.a.
define emu_lib
	@mkdir -p $(1)
	@set -e; for s in $(EMU_SRCS); do o=$(1)/$$(basename $${s%.*}).o; \
		echo "$(CXX) $(2) -c $$s"; $(CXX) $(EMU_CXXFLAGS) $(2) -x c++ -c $$s -o $$o; done
	rm -f $(1)/libsinfcuda.a
	ar rcs $(1)/libsinfcuda.a $(addprefix $(1)/,$(EMU_OBJS))
endef

cuda/build/emu/libsinfcuda.a: $(EMU_DEPS)
	$(call emu_lib,cuda/build/emu,-O2)

cuda/build/emu-asan/libsinfcuda.a: $(EMU_DEPS)
	$(call emu_lib,cuda/build/emu-asan,-O1 $(EMU_SAN))

cuda/build/emu-tsan/kernels_test: $(EMU_DEPS) cuda/emu/kernels_test.cc
	$(call emu_lib,cuda/build/emu-tsan,-O1 -fsanitize=thread -Wno-tsan)
	$(CXX) $(EMU_CXXFLAGS) -O1 -fsanitize=thread -Wno-tsan cuda/emu/kernels_test.cc cuda/build/emu-tsan/libsinfcuda.a -o $@ -lpthread

cuda/build/emu-asan/kernels_test: cuda/build/emu-asan/libsinfcuda.a cuda/emu/kernels_test.cc
	$(CXX) $(EMU_CXXFLAGS) -O1 $(EMU_SAN) cuda/emu/kernels_test.cc cuda/build/emu-asan/libsinfcuda.a -o $@ -lpthread

# The mutation the sanitizers must catch: block_sum (common.cuh) without its
# first __syncthreads, so warp 0 reads the other warps' partial sums before
# they are written. The kernel driver linked with that elementwise.cu must
# fail under ThreadSanitizer (a data race, exit status 66).
cuda/build/emu-mut/kernels_test: cuda/build/emu-tsan/kernels_test
	rm -rf cuda/build/emu-mut && mkdir -p cuda/build/emu-mut/kernels
	cp cuda/sinfcuda.h cuda/build/emu-mut/ && cp cuda/kernels/* cuda/build/emu-mut/kernels/
	awk '/T block_sum\(T v\)/ { inside = 1 } inside && /__syncthreads\(\);/ && !done { sub(/__syncthreads\(\);/, "/* mutated: no barrier */"); done = 1 } { print }' \
		cuda/kernels/common.cuh > cuda/build/emu-mut/kernels/common.cuh
	! cmp -s cuda/kernels/common.cuh cuda/build/emu-mut/kernels/common.cuh
	$(CXX) $(EMU_CXXFLAGS) -O1 -fsanitize=thread -Wno-tsan -x c++ -c cuda/build/emu-mut/kernels/elementwise.cu -o cuda/build/emu-mut/elementwise.o
	$(CXX) $(EMU_CXXFLAGS) -O1 -fsanitize=thread -Wno-tsan cuda/emu/kernels_test.cc cuda/build/emu-mut/elementwise.o \
		$(filter-out cuda/build/emu-tsan/elementwise.o,$(addprefix cuda/build/emu-tsan/,$(EMU_OBJS))) -o $@ -lpthread

cuda-emu-lib: cuda/build/emu/libsinfcuda.a cuda/build/emu-asan/libsinfcuda.a

cuda-emu: cuda-emu-lib cuda/build/emu-tsan/kernels_test cuda/build/emu-asan/kernels_test cuda/build/emu-mut/kernels_test
	TSAN_OPTIONS="halt_on_error=1 exitcode=66" cuda/build/emu-tsan/kernels_test
	@echo "cuda-emu: the mutated block_sum must be reported by ThreadSanitizer:"
	TSAN_OPTIONS="halt_on_error=1 exitcode=66" cuda/build/emu-mut/kernels_test > cuda/build/emu-mut/tsan.log 2>&1; \
		rc=$$?; grep -m1 'WARNING: ThreadSanitizer: data race' cuda/build/emu-mut/tsan.log; \
		if [ $$rc -ne 66 ]; then echo "cuda-emu: the missing __syncthreads was not caught (exit $$rc)"; exit 1; fi
	cuda/build/emu-asan/kernels_test
	$(EMU_GO) vet -tags cuda,cudaemu ./cuda/
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $(EMU_GO) test -asan -tags cuda,cudaemu -count=1 -timeout 20m ./cuda/
