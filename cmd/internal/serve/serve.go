// Package serve is sinf-run's OpenAI-compatible HTTP server (stdlib
// net/http): POST /v1/completions and /v1/chat/completions (non-streaming,
// or server-sent events with stream: true, the OpenAI chunk format ending
// in "data: [DONE]"), GET /v1/models, GET /health, and GET /metrics
// (Prometheus text) when enabled.
//
// Each of Config.Parallel slots is one runtime session (its own KV cache of
// Context positions, its own kernel threads) whose dynamic neurons are
// chosen at each request's prefill. A request takes its place in a bounded
// queue (Parallel + Queue places; a full queue is a 503 with Retry-After)
// before its template is rendered or its prompt tokenized, so that at most
// Parallel + Queue prompts are encoded at once, each stopped as soon as it
// passes the context. A client that disconnects, or stops reading a stream
// for WriteTimeout, stops its generation at the next token.
//
// Without an API key only loopback Host names and Config.Host are served (a
// DNS-rebinding guard); a request with an Origin header other than its own
// or Config.CORSOrigin is a 403 (a web page cannot drive the server). Chat
// message content is encoded as text: a control token written in it stays
// text unless Config.ContentSpecialTokens. The package links only format,
// runtime and runcmd, so sinf-run stays free of converter code.
package serve

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/chat"
	"github.com/selectinfer/sinf/runtime/constrain"
	"github.com/selectinfer/sinf/runtime/tokenizer"
)

// Config configures a Server.
type Config struct {
	Model       *runcmd.Loaded
	ModelID     string         // the id /v1/models lists and requests name
	Template    *chat.Template // nil: chat requests get a 400 quoting TemplateErr
	TemplateErr error
	AddBOS      bool // completions: prepend BOS (the tokenizer config's add_bos_token, unless --no-bos)
	// NewBackend opens one slot's generator (runcmd.NewGenerator).
	NewBackend func() (runcmd.Backend, error)
	Parallel   int // slots (≥ 1)
	Queue      int // requests that may wait for a slot beyond those running (≥ 0)

	Sampling runtime.SamplingParams // defaults: generation_config.json, then flags
	Sparsity runtime.Sparsity       // defaults: --mode, --phi, --alpha
	// ModePhi, when set, is the φ of a request that names a mode and no
	// phi (runcmd.ModePhi: GateFirst's differs from the others'); nil:
	// Sparsity.Phi.
	ModePhi   func(runtime.Mode) float64
	EOS       []int
	MaxTokens int // default max_tokens
	// MaxTokensLimit caps every request's max_tokens (0: no cap but the
	// context), so that one request cannot hold a slot to the context end.
	MaxTokensLimit int
	// BatchStats, when the slots decode as one batch, counts its steps and
	// tokens (/metrics).
	BatchStats func() runtime.BatchStats
	// DropOldestTurns is drop_oldest_turns' default: a chat request past
	// the context loses its oldest turns instead of a 400 (context.go).
	DropOldestTurns bool

	APIKey       string // non-empty: /v1 and /metrics need "Authorization: Bearer APIKey"
	MaxBodyBytes int64  // request body limit (413 above, before reading when Content-Length says so)
	Metrics      bool   // serve GET /metrics

	// ContentSpecialTokens encodes chat prompts with every special token
	// parsed, message content included, as HF's apply_chat_template does;
	// false (the default) keeps content text (chat.Options.KeepAsText).
	ContentSpecialTokens bool

	Host       string // the listening host, accepted as a Host name besides loopback ones (without APIKey)
	CORSOrigin string // one origin ("http://localhost:3000") allowed cross-origin requests; "": none

	// Deadlines (0: none) and the connection cap of Run.
	ReadHeaderTimeout time.Duration // request headers
	ReadTimeout       time.Duration // headers and body
	IdleTimeout       time.Duration // a keep-alive connection between requests
	WriteTimeout      time.Duration // each write of a response (each streamed chunk): a client that reads nothing for this long is dropped
	MaxConns          int           // open connections; more wait to be accepted (0: no cap)
}

// Server serves one model.
type Server struct {
	cfg     Config
	slots   chan runcmd.Backend
	all     []runcmd.Backend
	tickets chan struct{} // running + waiting requests; full: 503
	done    chan struct{} // closed by Cancel
	cancel  sync.Once
	created int64
	special []string // the tokenizer's special tokens, kept as text in chat content

	bigEncodes atomic.Int64 // encodings of a bigPrompt text running

	vocab func() *constrain.Vocab // the token trie structured output walks, built on first use

	m metrics
}

type metrics struct {
	requests, rejected, cancelled atomic.Int64
	promptTokens, genTokens       atomic.Int64
	ttftMicros, ttftCount         atomic.Int64
	busy                          atomic.Int64
}

// New opens Config.Parallel backends.
func New(cfg Config) (*Server, error) {
	if cfg.Parallel < 1 {
		return nil, fmt.Errorf("--parallel %d: want ≥ 1", cfg.Parallel)
	}
	if cfg.Queue < 0 {
		return nil, fmt.Errorf("--queue %d: want ≥ 0", cfg.Queue)
	}
	s := &Server{cfg: cfg, slots: make(chan runcmd.Backend, cfg.Parallel), tickets: make(chan struct{}, cfg.Parallel+cfg.Queue),
		done: make(chan struct{}), created: time.Now().Unix()}
	if cfg.Model != nil && cfg.Model.Tok != nil && !cfg.ContentSpecialTokens {
		s.special = cfg.Model.Tok.SpecialTokens()
	}
	s.vocab = sync.OnceValue(func() *constrain.Vocab {
		return constrain.NewVocab(cfg.Model.Model.Config.Vocab, cfg.Model.Tok.TokenBytes)
	})
	for range cfg.Parallel {
		b, err := cfg.NewBackend()
		if err != nil {
			s.Close()
			return nil, err
		}
		s.all = append(s.all, b)
		s.slots <- b
	}
	return s, nil
}

// Context returns the KV cache positions of each slot.
func (s *Server) Context() int { return s.all[0].Context() }

// Cancel makes every running generation stop at its next token and every
// waiting request fail with 503 (shutdown after the grace period).
func (s *Server) Cancel() { s.cancel.Do(func() { close(s.done) }) }

// Close releases the backends; call it once no request runs.
func (s *Server) Close() {
	for _, b := range s.all {
		b.Close()
	}
	s.all = nil
}

// Handler returns the HTTP routes behind the Host and Origin checks.
func (s *Server) Handler() http.Handler { return s.guard(s.routes()) }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/models", s.auth(s.models))
	mux.HandleFunc("POST /v1/completions", s.auth(s.completions))
	mux.HandleFunc("POST /v1/chat/completions", s.auth(s.chatCompletions))
	if s.cfg.Metrics {
		mux.HandleFunc("GET /metrics", s.auth(s.metrics))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		status, msg := http.StatusNotFound, fmt.Sprintf("no route %s %s (see GET /v1/models, POST /v1/completions, POST /v1/chat/completions, GET /health)", r.Method, r.URL.EscapedPath())
		for _, p := range []string{"/health", "/v1/models", "/v1/completions", "/v1/chat/completions", "/metrics"} {
			// EscapedPath: a route spelled with %2F is no route (ServeMux
			// matches the escaped path), not the route with another method
			if r.URL.EscapedPath() == p && (p != "/metrics" || s.cfg.Metrics) {
				status, msg = http.StatusMethodNotAllowed, fmt.Sprintf("%s does not take %s", p, r.Method)
			}
		}
		writeError(w, &apiError{Status: status, Message: msg, Type: "invalid_request_error"})
	})
	return mux
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.APIKey == "" {
		return h
	}
	want := []byte("Bearer " + s.cfg.APIKey)
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeError(w, &apiError{Status: http.StatusUnauthorized, Message: "missing or wrong API key: send Authorization: Bearer KEY", Type: "invalid_request_error", Code: "invalid_api_key"})
			return
		}
		h(w, r)
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "slots": s.cfg.Parallel, "slots_idle": len(s.slots),
		"queued": max(0, len(s.tickets)-s.cfg.Parallel), "rss_bytes": runtime.RSS(), "rss_anon_bytes": runtime.AnonRSS()})
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.cfg.ModelID, "object": "model", "created": s.created, "owned_by": "sinf",
		"context_length": s.Context(), "chat_template": s.cfg.Template != nil,
	}}})
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	m := &s.m
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP sinf_requests_total Generation requests accepted.\n# TYPE sinf_requests_total counter\nsinf_requests_total %d\n", m.requests.Load())
	fmt.Fprintf(w, "# HELP sinf_requests_rejected_total Requests refused with 503 (queue full or shutting down).\n# TYPE sinf_requests_rejected_total counter\nsinf_requests_rejected_total %d\n", m.rejected.Load())
	fmt.Fprintf(w, "# HELP sinf_requests_cancelled_total Generations stopped because the client went away or the server shut down.\n# TYPE sinf_requests_cancelled_total counter\nsinf_requests_cancelled_total %d\n", m.cancelled.Load())
	fmt.Fprintf(w, "# HELP sinf_prompt_tokens_total Prompt tokens prefilled.\n# TYPE sinf_prompt_tokens_total counter\nsinf_prompt_tokens_total %d\n", m.promptTokens.Load())
	fmt.Fprintf(w, "# HELP sinf_generated_tokens_total Tokens generated.\n# TYPE sinf_generated_tokens_total counter\nsinf_generated_tokens_total %d\n", m.genTokens.Load())
	fmt.Fprintf(w, "# HELP sinf_time_to_first_token_seconds From the request's arrival to its first generated token (queue wait and prefill included).\n# TYPE sinf_time_to_first_token_seconds summary\nsinf_time_to_first_token_seconds_sum %g\nsinf_time_to_first_token_seconds_count %d\n",
		float64(m.ttftMicros.Load())/1e6, m.ttftCount.Load())
	fmt.Fprintf(w, "# HELP sinf_slots_busy Slots generating now.\n# TYPE sinf_slots_busy gauge\nsinf_slots_busy %d\n", m.busy.Load())
	fmt.Fprintf(w, "# HELP sinf_slots Slots (--parallel).\n# TYPE sinf_slots gauge\nsinf_slots %d\n", s.cfg.Parallel)
	if s.cfg.BatchStats != nil {
		st := s.cfg.BatchStats()
		fmt.Fprintf(w, "# HELP sinf_batch_steps_total Batched decode steps.\n# TYPE sinf_batch_steps_total counter\nsinf_batch_steps_total %d\n", st.Steps)
		fmt.Fprintf(w, "# HELP sinf_batch_tokens_total Tokens the batched decode steps computed (over steps: the mean batch).\n# TYPE sinf_batch_tokens_total counter\nsinf_batch_tokens_total %d\n", st.Tokens)
	}
}

// readBody reads a request body within MaxBodyBytes: a Content-Length
// above it is refused before reading. (ReadTimeout ends with the body:
// net/http lifts the read deadline when it starts watching the connection
// for the client going away.)
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (fields, *apiError) {
	tooBig := func(limit int64) *apiError {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("the request body is larger than the limit of %d bytes (--max-body)", limit), Type: "invalid_request_error"}
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return nil, tooBig(s.cfg.MaxBodyBytes)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) {
		return nil, tooBig(maxErr.Limit)
	}
	if err != nil {
		return nil, badRequest("", "reading the request body: %v", err)
	}
	return parseBody(body)
}

// output receives a generation's text as it becomes safe to send, with the
// log probabilities (when the request asks) of the tokens generated since
// the last call: a token's entry comes with the first text sent after it,
// the tokens of a matched stop string included.
type output func(text string, lps []tokenLogprob) error

// tokenLogprob is one generated token's entry in OpenAI's chat logprobs
// ("content" list); the completions form is built from it (completionLogprobs).
type tokenLogprob struct {
	Token   string       `json:"token"`
	Logprob float64      `json:"logprob"`
	Bytes   []int        `json:"bytes"`
	Top     []topLogprob `json:"top_logprobs"`
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// tokenText returns a token's text and bytes for logprobs: the bytes it
// adds to the text (tokenizer.TokenBytes), or a special token's own piece.
func (s *Server) tokenText(id int) (string, []int) {
	b := s.cfg.Model.Tok.TokenBytes(id)
	if b == nil {
		b = []byte(s.cfg.Model.Tok.Token(id))
	}
	ints := make([]int, len(b))
	for i, c := range b {
		ints[i] = int(c)
	}
	return string(b), ints
}

func (s *Server) logprobEntry(lp runtime.Logprobs) tokenLogprob {
	e := tokenLogprob{Logprob: lp.Chosen.Logprob, Top: []topLogprob{}}
	e.Token, e.Bytes = s.tokenText(lp.Chosen.ID)
	for _, t := range lp.Top {
		tt := topLogprob{Logprob: t.Logprob}
		tt.Token, tt.Bytes = s.tokenText(t.ID)
		e.Top = append(e.Top, tt)
	}
	return e
}

// timings are sinf's per-response figures (an extension field "timings").
type timings struct {
	QueueMS            float64 `json:"queue_ms"`
	TimeToFirstTokenMS float64 `json:"ttft_ms"`
	PromptTokens       int     `json:"prompt_n"`
	PromptPerSecond    float64 `json:"prompt_per_second"`
	GeneratedTokens    int     `json:"predicted_n"`
	GeneratedPerSecond float64 `json:"predicted_per_second"` // decode steps per second, as sinf-run --json's decode_tokens_per_s
	Mode               string  `json:"mode"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type outcome struct {
	finish  string // "stop" or "length"
	usage   usage
	timings timings
}

var errCancelled = errors.New("generation cancelled")

// admit takes a queue ticket, or answers 503 when the queue is full or the
// server is shutting down. The caller releases the ticket (release).
func (s *Server) admit() *apiError {
	select {
	case <-s.done:
	default:
		select {
		case s.tickets <- struct{}{}:
			s.m.requests.Add(1)
			return nil
		default:
		}
	}
	s.m.rejected.Add(1)
	return &apiError{Status: http.StatusServiceUnavailable, Message: fmt.Sprintf("the server is busy: %d requests running and %d waiting (--parallel, --queue); retry later", s.cfg.Parallel, s.cfg.Queue),
		Type: "server_error", Code: "server_busy"}
}

// release gives back an admitted request's ticket.
func (s *Server) release() { <-s.tickets }

// generate runs one admitted request on a free slot, sending text to out as
// it becomes safe (stop strings held back and cut). It returns errCancelled
// when the client went away or the server cancelled it. The caller keeps
// the ticket.
func (s *Server) generate(ctx context.Context, arrived time.Time, ids []int, req request, out output) (outcome, error) {
	var o outcome
	var slot runcmd.Backend
	select {
	case slot = <-s.slots:
	case <-ctx.Done():
		s.m.cancelled.Add(1)
		return o, errCancelled
	case <-s.done:
		s.m.cancelled.Add(1)
		return o, errCancelled
	}
	s.m.busy.Add(1)
	defer func() {
		slot.Reset()
		s.m.busy.Add(-1)
		s.slots <- slot
	}()
	started := time.Now()
	o.timings.QueueMS = float64(started.Sub(arrived).Microseconds()) / 1e3
	seed := req.seed
	if !req.seeded {
		var b [8]byte
		_, _ = rand.Read(b[:])
		for _, c := range b {
			seed = seed<<8 | uint64(c)
		}
	}
	maxTokens := runtime.MaxNewTokens(slot.Context(), len(ids), req.maxTokens)
	if s.cfg.MaxTokensLimit > 0 {
		maxTokens = min(maxTokens, s.cfg.MaxTokensLimit)
	}
	dec := s.cfg.Model.Tok.NewDecoder()
	match := &stopMatcher{stops: req.stop}
	var outErr error
	n := 0
	sampler := runtime.NewSamplerParams(req.sampling, seed)
	sampler.Logprobs, sampler.TopLogprobs = req.logprobs, req.topLogprobs
	if req.format != nil {
		sampler.Constraint = constrain.NewMatcher(req.format, s.vocab(), s.cfg.EOS)
	}
	if c := s.toolConstraint(req.tools); c != nil {
		sampler.Constraint = c
	}
	var lps []tokenLogprob // not yet sent
	res, err := slot.Generate(ids, runtime.GenerateOptions{
		MaxTokens: maxTokens,
		Sampler:   sampler,
		Sparsity:  req.sparsity,
		EOS:       s.cfg.EOS,
		OnToken: func(id int) {
			if n++; n == 1 {
				o.timings.TimeToFirstTokenMS = float64(time.Since(arrived).Microseconds()) / 1e3
				s.m.ttftMicros.Add(time.Since(arrived).Microseconds())
				s.m.ttftCount.Add(1)
			}
			if slices.Contains(s.cfg.EOS, id) {
				return // the end marker is not text
			}
			if req.logprobs {
				lps = append(lps, s.logprobEntry(sampler.Last()))
			}
			if t := match.add(dec.Add(id)); t != "" && outErr == nil {
				outErr = out(t, lps)
				lps = nil
			}
		},
		Stop: func() bool {
			return match.matched || outErr != nil || ctx.Err() != nil || s.cancelled()
		},
	})
	s.m.promptTokens.Add(int64(len(ids)))
	s.m.genTokens.Add(int64(len(res.IDs)))
	if err != nil {
		return o, err
	}
	if outErr != nil || ctx.Err() != nil || (s.cancelled() && !match.matched && !finished(res, s.cfg.EOS, maxTokens)) {
		s.m.cancelled.Add(1)
		return o, errCancelled
	}
	if t := match.flush(dec.Flush()); t != "" || len(lps) > 0 {
		if err := out(t, lps); err != nil {
			s.m.cancelled.Add(1)
			return o, errCancelled
		}
	}
	o.finish = "length"
	if match.matched || (len(res.IDs) > 0 && slices.Contains(s.cfg.EOS, res.IDs[len(res.IDs)-1])) {
		o.finish = "stop"
	}
	o.usage = usage{PromptTokens: len(ids), CompletionTokens: len(res.IDs), TotalTokens: len(ids) + len(res.IDs)}
	o.timings.PromptTokens, o.timings.GeneratedTokens = len(ids), len(res.IDs)
	o.timings.PromptPerSecond, o.timings.GeneratedPerSecond = res.PrefillTokensPerS, res.DecodeTokensPerS
	o.timings.Mode = req.sparsity.Mode.String()
	return o, nil
}

// finished reports whether a generation ended on its own (EOS or length).
func finished(res runtime.Result, eos []int, maxTokens int) bool {
	n := len(res.IDs)
	return n >= maxTokens || (n > 0 && slices.Contains(eos, res.IDs[n-1]))
}

func (s *Server) cancelled() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// bigPrompt is the text length from which encode returns memory to the OS.
const bigPrompt = 256 << 10

// encode tokenizes an admitted request's prompt, stopping as soon as it
// passes the context (a 400 context_length_exceeded), and checks the ids
// (checkPrompt). plain are the ranges encoded as text (chat content).
func (s *Server) encode(param, text string, addBOS bool, plain [][2]int) ([]int, *apiError) {
	if len(text) >= bigPrompt {
		// A long text's transient buffers (the regex engine's rune copy,
		// 4 bytes a byte) would stay mapped until the next collection;
		// the last of a burst of long prompts hands them back.
		s.bigEncodes.Add(1)
		defer func() {
			if s.bigEncodes.Add(-1) == 0 {
				debug.FreeOSMemory()
			}
		}()
	}
	ctx := s.Context()
	o := tokenizer.EncodeOptions{AddBOS: addBOS, MaxTokens: ctx - 1}
	for _, p := range plain {
		o.Plain = append(o.Plain, tokenizer.Span{Start: p[0], End: p[1]})
	}
	ids, err := s.cfg.Model.Tok.EncodeWith(text, o)
	var long *tokenizer.TooLongError
	if errors.As(err, &long) {
		e := badRequest(param, "%s: more than %d tokens, and the context is %d positions (--context): shorten the prompt", param, long.Limit, ctx)
		e.Code = "context_length_exceeded"
		return nil, e
	}
	if err != nil {
		return nil, badRequest(param, "%v", err)
	}
	return ids, s.checkPrompt(param, ids)
}

// encodeChat renders messages through the template and encodes the prompt,
// message content as text (unless ContentSpecialTokens).
func (s *Server) encodeChat(param string, msgs json.RawMessage, vars map[string]json.RawMessage) ([]int, *apiError) {
	p, err := s.cfg.Template.RenderPrompt(msgs, true, vars, chat.Options{MaxBytes: int(max(s.cfg.MaxBodyBytes, 1<<20)) * 4, KeepAsText: s.special})
	if err != nil {
		return nil, badRequest(param, "%v", err)
	}
	return s.encode(param, p.Text, false, p.Plain)
}

// checkPrompt refuses an empty prompt, one with ids the model has no
// embedding for, and one that leaves no room in the context.
func (s *Server) checkPrompt(param string, ids []int) *apiError {
	if len(ids) == 0 {
		return badRequest(param, "%s: encodes to no tokens", param)
	}
	if v := s.cfg.Model.Model.Config.Vocab; slices.Max(ids) >= v {
		return badRequest(param, "%s: holds token id %d, outside the model's vocabulary (vocab_size %d): its tokenizer has more tokens than the model", param, slices.Max(ids), v)
	}
	if ctx := s.Context(); len(ids) >= ctx {
		e := badRequest(param, "%s: %d tokens, and the context is %d positions (--context): shorten the prompt", param, len(ids), ctx)
		e.Code = "context_length_exceeded"
		return e
	}
	return nil
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// sse writes server-sent events, each within the write deadline.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration // each event's write deadline (0: none)
}

func startSSE(w http.ResponseWriter, timeout time.Duration) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	e := &sse{w: w, rc: http.NewResponseController(w), timeout: timeout}
	e.deadline()
	w.WriteHeader(http.StatusOK)
	return e
}

// deadline gives the next write timeout to finish: a client that stops
// reading fills the socket buffers, the write fails, and the generation
// stops (its slot is freed).
func (e *sse) deadline() {
	if e.timeout > 0 {
		_ = e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
	}
}

func (e *sse) send(v any) error {
	var b strings.Builder
	b.WriteString("data: ")
	b.Write(marshal(v))
	b.WriteString("\n\n")
	e.deadline()
	if _, err := io.WriteString(e.w, b.String()); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *sse) done() {
	e.deadline()
	_, _ = io.WriteString(e.w, "data: [DONE]\n\n")
	_ = e.rc.Flush()
}
