# sinf — build, test, benchmark. `make demo` runs the main job on the embedded default model.
GO ?= go

.PHONY: build demo test test-short test-arm64 fuzz bench vet clean

build:
	$(GO) build -o bin/ ./cmd/sinf ./cmd/sinf-run

demo: build
	tools/demo.sh

vet:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...

# The test command of README.md and .ci/run: vet, every test, the race
# detector on the concurrent code, a few seconds of each fuzz target.
test: vet
	$(GO) test ./...
	$(GO) test -race ./runtime/kernels/ ./convert/profile/ ./runtime/
	$(GO) test -run '^$$' -fuzz FuzzOpen -fuzztime 10s ./format/

# arm64 (the Jetson's CPU) under qemu-user-static: correctness only.
test-arm64:
	GOARCH=arm64 $(GO) test -exec qemu-aarch64-static ./runtime/... ./format/

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzOpen -fuzztime 10m ./format/

bench:
	$(GO) test -run '^$$' -bench . ./runtime/kernels/

clean:
	rm -rf bin out
