// Package load is the client side of sinf-run serve's load test and
// benchmark: it measures one client's greedy completions one after another
// (the reference), then Clients clients sending Requests each at once, and
// checks that every answer equals the reference for its prompt, that no
// request failed other than with a 503 (retried after a 20 ms pause), and how
// the server's RSS (GET /health rss_bytes) moved across the run.
package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Options configure a run.
type Options struct {
	URL       string   // the server, "http://127.0.0.1:8080"
	APIKey    string   // sent as a Bearer token when set
	Prompts   []string // request i sends Prompts[i % len]
	MaxTokens int
	Clients   int
	Requests  int // per client
	Client    *http.Client
}

// Figures are one phase's measurements.
type Figures struct {
	Requests         int     `json:"requests"`
	CompletionTokens int     `json:"completion_tokens"`
	WallSeconds      float64 `json:"wall_s"`
	TokensPerSecond  float64 `json:"tokens_per_s"`        // completion tokens / wall time, all clients together
	MedianTTFTMS     float64 `json:"median_ttft_ms"`      // the server's timings.ttft_ms (queue wait and prefill included)
	MedianDecodePerS float64 `json:"median_decode_per_s"` // the server's timings.predicted_per_second
	Retried503       int     `json:"retried_503"`
	Errors           int     `json:"errors"`
	Mismatches       int     `json:"mismatches"` // answers unlike the single-client reference
	FirstError       string  `json:"first_error,omitempty"`
}

// Report is a whole run.
type Report struct {
	Single    Figures `json:"single_client"`
	Load      Figures `json:"load"`
	Clients   int     `json:"clients"`
	RSSBefore RSS     `json:"rss_before"` // after the reference phase
	RSSMid    RSS     `json:"rss_mid"`    // halfway through the load
	RSSAfter  RSS     `json:"rss_after"`
}

// RSS is the server's resident memory: in all, and anonymous (heap and
// stacks, without the mapped model file's pages, which grow as requests
// touch more of the file's neurons and are not a leak).
type RSS struct {
	Total int64 `json:"bytes"`
	Anon  int64 `json:"anon_bytes"`
}

type answer struct {
	text   string
	tokens int
	ttft   float64
	decode float64
}

// complete sends one greedy completion, retrying 503s after Retry-After; it
// reports the retries.
func (o *Options) complete(ctx context.Context, prompt string) (answer, int, error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": o.MaxTokens, "temperature": 0})
	retries := 0
	for {
		req, err := http.NewRequestWithContext(ctx, "POST", o.URL+"/v1/completions", bytes.NewReader(body))
		if err != nil {
			return answer{}, retries, err
		}
		req.Header.Set("Content-Type", "application/json")
		if o.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+o.APIKey)
		}
		resp, err := o.Client.Do(req)
		if err != nil {
			return answer{}, retries, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return answer{}, retries, err
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			// The server asks for Retry-After seconds; a load test retries
			// after a short pause instead, to keep the server loaded.
			retries++
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return answer{}, retries, ctx.Err()
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return answer{}, retries, fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		var r struct {
			Choices []struct{ Text string }
			Usage   struct {
				CompletionTokens int `json:"completion_tokens"`
			}
			Timings struct {
				TTFT   float64 `json:"ttft_ms"`
				Decode float64 `json:"predicted_per_second"`
			}
		}
		if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) != 1 {
			return answer{}, retries, fmt.Errorf("bad response %.200s", b)
		}
		return answer{r.Choices[0].Text, r.Usage.CompletionTokens, r.Timings.TTFT, r.Timings.Decode}, retries, nil
	}
}

// RSS reads the server's rss_bytes and rss_anon_bytes from GET /health
// (zero when it does not say).
func (o *Options) RSS(ctx context.Context) RSS {
	req, err := http.NewRequestWithContext(ctx, "GET", o.URL+"/health", nil)
	if err != nil {
		return RSS{}
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return RSS{}
	}
	defer resp.Body.Close()
	var h struct {
		RSS  int64 `json:"rss_bytes"`
		Anon int64 `json:"rss_anon_bytes"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&h)
	return RSS{h.RSS, h.Anon}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// Run measures the reference, then the load.
func Run(ctx context.Context, o Options) (Report, error) {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Minute}
	}
	if len(o.Prompts) == 0 || o.Clients < 1 || o.Requests < 1 || o.MaxTokens < 1 {
		return Report{}, fmt.Errorf("load: want prompts, clients ≥ 1, requests ≥ 1, max tokens ≥ 1")
	}
	rep := Report{Clients: o.Clients}
	ref := make([]string, len(o.Prompts))
	var ttft, dec []float64
	// One client, each prompt twice (the first warms the server up; the
	// second is measured and must agree with the first).
	for i, p := range o.Prompts {
		first, _, err := o.complete(ctx, p)
		if err != nil {
			return rep, fmt.Errorf("reference %d: %w", i, err)
		}
		ref[i] = first.text
	}
	start := time.Now()
	for i, p := range o.Prompts {
		a, _, err := o.complete(ctx, p)
		if err != nil {
			return rep, fmt.Errorf("reference %d: %w", i, err)
		}
		if a.text != ref[i] {
			rep.Single.Mismatches++
		}
		rep.Single.Requests++
		rep.Single.CompletionTokens += a.tokens
		ttft, dec = append(ttft, a.ttft), append(dec, a.decode)
	}
	rep.Single.WallSeconds = time.Since(start).Seconds()
	rep.Single.TokensPerSecond = float64(rep.Single.CompletionTokens) / rep.Single.WallSeconds
	rep.Single.MedianTTFTMS, rep.Single.MedianDecodePerS = median(ttft), median(dec)
	rep.RSSBefore = o.RSS(ctx)

	var mu sync.Mutex
	ttft, dec = nil, nil
	var wg sync.WaitGroup
	var done int
	half := o.Clients * o.Requests / 2
	start = time.Now()
	for c := range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range o.Requests {
				i := (c*o.Requests + r) % len(o.Prompts)
				a, retries, err := o.complete(ctx, o.Prompts[i])
				mu.Lock()
				rep.Load.Retried503 += retries
				switch {
				case err != nil:
					rep.Load.Errors++
					if rep.Load.FirstError == "" {
						rep.Load.FirstError = err.Error()
					}
				default:
					if a.text != ref[i] {
						rep.Load.Mismatches++
					}
					rep.Load.CompletionTokens += a.tokens
					ttft, dec = append(ttft, a.ttft), append(dec, a.decode)
				}
				rep.Load.Requests++
				done++
				mid := done == half
				mu.Unlock()
				if mid {
					rss := o.RSS(ctx)
					mu.Lock()
					rep.RSSMid = rss
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	rep.Load.WallSeconds = time.Since(start).Seconds()
	rep.Load.TokensPerSecond = float64(rep.Load.CompletionTokens) / rep.Load.WallSeconds
	rep.Load.MedianTTFTMS, rep.Load.MedianDecodePerS = median(ttft), median(dec)
	rep.RSSAfter = o.RSS(ctx)
	return rep, nil
}
