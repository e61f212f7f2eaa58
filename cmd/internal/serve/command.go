package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/chat"
	"github.com/selectinfer/sinf/runtime/kernels"
)

// ModelFlags are the flags that open a model and its sessions, shared by
// serve and chat.
func ModelFlags() []cli.Flag {
	return append(append(runcmd.SparsityFlags(), runcmd.PenaltyFlags()...), []cli.Flag{
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "a .sinf file", Required: true},
		&cli.StringFlag{Name: "chat-template", Usage: "a file holding a Jinja chat template, in place of the model's (tokenizer_config.json chat_template)"},
		&cli.IntFlag{Name: "context", Usage: "KV cache positions per slot (0: the model's max_position_embeddings)"},
		runcmd.KVCacheFlag(),
		&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: "kernel threads (0: the physical cores this process may use; with --parallel N and without --batch, per slot, and by default divided among them)"},
		&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu, or cuda (a build with -tags cuda: make cuda)"},
		&cli.BoolFlag{Name: "mapped", Usage: "cuda: run on the registered mapped file even on a discrete GPU"},
		&cli.Float64Flag{Name: "temperature", Usage: "default sampling temperature (default: generation_config.json's when it sets do_sample, else 0: greedy)"},
		&cli.IntFlag{Name: "top-k", Usage: "default top-k (0: all; default: generation_config.json's)"},
		&cli.Float64Flag{Name: "top-p", Value: 1, Usage: "default top-p (1: off; default: generation_config.json's)"},
		&cli.IntFlag{Name: "max-tokens", Aliases: []string{"n"}, Value: 256, Usage: "default max_tokens of a request"},
		&cli.IntFlag{Name: "max-tokens-limit", Value: 4096, Usage: "the most tokens one request generates, whatever its max_tokens asks (finish_reason length there; 0: up to the context)"},
		&cli.BoolFlag{Name: "no-bos", Usage: "completions: do not add the BOS token even if the tokenizer config asks for it"},
		&cli.BoolFlag{Name: "verify", Usage: "check every tensor checksum before serving (without it, a .sinf file is checked on its first open only, as sinf-run does)"},
		&cli.BoolFlag{Name: "content-special-tokens", Usage: "chat: encode control tokens written in message content (<|im_end|>, <|eot_id|>, ...) as control tokens, as HF's apply_chat_template does; only for trusted clients (default: content is text, only the template writes control tokens)"},
	}...)
}

// Command is `sinf-run serve`.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve a .sinf model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, /v1/models, /health)",
		UsageText: "sinf-run serve --model FILE.sinf [--host 127.0.0.1] [--port 8080] [--parallel N] [--api-key KEY] [options]\n\n" +
			"curl http://127.0.0.1:8080/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'",
		Flags: append(ModelFlags(), []cli.Flag{
			&cli.StringFlag{Name: "host", Value: "127.0.0.1", Usage: "address to listen on; anything but loopback needs --api-key"},
			&cli.IntFlag{Name: "port", Value: 8080, Usage: "TCP port (0: any free one, printed at start)"},
			&cli.StringFlag{Name: "api-key", EnvVars: []string{"SINF_API_KEY"}, Usage: "require Authorization: Bearer KEY on /v1 and /metrics"},
			&cli.IntFlag{Name: "parallel", Value: 1, Usage: "slots: requests generated at once, each with its own KV cache and neuron set (on the CPU each on threads/N threads, or with --batch all as one batch)"},
			&cli.BoolFlag{Name: "batch", Usage: "with --parallel N on the CPU: the slots' decode steps run as one batch on every thread, each weight read once per step for all of them (the same tokens); on x86-64 up to four tokens share each weight's conversion; measured faster than per-slot pools on F16 files, and on small Q4_0 models faster on one CPU and slower on another (README)"},
			&cli.IntFlag{Name: "batch-groups", Value: 1, Usage: "with --batch: this many batches, each of its share of the slots (dealt in turn) on its share of the threads, with no synchronisation between them (at most --threads); more suit small models on few cores (README)"},
			&cli.IntFlag{Name: "queue", Value: 16, Usage: "requests that may wait for a slot; more get 503 with Retry-After"},
			&cli.Int64Flag{Name: "max-body", Value: 1 << 20, Usage: "request body limit in bytes (413 above)"},
			&cli.StringFlag{Name: "model-id", Usage: "the model's id in /v1/models and requests (default: the file name without .sinf)"},
			&cli.BoolFlag{Name: "drop-oldest-turns", Usage: "a chat request longer than the context loses its oldest turns (the system messages stay; the response's dropped_messages counts them) instead of a 400; a request's drop_oldest_turns overrides it"},
			&cli.BoolFlag{Name: "metrics", Usage: "serve GET /metrics (Prometheus text: requests, tokens, time to first token, busy slots)"},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: 10 * time.Second, Usage: "on SIGTERM or SIGINT, let running requests finish this long, then cancel them"},
			&cli.StringFlag{Name: "cors-origin", Usage: "one web origin (scheme://host[:port]) whose pages may call the server cross-origin; other Origin headers get 403"},
			&cli.DurationFlag{Name: "read-header-timeout", Value: 10 * time.Second, Usage: "time to send a request's headers"},
			&cli.DurationFlag{Name: "read-timeout", Value: 30 * time.Second, Usage: "time to send a whole request, headers and body"},
			&cli.DurationFlag{Name: "idle-timeout", Value: 60 * time.Second, Usage: "a keep-alive connection idle this long between requests is closed"},
			&cli.DurationFlag{Name: "write-timeout", Value: 30 * time.Second, Usage: "each write of an answer (each streamed chunk) must finish within this: a client that stops reading is dropped and its slot freed"},
			&cli.IntFlag{Name: "max-conns", Usage: "open connections at most; more wait to be accepted (0: 4 × (parallel + queue), at least 64)"},
		}...),
		Action: serveAction,
	}
}

// Opened is a model ready for serve or chat.
type Opened struct {
	L           *runcmd.Loaded
	Template    *chat.Template
	TemplateErr error
	Cfg         Config
}

// Open opens the model, its template and the slot factory from ModelFlags.
func Open(c *cli.Context, parallel int) (*Opened, error) {
	if c.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", c.Args().Slice())
	}
	if parallel < 1 || parallel > maxParallel {
		return nil, fmt.Errorf("--parallel %d: want 1 to %d (each slot holds a KV cache and buffers of its own)", parallel, maxParallel)
	}
	if err := runcmd.CheckThreads(c); err != nil {
		return nil, err
	}
	if c.Int("context") < 0 {
		return nil, fmt.Errorf("--context %d: want ≥ 0 (%s)", c.Int("context"), runcmd.ContextZero)
	}
	if c.Int("max-tokens") < 1 {
		return nil, fmt.Errorf("--max-tokens %d: want ≥ 1", c.Int("max-tokens"))
	}
	if c.Int("max-tokens-limit") < 0 {
		return nil, fmt.Errorf("--max-tokens-limit %d: want ≥ 0 (0: up to the context)", c.Int("max-tokens-limit"))
	}
	l, err := runcmd.OpenSinfWith(c.String("model"), runtime.OpenOptions{Verify: c.Bool("verify"), Cache: runtime.DefaultVerifyCache()})
	if err != nil {
		return nil, err
	}
	if err := runcmd.CheckContext(c, l.Model); err != nil {
		l.Close()
		return nil, err
	}
	if err := runcmd.SetKVCache(c, l.Model); err != nil {
		l.Close()
		return nil, err
	}
	if err := checkSlotMemory(l.Model, c.Int("context"), parallel, physicalMemory()); err != nil {
		l.Close()
		return nil, err
	}
	sp, err := runcmd.Sparsity(c, l.Model)
	if err != nil {
		l.Close()
		return nil, err
	}
	o := &Opened{L: l}
	if p := c.String("chat-template"); p != "" {
		var src []byte
		if src, err = os.ReadFile(p); err == nil {
			var special map[string]string
			if special, err = chat.SpecialTokens(l.Path+": metadata field tokenizer_config", l.Meta.TokenizerConfig); err == nil {
				o.Template, err = chat.New(p, string(src), special)
			}
		}
		if err != nil {
			l.Close()
			return nil, err
		}
	} else {
		o.Template, o.TemplateErr = chat.FromTokenizerConfig(l.Path+": metadata field tokenizer_config", l.Meta.TokenizerConfig)
	}
	// With --batch several CPU slots decode as one batch (runtime.Batcher)
	// on one pool of every thread; otherwise each slot has a pool of its own.
	// Not the default: on a 2-core VM 4 clients of a SmolLM2-135M-shape file
	// got 1.2–1.4× the tokens/s of per-slot pools at F16 but 0.8–1.0× at
	// Q4_0, where per-slot pools need no synchronisation between threads,
	// and each request's prefill holds the whole batch (README).
	device := c.String("device")
	batched := parallel > 1 && (device == "" || device == "cpu") && c.Bool("batch")
	threads := c.Int("threads")
	if threads == 0 {
		threads = kernels.DefaultThreads()
		if !batched {
			threads = max(1, threads/parallel)
		}
	}
	if g := c.Int("batch-groups"); c.IsSet("batch-groups") && (g < 1 || g > 1 && !c.Bool("batch")) { // serve's flag; chat opens here too
		l.Close()
		return nil, fmt.Errorf("--batch-groups %d: want ≥ 1, and more than 1 only with --batch", g)
	}
	dev := runcmd.DeviceOptions{Threads: threads, Context: c.Int("context"), Mapped: c.Bool("mapped")}
	sam := l.Gen.Sampling()
	sam = runcmd.SamplingFlags(c, sam)
	if err := sam.Check(runcmd.FlagName); err != nil {
		l.Close()
		return nil, err
	}
	o.Cfg = Config{Model: l, Template: o.Template, TemplateErr: o.TemplateErr, AddBOS: l.Tok.AddsBOS() && !c.Bool("no-bos"),
		ContentSpecialTokens: c.Bool("content-special-tokens"),
		NewBackend: func() (runcmd.Backend, error) {
			b, _, err := runcmd.NewGenerator(device, l, dev)
			return b, err
		},
		Parallel: parallel, Sampling: sam, Sparsity: sp, EOS: l.EOS(), MaxTokens: c.Int("max-tokens"),
		MaxTokensLimit: c.Int("max-tokens-limit"),
		ModePhi:        func(m runtime.Mode) float64 { return runcmd.ModePhi(c, l.Model, m) }}
	if batched {
		shared := runcmd.NewBatched(l, dev, min(c.Int("batch-groups"), parallel)) // a group without a slot would hold threads
		o.Cfg.NewBackend = func() (runcmd.Backend, error) { return shared.Slot(), nil }
		o.Cfg.BatchStats = shared.Stats
	}
	return o, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serveAction(c *cli.Context) error {
	host := c.String("host")
	if !isLoopback(host) && c.String("api-key") == "" {
		return fmt.Errorf("--host %s: listening beyond this machine needs --api-key KEY (or $SINF_API_KEY), so that only your clients can use it", host)
	}
	if c.Int64("max-body") < 1024 {
		return fmt.Errorf("--max-body %d: want ≥ 1024 bytes", c.Int64("max-body"))
	}
	if o := c.String("cors-origin"); o != "" {
		if err := CheckOrigin(o); err != nil {
			return err
		}
	}
	for _, f := range []string{"read-header-timeout", "read-timeout", "idle-timeout", "write-timeout"} {
		if c.Duration(f) < 0 {
			return fmt.Errorf("--%s %v: want ≥ 0 (0: none)", f, c.Duration(f))
		}
	}
	maxConns := c.Int("max-conns")
	if maxConns == 0 {
		maxConns = max(64, 4*(c.Int("parallel")+c.Int("queue")))
	}
	if maxConns <= c.Int("parallel")+c.Int("queue") {
		return fmt.Errorf("--max-conns %d: want more than --parallel + --queue (%d), so that the queue can fill and /health still answers", maxConns, c.Int("parallel")+c.Int("queue"))
	}
	o, err := Open(c, c.Int("parallel"))
	if err != nil {
		return err
	}
	defer o.L.Close()
	cfg := o.Cfg
	cfg.Queue, cfg.APIKey, cfg.MaxBodyBytes, cfg.Metrics = c.Int("queue"), c.String("api-key"), c.Int64("max-body"), c.Bool("metrics")
	cfg.Host, cfg.CORSOrigin, cfg.MaxConns = host, c.String("cors-origin"), maxConns
	cfg.ReadHeaderTimeout, cfg.ReadTimeout = c.Duration("read-header-timeout"), c.Duration("read-timeout")
	cfg.IdleTimeout, cfg.WriteTimeout = c.Duration("idle-timeout"), c.Duration("write-timeout")
	cfg.ModelID = c.String("model-id")
	cfg.DropOldestTurns = c.Bool("drop-oldest-turns")
	if cfg.ModelID == "" {
		cfg.ModelID = strings.TrimSuffix(filepath.Base(o.L.Path), ".sinf")
	}
	srv, err := New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(c.Int("port"))))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	chatNote := "chat template: yes"
	if o.Template == nil {
		chatNote = "no chat template (/v1/chat/completions answers 400)"
	}
	fmt.Fprintf(c.App.ErrWriter, "sinf-run serve: %s as %q on http://%s (%d slot(s) of %d positions, %s, mode %s)\n",
		o.L.Path, cfg.ModelID, ln.Addr(), cfg.Parallel, srv.Context(), chatNote, cfg.Sparsity.Mode)
	return Run(ctx, ln, srv, c.Duration("shutdown-timeout"), c.App.ErrWriter)
}

// Run serves on ln until ctx is done, then shuts down: it stops accepting,
// lets running requests finish for grace, then cancels them at their next
// token and waits for their handlers. The server's Config gives the read,
// header and idle timeouts, the connection cap (MaxConns) and the write
// deadline of each answer (WriteTimeout, set by the handlers per chunk).
func Run(ctx context.Context, ln net.Listener, srv *Server, grace time.Duration, log interface{ Write([]byte) (int, error) }) error {
	cfg := srv.cfg
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout, IdleTimeout: cfg.IdleTimeout,
		MaxHeaderBytes: 64 << 10}
	if hs.ReadHeaderTimeout == 0 {
		hs.ReadHeaderTimeout = hs.ReadTimeout // net/http's rule, stated
	}
	if cfg.MaxConns > 0 {
		ln = newLimitListener(ln, cfg.MaxConns)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintf(log, "sinf-run serve: shutting down (running requests get %v)\n", grace)
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := hs.Shutdown(gctx)
	if errors.Is(err, context.DeadlineExceeded) {
		srv.Cancel()
		fmt.Fprintln(log, "sinf-run serve: cancelling the requests still running")
		fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer fcancel()
		err = hs.Shutdown(fctx)
	}
	srv.Cancel()
	if err != nil {
		hs.Close()
		return err
	}
	return nil
}

// maxParallel is the most slots --parallel takes.
const maxParallel = 1024

// checkSlotMemory refuses parallel slots whose KV caches and decode buffers
// (runtime.EstimateMemory at a context of ctx, 0: the session default)
// alone exceed total, the machine's memory in bytes (0: unknown, no check),
// before any is allocated: they are allocated as the slots open, and too
// many grew the process until the machine ran out of memory.
func checkSlotMemory(m *runtime.Model, ctx, parallel int, total int64) error {
	if total <= 0 {
		return nil
	}
	if ctx <= 0 {
		ctx = min(m.Config.MaxContext(), runtime.DefaultContext)
	}
	mem := runtime.EstimateMemory(m.Config, 0, 0, ctx, 1, 1).WithKVCache(m.Config, m.KVCache)
	if need := int64(parallel) * (mem.KV + mem.Buffers); need > total {
		return fmt.Errorf("--parallel %d: the slots' KV caches and buffers at a context of %d would take %.1f GiB, more than this machine's %.1f GiB of memory; lower --parallel or --context",
			parallel, ctx, float64(need)/(1<<30), float64(total)/(1<<30))
	}
	return nil
}

// physicalMemory returns the machine's memory in bytes (Linux: MemTotal of
// /proc/meminfo), or 0 where it cannot be read.
func physicalMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
