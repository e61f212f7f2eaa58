package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/convert/synth"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/kernels"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure prefill and decode speed, peak RSS, and decode speed against the memory-bandwidth roofline",
		UsageText: "sinf bench --model FILE.sinf|DIR [--mode dense|selectinfer|coreinfer|gatefirst] [--phi F] [--alpha A]\n" +
			"   [--threads N] [--busy N] [--prompt-tokens 64] [--gen-tokens 32] [--repeat 3] [--json]",
		Flags: append(runcmd.SparsityFlags(), []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true, Usage: "a .sinf file or an HF checkpoint folder"},
			strictFlag(),
			&cli.IntFlag{Name: "threads", Usage: runcmd.ThreadsUsage + "; also used for the bandwidth measurement"},
			runcmd.KVCacheFlag(),
			&cli.IntFlag{Name: "busy", Usage: "run N busy-loop processes (one CPU each) during the measurement: speed on a device whose CPUs other work uses"},
			&cli.IntFlag{Name: "prompt-tokens", Value: 64, Usage: "prompt length P (a fixed pseudo-random sequence of valid ids)"},
			&cli.IntFlag{Name: "gen-tokens", Value: 32, Usage: "decode steps G"},
			&cli.IntFlag{Name: "repeat", Value: 3, Usage: "timed runs R; the medians are reported"},
			&cli.IntFlag{Name: "warmup", Value: 1, Usage: "untimed runs first (page in the weights)"},
			&cli.IntFlag{Name: "bandwidth-mib", Value: 512, Usage: "buffer for the read-bandwidth measurement, MiB (≥ 4× the last-level cache; 0: skip)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the timed runs to this file (go tool pprof)"},
		}...),
		Action: func(c *cli.Context) error {
			P, G, R := c.Int("prompt-tokens"), c.Int("gen-tokens"), c.Int("repeat")
			if P < 1 || G < 1 || R < 1 || c.Int("warmup") < 0 {
				return errors.New("--prompt-tokens, --gen-tokens and --repeat must be positive, --warmup not negative")
			}
			if err := runcmd.CheckThreads(c); err != nil {
				return err
			}
			if b := c.Int("busy"); b < 0 || b > kernels.MaxThreads() {
				return fmt.Errorf("--busy %d: want 0 to %d busy loops", b, kernels.MaxThreads())
			}
			if mib := c.Int("bandwidth-mib"); mib < 0 || mib > maxBandwidthMiB {
				return fmt.Errorf("--bandwidth-mib %d: want 0 (skip) to %d", mib, maxBandwidthMiB)
			}
			l, err := openModel(c.String("model"), false, c.Bool("strict"), c.App.ErrWriter)
			if err != nil {
				return err
			}
			defer l.Close()
			if err := runcmd.SetKVCache(c, l.Model); err != nil {
				return err
			}
			sp, err := runcmd.Sparsity(c, l.Model)
			if err != nil {
				return err
			}
			pool := kernels.NewPool(c.Int("threads"))
			defer pool.Close()
			opt := benchOptions{Prompt: P, Gen: G, Repeat: R, Warmup: c.Int("warmup"), BandwidthBytes: c.Int("bandwidth-mib") << 20}
			if p := c.String("cpuprofile"); p != "" {
				f, err := os.Create(p)
				if err != nil {
					return err
				}
				defer f.Close()
				opt.Profile = f
			}
			if b := c.Int("busy"); b > 0 {
				stop, err := startBusy(b)
				if err != nil {
					return err
				}
				defer stop()
			}
			rep, err := runBench(l, pool, sp, opt)
			if err != nil {
				return err
			}
			rep.Busy = c.Int("busy")
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(rep)
			}
			printBench(c.App.Writer, rep)
			return nil
		},
	}
}

type benchOptions struct {
	Prompt, Gen, Repeat, Warmup int
	BandwidthBytes              int       // 0: no bandwidth measurement
	Profile                     io.Writer // CPU profile of the timed runs; nil: none
}

// benchReport is sinf bench's result (its --json output).
type benchReport struct {
	Model              string    `json:"model"`
	Kind               string    `json:"kind"`
	Mode               string    `json:"mode"`
	Phi                float64   `json:"phi,omitempty"`
	Alpha              float64   `json:"alpha,omitempty"`
	Threads            int       `json:"threads"`
	Busy               int       `json:"busy,omitempty"` // competing busy loops (--busy)
	ISA                string    `json:"isa"`            // the kernel set (kernels.ISA; $SINF_KERNELS picks another)
	CPUFeatures        []string  `json:"cpu_features"`   // the CPU features that set uses, as /proc/cpuinfo names them
	DType              string    `json:"dtype"`          // the FFN weights' (layer 0's gate_proj)
	LMHeadDType        string    `json:"lm_head_dtype"`  // the output projection's
	KVCache            string    `json:"kv_cache"`       // the KV cache's element type (--kv-cache)
	PromptTokens       int       `json:"prompt_tokens"`
	GenTokens          int       `json:"gen_tokens"`
	Repeat             int       `json:"repeat"`
	PrefillTokensPerS  float64   `json:"prefill_tokens_per_s"`
	DecodeTokensPerS   float64   `json:"decode_tokens_per_s"`
	PrefillRuns        []float64 `json:"prefill_runs"`
	DecodeRuns         []float64 `json:"decode_runs"`
	PeakRSSBytes       int64     `json:"peak_rss_bytes"`
	MappedBytes        int64     `json:"mapped_bytes"`
	BytesPerToken      int64     `json:"bytes_per_token"`
	AttentionBytes     int64     `json:"attention_bytes_per_token"`
	FFNBytes           int64     `json:"ffn_bytes_per_token"`
	LMHeadBytes        int64     `json:"lm_head_bytes_per_token"`
	BandwidthBytesPerS float64   `json:"bandwidth_bytes_per_s"` // median of BandwidthRuns
	BandwidthBest      float64   `json:"bandwidth_best_bytes_per_s"`
	BandwidthRuns      []float64 `json:"bandwidth_runs"`
	BandwidthBuffer    int       `json:"bandwidth_buffer_bytes"`
	RooflineFraction   float64   `json:"roofline_fraction"` // against the median bandwidth
	ComputedNeurons    []int     `json:"computed_neurons"`
	// Of the timed runs' kernel calls split across threads: the fraction of
	// chunks the calling thread ran itself (1/threads when the workers keep
	// up, near 1 when they are descheduled), and of calls whose caller slept
	// waiting for a worker's chunk.
	CallerChunkFraction float64 `json:"caller_chunk_fraction,omitempty"`
	CallerParkFraction  float64 `json:"caller_park_fraction,omitempty"`
	// The mean number of threads the pool woke per call (it wakes fewer when
	// the CPUs are oversubscribed).
	ActiveThreads float64 `json:"active_threads,omitempty"`

	// MemoryModel is runtime.EstimateMemory's prediction of the peak for
	// this run in sinf-run (this desktop binary starts about 8 MiB larger).
	MemoryModel runtime.Memory `json:"memory_model"`
}

// benchPrompt returns n pseudo-random token ids in [0, vocab), the same for
// every run and every model of that vocabulary.
func benchPrompt(n, vocab int) []int {
	r := rand.New(rand.NewPCG(0x51af, 0xbe7c))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = r.IntN(vocab)
	}
	return ids
}

// runBench runs warm-up runs, then opt.Repeat timed runs of prefill (P tokens)
// and G decode steps, and reports the medians, the peak RSS (read before the
// bandwidth buffer is allocated), the weight bytes per decoded token and the
// read bandwidth of pool.
func runBench(l *runcmd.Loaded, pool *kernels.Pool, sp runtime.Sparsity, opt benchOptions) (*benchReport, error) {
	m := l.Model
	rep := &benchReport{Model: l.Path, Kind: l.Kind, Mode: sp.Mode.String(), Threads: pool.Threads(), ISA: kernels.ISA(), CPUFeatures: kernels.Features(),
		PromptTokens: opt.Prompt, GenTokens: opt.Gen, Repeat: opt.Repeat, MappedBytes: l.MappedBytes,
		LMHeadDType: m.LMHead.DType.String(), KVCache: strings.ToLower(m.KVCacheType().String())}
	if len(m.Layers) > 0 {
		rep.DType = m.Layers[0].MLP.Gate.DType.String()
	}
	if sp.Mode != runtime.Dense {
		rep.Phi, rep.Alpha = sp.Phi, sp.Alpha
	}
	s := m.NewSession(pool, opt.Prompt+opt.Gen+1)
	if s.Context() < opt.Prompt+opt.Gen+1 {
		return nil, fmt.Errorf("prompt %d + %d decode steps exceed the model's context %d", opt.Prompt, opt.Gen, s.Context())
	}
	prompt := benchPrompt(opt.Prompt, m.Config.Vocab)
	gen := runtime.GenerateOptions{MaxTokens: opt.Gen + 1, Sparsity: sp} // the first token comes from prefill
	var before kernels.PoolStats
	for r := 0; r < opt.Warmup+opt.Repeat; r++ {
		if r == opt.Warmup {
			before = pool.Stats()
		}
		if r == opt.Warmup && opt.Profile != nil {
			if err := pprof.StartCPUProfile(opt.Profile); err != nil {
				return nil, err
			}
			defer pprof.StopCPUProfile() // a no-op once stopped
		}
		s.Reset()
		res, err := s.Generate(prompt, gen)
		if err != nil {
			return nil, err
		}
		if r < opt.Warmup {
			continue
		}
		rep.PrefillRuns = append(rep.PrefillRuns, res.PrefillTokensPerS)
		rep.DecodeRuns = append(rep.DecodeRuns, res.DecodeTokensPerS)
		rep.ComputedNeurons = res.ComputedNeurons
	}
	if opt.Profile != nil {
		pprof.StopCPUProfile()
	}
	if st := pool.Stats(); st.Calls > before.Calls {
		calls, chunks := float64(st.Calls-before.Calls), float64(st.Chunks-before.Chunks)
		rep.CallerChunkFraction = float64(st.CallerChunks-before.CallerChunks) / chunks
		rep.CallerParkFraction = float64(st.CallerParks-before.CallerParks) / calls
		rep.ActiveThreads = float64(st.ThreadCalls-before.ThreadCalls) / calls
	}
	rep.PrefillTokensPerS = median(rep.PrefillRuns)
	rep.DecodeTokensPerS = median(rep.DecodeRuns)
	rep.PeakRSSBytes = runtime.PeakRSS()
	rep.MemoryModel = runtime.EstimateMemory(m.Config, l.FileBytes, tokenizerBytes(l), opt.Prompt+opt.Gen+1, opt.Prompt, pool.Threads()).WithKVCache(m.Config, m.KVCache)
	b := synth.BytesPerToken(m, s)
	rep.BytesPerToken, rep.AttentionBytes, rep.FFNBytes, rep.LMHeadBytes = b.Total(), b.Attention, b.FFN, b.LMHead
	if opt.BandwidthBytes > 0 {
		rep.BandwidthBuffer = opt.BandwidthBytes
		rep.BandwidthRuns = kernels.MeasureReadBandwidth(pool, opt.BandwidthBytes, bandwidthPasses)
		if len(rep.BandwidthRuns) > 0 { // a pass too short for the clock is dropped
			rep.BandwidthBytesPerS = median(rep.BandwidthRuns)
			rep.BandwidthBest = slices.Max(rep.BandwidthRuns)
		}
		if rep.BandwidthBytesPerS > 0 {
			rep.RooflineFraction = rep.DecodeTokensPerS * float64(rep.BytesPerToken) / rep.BandwidthBytesPerS
		}
	}
	return rep, nil
}

// bandwidthPasses is how many read passes the roofline is the median of. A
// median, like the decode figure it divides: the best of a few 30 ms passes
// catches quiet moments of a shared machine that seconds of decode do not.
const bandwidthPasses = 7

// maxBandwidthMiB bounds --bandwidth-mib (64 GiB): the buffer is allocated.
const maxBandwidthMiB = 1 << 16

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printBench(w io.Writer, r *benchReport) {
	mode := r.Mode
	if r.Mode != runtime.Dense.String() {
		mode += fmt.Sprintf(" (phi %g, alpha %g)", r.Phi, r.Alpha)
	}
	fmt.Fprintf(w, "model      %s (%s, %s mapped; weights %s, LM head %s, KV cache %s)\n", r.Model, r.Kind, human(r.MappedBytes), r.DType, r.LMHeadDType, r.KVCache)
	fmt.Fprintf(w, "run        mode %s, %d threads, kernels %s (%s); prompt %d tokens, %d decode steps, median of %d runs\n",
		mode, r.Threads, r.ISA, strings.Join(r.CPUFeatures, " "), r.PromptTokens, r.GenTokens, r.Repeat)
	if r.Busy > 0 {
		fmt.Fprintf(w, "load       %d busy-loop processes ran beside it (--busy)\n", r.Busy)
	}
	if r.Threads > 1 && r.CallerChunkFraction > 0 {
		fmt.Fprintf(w, "threads    %.2f of %d woken per call on average; the calling thread ran %.0f%% of the chunks, and slept on %.1f%% of the calls\n",
			r.ActiveThreads, r.Threads, 100*r.CallerChunkFraction, 100*r.CallerParkFraction)
	}
	fmt.Fprintf(w, "prefill    %.1f tok/s   runs %s\n", r.PrefillTokensPerS, runs(r.PrefillRuns))
	fmt.Fprintf(w, "decode     %.2f tok/s   runs %s\n", r.DecodeTokensPerS, runs(r.DecodeRuns))
	fmt.Fprintf(w, "peak RSS   %s (memory model: %s in sinf-run; this binary starts about 8 MiB larger)\n", human(r.PeakRSSBytes), human(r.MemoryModel.Total()))
	fmt.Fprintf(w, "bytes/tok  %s (attention %s, FFN %s, LM head %s)\n", human(r.BytesPerToken), human(r.AttentionBytes), human(r.FFNBytes), human(r.LMHeadBytes))
	if r.BandwidthBytesPerS > 0 {
		fmt.Fprintf(w, "bandwidth  %.2f GB/s (read, %d threads, %s buffer; median of %d passes, best %.2f GB/s)\n",
			r.BandwidthBytesPerS/1e9, r.Threads, human(int64(r.BandwidthBuffer)), len(r.BandwidthRuns), r.BandwidthBest/1e9)
		fmt.Fprintf(w, "roofline   %.1f%% (decode tok/s × bytes/token ÷ bandwidth; the bandwidth bound is %.1f tok/s; %.1f%% of the best pass)\n",
			100*r.RooflineFraction, r.BandwidthBytesPerS/float64(r.BytesPerToken), 100*r.DecodeTokensPerS*float64(r.BytesPerToken)/r.BandwidthBest)
		if r.RooflineFraction > 1 {
			fmt.Fprintln(w, "           (above 100%: the weights are served from cache; the roofline means something for models well above the last-level cache)")
		}
	}
}

func runs(v []float64) string {
	s := "["
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.1f", x)
	}
	return s + "]"
}

// tokenizerBytes is the size of the model's tokenizer.json: embedded in a
// .sinf file, or the HF folder's file.
func tokenizerBytes(l *runcmd.Loaded) int64 {
	if l.Meta != nil {
		return int64(len(l.Meta.Tokenizer))
	}
	if fi, err := os.Stat(filepath.Join(l.Path, "tokenizer.json")); err == nil {
		return fi.Size()
	}
	return 0
}
