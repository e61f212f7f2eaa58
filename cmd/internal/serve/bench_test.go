package serve_test

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/runtime"
)

// BenchmarkServerDecode compares one greedy client's decode rate through
// the server (HTTP, JSON, the slot machinery; the server's own
// timings.predicted_per_second) with the same generation on a session of
// the same process, alternating request by request so that both see the
// same load on a shared machine. It reports the medians (session_tok/s,
// server_tok/s) and the median of the paired ratios (server/session).
// SINF_BENCH_FILE names the .sinf file (default: the embedded TinyStories
// model converted at γ 0.7), SINF_BENCH_THREADS the threads (default 1).
//
//	SINF_BENCH_FILE=/tmp/smol.sinf go test -run '^$' -bench ServerDecode -benchtime 8x ./cmd/internal/serve/
func BenchmarkServerDecode(b *testing.B) {
	file := os.Getenv("SINF_BENCH_FILE")
	if file == "" {
		_, file = files(b)
	}
	threads := 1
	if s := os.Getenv("SINF_BENCH_THREADS"); s != "" {
		json.Unmarshal([]byte(s), &threads)
	}
	const maxTokens = 48
	l, err := runcmd.OpenSinf(file, false)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ts, _, _ := newServer(b, setup{file: file, threads: threads, maxTokens: maxTokens})
	gen, _, err := runcmd.NewGenerator("cpu", l, runcmd.DeviceOptions{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer gen.Close()
	sp := runtime.Sparsity{Mode: runtime.SelectInfer, Phi: runtime.DefaultSparsity.Phi, Alpha: runtime.DefaultSparsity.Alpha}
	if !l.Model.Layers[len(l.Model.Layers)-1].MLP.Sliced && !l.Model.Layers[0].MLP.Sliced {
		sp.Mode = runtime.Dense
	}
	ids := l.Tok.Encode("Once upon a time", l.Tok.AddsBOS())
	body := `{"prompt":"Once upon a time","max_tokens":48,"temperature":0}`
	session := func() float64 {
		gen.Reset()
		r, err := gen.Generate(ids, runtime.GenerateOptions{MaxTokens: maxTokens, Sparsity: sp, EOS: l.EOS()})
		if err != nil {
			b.Fatal(err)
		}
		return r.DecodeTokensPerS
	}
	server := func() float64 {
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var c struct {
			Timings struct {
				P float64 `json:"predicted_per_second"`
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&c)
		resp.Body.Close()
		if err != nil || c.Timings.P == 0 {
			b.Fatalf("server: %v %+v", err, c)
		}
		return c.Timings.P
	}
	var direct, served, ratio []float64
	i := 0
	for b.Loop() {
		// Each goes first every other time: the first of a pair may find
		// the caches warmer or colder.
		var d, s float64
		if i++; i%2 == 0 {
			d, s = session(), server()
		} else {
			s, d = server(), session()
		}
		direct, served, ratio = append(direct, d), append(served, s), append(ratio, s/d)
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(med(direct), "session_tok/s")
	b.ReportMetric(med(served), "server_tok/s")
	b.ReportMetric(med(ratio), "server/session")
}
