// Command serve-load is sinf-run serve's load test and benchmark client
// (package cmd/internal/serve/load): one client's greedy completions, then
// --clients clients × --requests requests at once, checked against the
// single-client answers, with the server's RSS before, halfway and after.
//
//	sinf-run serve --model F.sinf --parallel 2 &
//	go run ./cmd/serve-load --url http://127.0.0.1:8080 --clients 4 --requests 50 --max-tokens 32
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/selectinfer/sinf/cmd/internal/serve/load"
)

func main() {
	o := load.Options{}
	var prompts string
	flag.StringVar(&o.URL, "url", "http://127.0.0.1:8080", "the server")
	flag.StringVar(&o.APIKey, "api-key", os.Getenv("SINF_API_KEY"), "Bearer key, when the server wants one")
	flag.StringVar(&prompts, "prompts", "Once upon a time|The dog|Lily and Tom|One day|The sun was", "prompts separated by |")
	flag.IntVar(&o.MaxTokens, "max-tokens", 32, "max_tokens of each request")
	flag.IntVar(&o.Clients, "clients", 4, "clients sending at once")
	flag.IntVar(&o.Requests, "requests", 50, "requests per client")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.Parse()
	o.Prompts = strings.Split(prompts, "|")
	rep, err := load.Run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve-load:", err)
		os.Exit(1)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(rep)
	} else {
		for _, f := range []struct {
			name string
			f    load.Figures
		}{{"1 client", rep.Single}, {fmt.Sprintf("%d clients", rep.Clients), rep.Load}} {
			fmt.Printf("%-10s %4d requests, %6d tokens in %6.2f s: %8.1f tokens/s aggregate; median per request: ttft %.1f ms, decode %.1f tokens/s; 503 retried %d, errors %d, mismatches %d\n",
				f.name, f.f.Requests, f.f.CompletionTokens, f.f.WallSeconds, f.f.TokensPerSecond, f.f.MedianTTFTMS, f.f.MedianDecodePerS, f.f.Retried503, f.f.Errors, f.f.Mismatches)
		}
		mib := func(n int64) float64 { return float64(n) / (1 << 20) }
		fmt.Printf("server RSS (anonymous / in all, with the mapped file's pages): %.1f / %.1f MiB before, %.1f / %.1f MiB halfway, %.1f / %.1f MiB after the load\n",
			mib(rep.RSSBefore.Anon), mib(rep.RSSBefore.Total), mib(rep.RSSMid.Anon), mib(rep.RSSMid.Total), mib(rep.RSSAfter.Anon), mib(rep.RSSAfter.Total))
	}
	if rep.Load.Errors > 0 || rep.Load.Mismatches > 0 || rep.Single.Mismatches > 0 {
		os.Exit(1)
	}
}
