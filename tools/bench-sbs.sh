#!/bin/bash
# Side-by-side speed: sinf bench and llama.cpp's llama-bench, alternating, on
# the same shapes (P=64 prompt tokens, G=32 decode steps), medians of 3 runs each.
#
#   tools/bench-sbs.sh ROUNDS "MODEL.sinf GGUF|- MODE THREADS" ...
#
# MODEL.sinf: a file from `sinf synth` + `sinf convert --random`; GGUF: the same
# checkpoint converted for llama.cpp, or - for none (sparse modes have no
# llama.cpp counterpart). Env: SINF (default bin/sinf), LLAMA_BENCH (path to
# llama-bench), LLAMA_FLAGS (more llama-bench flags, e.g. "-mmp 0" to read the
# weights into RAM; default none: mmap, as sinf maps its file), DROP_CACHES=1
# (root only: before each program's run, drop the page cache and read its file
# again, so that no file keeps a lucky or unlucky physical placement: on a
# 2-vCPU VM the same file read twice moved decode by up to 10%, the same way
# in every round).
# One line per configuration and round: sinf prefill/decode tok/s, the read
# bandwidth sinf measured in the same run (GB/s, median and best of its passes)
# and decode's fraction of the median; then llama.cpp prefill/decode tok/s.
set -euo pipefail
S=${SINF:-bin/sinf}
L=${LLAMA_BENCH:-}
rounds=${1:?usage: bench-sbs.sh ROUNDS "MODEL.sinf GGUF|- MODE THREADS" ...}
shift
med='import json,statistics,sys
rows=json.load(sys.stdin)
pp=[r for r in rows if r["n_prompt"]==64 and r["n_gen"]==0][0]
tg=[r for r in rows if r["n_gen"]==32 and r["n_prompt"]==0][0]
print(round(statistics.median(pp["samples_ts"]),1), round(statistics.median(tg["samples_ts"]),2))'
fresh() { # the page cache dropped and $1 read again (DROP_CACHES=1)
	if [ "${DROP_CACHES:-}" = 1 ]; then
		sync
		echo 3 >/proc/sys/vm/drop_caches
		cat "$1" >/dev/null
	fi
}
for r in $(seq "$rounds"); do
	for cfg in "$@"; do
		read -r model gguf mode threads <<<"$cfg"
		fresh "$model"
		s=$("$S" bench --model "$model" --mode "$mode" --threads "$threads" --repeat 3 --bandwidth-mib 256 --json |
			python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["prefill_tokens_per_s"],1), round(d["decode_tokens_per_s"],2), round(d["bandwidth_bytes_per_s"]/1e9,1), round(d["bandwidth_best_bytes_per_s"]/1e9,1), round(d["roofline_fraction"],2))')
		l="- -"
		if [ "$gguf" != "-" ] && [ -n "$L" ]; then
			fresh "$gguf"
			# shellcheck disable=SC2086 # LLAMA_FLAGS is a list of flags
			l=$("$L" -m "$gguf" -p 64 -n 32 -r 3 -t "$threads" ${LLAMA_FLAGS:-} -o json 2>/dev/null | python3 -c "$med")
		fi
		echo "round $r $(basename "$model") $mode t$threads | sinf prefill decode GB/s(median best) roofline: $s | llama.cpp prefill decode: $l"
	done
done
