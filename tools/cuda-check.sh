#!/bin/bash
# cuda-check.sh: the GPU check of --device cuda, one prepared run on a GPU
# machine (its length is unmeasured, no GPU has run it yet: SHAPES=llama-3.2-1b
# for a shorter run):
#   1. build: make cuda where Go and nvcc are; else the portable binaries
#      that `make cuda-portable` built elsewhere (carry cuda/build/portable)
#   2. the cuda tests: every kernel against the CPU path, whole-model greedy
#      tokens against the CPU's (go test -tags cuda ./cuda/)
#   3. kernel benchmarks: each kernel's GB/s as a fraction of the measured
#      device-to-device copy bandwidth (go test -tags cuda -bench . ./cuda/)
#   4. Llama-3.2-1B and -3B shapes: sinf synth (random F16 weights), sinf
#      convert --random with gamma 1 and gamma 0.7 at each of DTYPES (F16, Q8_0,
#      Q4_0 and Q4_K_M on the first shape; F16 and Q4_0 on the others), then decode
#      tok/s on the GPU: dense (gamma 1), selectinfer phi 0.4 and gatefirst
#      (the default) on gamma 0.7, and gatefirst through --mapped (first shape)
#
# Usage: tools/cuda-check.sh [OUTDIR]   (default: $OUT, else /tmp/sinf-cuda-check/out)
# Env:   SINF_SHARED (default ../shared), SHAPES ("llama-3.2-1b llama-3.2-3b"),
#        WORK (synthetic models; default /tmp/sinf-cuda-check), GEN (decode steps, 64),
#        DTYPES ("f16 q8_0 q4_0 q4_k_m")
# Results: OUTDIR/summary.txt (the tables), tests.txt, bench.txt, check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${1:-${OUT:-/tmp/sinf-cuda-check/out}}
work=${WORK:-/tmp/sinf-cuda-check}
shapes=${SHAPES:-llama-3.2-1b llama-3.2-3b}
gen=${GEN:-64}
dtypes=${DTYPES:-f16 q8_0 q4_0 q4_k_m}
mkdir -p "$out" "$work"
export SINF_SHARED=${SINF_SHARED:-$(cd "$root/.." && pwd)/shared}
export PATH=$PATH:/usr/local/cuda/bin:/usr/local/go/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
log=$out/check.log
summary=$out/summary.txt
: >"$log"
: >"$summary"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$log"; }
sum() { echo "$*" | tee -a "$summary"; }

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null) || gpu="none seen by nvidia-smi"
say "GPU: $gpu"
say "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo none); go: $(go version 2>/dev/null || echo none)"
say "shared: $SINF_SHARED"

# 1. Build.
mode=
if command -v go >/dev/null && command -v nvcc >/dev/null; then
	say "make cuda"
	# Retry for this GPU's arch alone if the toolkit refuses one of the list.
	if make -j"$(nproc)" cuda >>"$log" 2>&1 || { say "make cuda failed; retrying with CUDA_ARCHS=90" &&
		make -j"$(nproc)" -B CUDA_ARCHS=90 cuda >>"$log" 2>&1; }; then
		mode=built
		SINF=$root/bin/sinf
		RUN=$root/bin/sinf-run
		cgo_cflags="-O2 -g -DSINF_CUDA_LIB=$(sha256sum cuda/build/libsinfcuda.a | cut -c1-16)"
	else
		say "make cuda failed (see check.log)"
	fi
fi
if [ -z "$mode" ]; then
	p=$root/cuda/build/portable
	if [ -x "$p/cuda.test" ] && [ -x "$p/sinf" ] && [ -x "$p/sinf-run" ]; then
		mode=portable
		SINF=$p/sinf
		RUN=$p/sinf-run
		say "using the portable binaries of make cuda-portable ($p)"
	else
		say "FAIL: cannot build here (Go and nvcc needed) and found no portable binaries: run make cuda-portable where nvcc is and carry cuda/build/portable"
		exit 1
	fi
fi
sum "sinf cuda check on $gpu; build: $mode"

# cudatest TIMEOUT GO-TEST-FLAGS...: the cuda package's tests (run in cuda/, as
# go test runs them); flags as go test spells them (-v, -run, -bench, ...).
cudatest() {
	local limit=$1
	shift
	if [ "$mode" = built ]; then
		CGO_CFLAGS=$cgo_cflags timeout "$limit" go test -tags cuda -count=1 "$@" ./cuda/
	else
		local args=() a
		for a in "$@"; do args+=("${a/#-/-test.}"); done
		(cd cuda && timeout "$limit" ./build/portable/cuda.test "${args[@]}")
	fi
}

# 2. Tests.
say "cuda tests"
if cudatest 300 -v -timeout 280s >"$out/tests.txt" 2>&1; then
	tests=PASS
else
	tests=FAIL
fi
grep -E '^(--- FAIL|FAIL|ok|PASS)' "$out/tests.txt" | tail -n 20 | tee -a "$log"
sum "cuda tests: $tests ($(grep -c -- '--- PASS' "$out/tests.txt") passed, $(grep -c -- '--- FAIL' "$out/tests.txt") failed, $(grep -c -- '--- SKIP' "$out/tests.txt") skipped; tests.txt)"
if grep -q 'no GPU:' "$out/tests.txt"; then
	sum "  GPU tests SKIPPED: $(grep -m 1 -o 'no GPU:.*' "$out/tests.txt")"
	tests=SKIPPED
fi

# 3. Kernel benchmarks.
say "kernel benchmarks"
cudatest 240 -run '^$' -bench . -benchtime 200x >"$out/bench.txt" 2>&1
sum ""
sum "kernels at Llama-3.2-1B decode shapes (F16 weights): achieved GB/s and fraction of the device copy bandwidth"
awk '
	/^BenchmarkCopyBandwidth/ { for (i = 1; i < NF; i++) if ($(i+1) == "GB/s") printf "  device-to-device copy: %.0f GB/s (read + write)\n", $i }
	/^BenchmarkKernels\// {
		name = $1; sub(/^BenchmarkKernels\//, "", name); sub(/-[0-9]+$/, "", name)
		us = gb = fr = tf = ""
		for (i = 1; i < NF; i++) {
			if ($(i+1) == "us/call") us = $i
			if ($(i+1) == "GB/s") gb = $i
			if ($(i+1) == "of-copy-bw") fr = $i
			if ($(i+1) == "TFLOP/s") tf = $i
		}
		printf "  %-30s %9s us %9s GB/s %6.1f%% of copy%s\n", name, us, gb, 100 * fr, (tf != "" ? sprintf("  %s TFLOP/s", tf) : "")
	}' "$out/bench.txt" | tee -a "$summary"
grep -qE '^(FAIL|panic)' "$out/bench.txt" && sum "  benchmarks FAILED (bench.txt)"

# 4. Decode speed on real shapes.
prompt="Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker who \
repaired every clock in the valley. One winter morning a stranger knocked at his door with a broken pocket watch \
and a story about a city where time had stopped."
bench_has_device=0
"$SINF" bench --help 2>&1 | grep -q -- '--device' && bench_has_device=1

# decode FILE MODE [EXTRA...]: prints "decode prefill weights" from one GPU run.
decode() {
	local file=$1 m=$2
	shift 2
	local js
	if [ $bench_has_device = 1 ]; then
		js=$("$SINF" bench --model "$file" --device cuda --mode "$m" --prompt-tokens 64 --gen-tokens "$gen" --repeat 3 --json "$@" 2>>"$log")
	else
		js=$("$RUN" --model "$file" --device cuda --mode "$m" --prompt "$prompt" --max-tokens "$((gen + 1))" --json "$@" 2>>"$log")
	fi
	echo "$js" >>"$log"
	local d p w
	d=$(echo "$js" | grep -o '"decode_tokens_per_s":[0-9.e+-]*' | head -n 1 | cut -d: -f2)
	p=$(echo "$js" | grep -o '"prefill_tokens_per_s":[0-9.e+-]*' | head -n 1 | cut -d: -f2)
	w=$(echo "$js" | grep -o '"weights":"[a-z]*"' | head -n 1 | cut -d'"' -f4)
	echo "${d:-error} ${p:-error} ${w:--}"
}

sum ""
sum "decode on the GPU, random weights ($([ $bench_has_device = 1 ] && echo "sinf bench --device cuda, median of 3" || echo "sinf-run --device cuda --json, one run of $gen steps"))"
printf '  %-14s %-6s %-34s %12s %12s %9s\n' shape dtype "file / mode" "decode tok/s" "prefill t/s" weights | tee -a "$summary"
row() { printf '  %-14s %-6s %-34s %12s %12s %9s\n' "$@" | tee -a "$summary"; }
first=${shapes%% *}
for shape in $shapes; do
	dir=$work/$shape
	# Every dtype on the first shape; of them F16 and Q4_0 on the others.
	dts=$dtypes
	if [ "$shape" != "$first" ]; then
		dts=
		for dt in $dtypes; do case $dt in f16 | q4_0) dts="$dts $dt" ;; esac; done
	fi
	need=0
	for dt in $dts; do
		{ [ -f "$work/$shape-$dt-g1.sinf" ] && [ -f "$work/$shape-$dt-g07.sinf" ]; } || need=1
	done
	if [ $need = 1 ] && [ ! -f "$dir/config.json" ]; then
		say "$shape: synth"
		"$SINF" synth --shape "$shape" --tokenizer "$SINF_SHARED/tokenizers/llama3" --dtype f16 --vocab 128256 --quiet --force \
			--out "$dir" >>"$log" 2>&1 || { sum "  $shape: synth failed (check.log)"; continue; }
	fi
	for dt in $dts; do
		g1=$work/$shape-$dt-g1.sinf g07=$work/$shape-$dt-g07.sinf
		say "$shape $dt: convert gamma 1 and gamma 0.7"
		[ -f "$g1" ] || "$SINF" convert --model "$dir" --random --gamma 1 --dtype "$dt" --quiet --out "$g1" >>"$log" 2>&1
		[ -f "$g07" ] || "$SINF" convert --model "$dir" --random --seed 1 --dtype "$dt" --quiet --out "$g07" >>"$log" 2>&1
		say "$shape $dt: decode"
		read -r d p w <<<"$(decode "$g1" dense)"
		row "$shape" "$dt" "gamma 1, dense" "$d" "$p" "$w"
		read -r d2 p w <<<"$(decode "$g07" selectinfer --phi 0.4)"
		row "" "$dt" "gamma 0.7, selectinfer phi 0.4" "$d2" "$p" "$w"
		read -r d3 p w <<<"$(decode "$g07" gatefirst)"
		row "" "$dt" "gamma 0.7, gatefirst (default)" "$d3" "$p" "$w"
		if [ "$d" != error ] && [ "$d2" != error ] && [ "$d3" != error ]; then
			sum "$(awk -v a="$d" -v b="$d2" -v c="$d3" 'BEGIN { printf "  %-14s %-6s phi 0.4 / dense: %.2fx, gatefirst / dense: %.2fx", "", "", b / a, c / a }')"
		fi
		if [ "$shape" = "$first" ] && [ "$dt" != q8_0 ]; then
			read -r d p w <<<"$(decode "$g07" gatefirst --mapped)"
			row "" "$dt" "gamma 0.7, gatefirst, --mapped" "$d" "$p" "$w"
		fi
	done
	rm -rf "$dir" # keep the disk for the next shape; the .sinf files stay for a rerun
done
say "done in $(($(date +%s) - t0))s"
sum ""
sum "total $(($(date +%s) - t0))s; logs: $out"
[ "$tests" = PASS ]
