#!/usr/bin/env bash
# sinf-run serve against sinf-run on one .sinf file (issue 17's targets):
# decode tokens/s of one greedy client through the server and of sinf-run
# itself, at 1 and 2 threads; two clients on --parallel 2 (1 thread per
# slot) against one; time to first token; then the load test (4 clients ×
# 50 requests on --parallel 2). The machine may be shared: figures are
# medians, side by side from one run.
#
#   [REQUESTS=5] tools/serve-bench.sh FILE.sinf [MAX_TOKENS] [PORT]   (REQUESTS per client and phase)
set -euo pipefail
cd "$(dirname "$0")/.."
file=$1; n=${2:-64}; port=${3:-18090}; req=${REQUESTS:-5}
prompt="Once upon a time"
go build -o bin/ ./cmd/sinf-run ./cmd/serve-load
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
url=http://127.0.0.1:$port
serve() { # args: sinf-run serve flags; waits until /health answers
	bin/sinf-run serve --model "$file" --port "$port" --max-tokens "$n" "$@" 2>/dev/null &
	pid=$!
	for _ in $(seq 100); do curl -sf "$url/health" >/dev/null && return; sleep 0.1; done
	echo "server did not start" >&2; exit 1
}
stop() { kill -TERM "$pid"; wait "$pid" || true; }
# One greedy client at 1 and 2 threads, sinf-run and the server alternating
# (REQUESTS times each), so that both see the same load on the machine.
for t in 1 2; do
	serve --threads "$t"
	body="{\"prompt\":\"$prompt\",\"max_tokens\":$n,\"temperature\":0}"
	curl -sf "$url/v1/completions" -d "$body" >/dev/null # warm up
	: >/tmp/serve-bench.$$
	for _ in $(seq "$req"); do
		d=$(bin/sinf-run --model "$file" --prompt "$prompt" --max-tokens "$n" --threads "$t" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tokens_per_s"])')
		# the server's decode rate, and the client's: tokens after the first
		# over the wall time after the server's first token
		s=$(curl -sf -w '\n%{time_total}' "$url/v1/completions" -d "$body" | python3 -c 'import json,sys; b,w=sys.stdin.read().rsplit("\n",1); r=json.loads(b); t=r["timings"]; n=r["usage"]["completion_tokens"]; print(t["predicted_per_second"], (n-1)/(float(w)-t["ttft_ms"]/1e3), t["ttft_ms"])')
		echo "$d $s" >>/tmp/serve-bench.$$
	done
	stop
	python3 - "$t" /tmp/serve-bench.$$ <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[2]) if l.strip()]
run, srv, client, ttft = (statistics.median(c) for c in zip(*rows))
ratio = statistics.median(s / r for r, s, _, _ in rows)
cratio = statistics.median(c / r for r, _, c, _ in rows)
print(f"threads {sys.argv[1]}: sinf-run decode {run:.1f} tok/s | server, one client: decode {srv:.1f} tok/s ({ratio:.2f}x), at the client {client:.1f} tok/s ({cratio:.2f}x), ttft {ttft:.1f} ms  (medians of {len(rows)} alternating pairs)")
PY
	rm -f /tmp/serve-bench.$$
done
# --parallel 2 at 1 and 2 threads per slot: one client, then two at once,
# on the same server, three times (serve-load's two phases).
for t in 1 2; do
	serve --parallel 2 --threads "$t"
	for _ in 1 2 3; do
		bin/serve-load --url "$url" --clients 2 --requests 3 --max-tokens "$n" --json
	done >/tmp/serve-bench.$$
	stop
	python3 - "$t" /tmp/serve-bench.$$ <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
one = statistics.median(r["single_client"]["tokens_per_s"] for r in runs)
two = statistics.median(r["load"]["tokens_per_s"] for r in runs)
ratio = statistics.median(r["load"]["tokens_per_s"] / r["single_client"]["tokens_per_s"] for r in runs)
ttft = statistics.median(r["load"]["median_ttft_ms"] for r in runs)
print(f"--parallel 2, {sys.argv[1]} thread(s) per slot: one client {one:.1f} tok/s, two clients {two:.1f} tok/s aggregate ({ratio:.2f}x), two-client ttft {ttft:.1f} ms  (medians of {len(runs)} runs)")
PY
	rm -f /tmp/serve-bench.$$
done
serve --parallel 2 --queue 1 --threads 1
bin/serve-load --url "$url" --clients 4 --requests 50 --max-tokens 16
stop
