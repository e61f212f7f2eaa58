package serve_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/cmd/internal/serve"
	"github.com/selectinfer/sinf/cmd/internal/serve/load"
	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/chat"
)

// testTemplate is a small chat template for the TinyStories model (which
// ships none).
const testTemplate = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}Story:{% endif %}"

var (
	fileOnce  sync.Once
	fileDir   string
	chatFile  string // tinystories-656k with testTemplate, γ = 0.7 random
	plainFile string // the same without a template
	jsonFile  string // with the template and JSON's punctuation and '/' as tokens 2030–2047 (the story vocabulary has no braces)
)

// files converts tinystories-656k twice (with and without a chat template)
// into a folder kept for the whole test binary.
func files(t testing.TB) (withTemplate, without string) {
	t.Helper()
	src := sharedtest.Path(t, "models", "tinystories-656k")
	fileOnce.Do(func() {
		var err error
		fileDir, err = os.MkdirTemp("", "serve-test")
		require.NoError(t, err)
		model := filepath.Join(fileDir, "model")
		require.NoError(t, os.MkdirAll(model, 0o755))
		for _, n := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
			b, err := os.ReadFile(filepath.Join(src, n))
			require.NoError(t, err)
			if n == "tokenizer_config.json" {
				var m map[string]any
				require.NoError(t, json.Unmarshal(b, &m))
				m["chat_template"] = testTemplate
				b, _ = json.Marshal(m)
			}
			require.NoError(t, os.WriteFile(filepath.Join(model, n), b, 0o644))
		}
		withJSON := filepath.Join(fileDir, "json")
		require.NoError(t, os.CopyFS(withJSON, os.DirFS(model)))
		b, err := os.ReadFile(filepath.Join(model, "tokenizer.json"))
		require.NoError(t, err)
		var tj map[string]any
		require.NoError(t, json.Unmarshal(b, &tj))
		// the last 18 ids of the vocabulary become JSON's punctuation; the
		// merges that make or use their old pieces go
		mdl := tj["model"].(map[string]any)
		vocab := mdl["vocab"].(map[string]any)
		old := map[string]bool{}
		for _, c := range []string{"{", "}", "[", "]", "\"", ":", ",", "{\"", "\":", "\",\"", "\"}", "true", "false", "null", "e", "/", "-", "."} {
			for k, id := range vocab {
				if id.(float64) == float64(2030+len(old)) {
					old[k] = true
					delete(vocab, k)
					break
				}
			}
			if _, ok := vocab[c]; ok {
				delete(vocab, c)
			}
			vocab[c] = float64(2029 + len(old))
		}
		var merges []any
		for _, mg := range mdl["merges"].([]any) {
			var a, b string
			if pair, ok := mg.([]any); ok {
				a, b = pair[0].(string), pair[1].(string)
			} else {
				a, b, _ = strings.Cut(mg.(string), " ")
			}
			if !old[a] && !old[b] && !old[a+b] {
				merges = append(merges, mg)
			}
		}
		mdl["merges"] = merges
		b, _ = json.Marshal(tj)
		require.NoError(t, os.WriteFile(filepath.Join(withJSON, "tokenizer.json"), b, 0o644))
		for _, c := range []struct {
			dir, out string
			dst      *string
		}{{model, "ts-chat.sinf", &chatFile}, {src, "ts.sinf", &plainFile}, {withJSON, "ts-json.sinf", &jsonFile}} {
			ck, err := hf.Open(c.dir)
			require.NoError(t, err)
			*c.dst = filepath.Join(fileDir, c.out)
			_, err = convert.Convert(ck, *c.dst, convert.Options{Gamma: 0.7, Delta: 0.3, Random: true, Seed: 1, FirstLayer: 0, LastLayer: 2, ExplicitRange: true})
			ck.Close()
			require.NoError(t, err)
		}
	})
	if chatFile == "" {
		t.Fatal("building the test files failed in an earlier test")
	}
	return chatFile, plainFile
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fileDir != "" {
		os.RemoveAll(fileDir)
	}
	os.Exit(code)
}

// hooked wraps a slot's backend: before each Generate it sends the prompt
// to prompts and waits on gate (when set), and each token calls onToken
// (when set); the last result is kept. noEOS generates past EOS ids.
type hooked struct {
	runcmd.Backend
	gate    chan struct{}
	onToken func(n int)
	last    chan runtime.Result
	prompts chan []int
	noEOS   bool
}

func (h *hooked) Generate(prompt []int, opt runtime.GenerateOptions) (runtime.Result, error) {
	if h.prompts != nil {
		h.prompts <- slices.Clone(prompt)
	}
	if h.gate != nil {
		<-h.gate
	}
	if h.noEOS {
		opt.EOS = nil
	}
	n := 0
	inner := opt.OnToken
	opt.OnToken = func(id int) {
		n++
		inner(id)
		if h.onToken != nil {
			h.onToken(n)
		}
	}
	r, err := h.Backend.Generate(prompt, opt)
	if h.last != nil {
		h.last <- r
	}
	return r, err
}

type setup struct {
	file      string
	threads   int // per slot (0: 1)
	maxTokens int // default max_tokens (0: 16)
	parallel  int
	queue     int
	apiKey    string
	maxBody   int64
	context   int
	limit     int    // MaxTokensLimit
	template  string // in place of the file's
	wrap      func(b runcmd.Backend) runcmd.Backend
	batched   bool // the slots decode as one batch (runcmd.Batched, as serve's Open makes them)
	groups    int  // with batched: that many batches (--batch-groups; 0: 1)

	writeTimeout   time.Duration
	readTimeout    time.Duration
	host           string
	corsOrigin     string
	contentSpecial bool
}

// newServer opens the file and serves it on an httptest server.
func newServer(t testing.TB, o setup) (*httptest.Server, *serve.Server, *runcmd.Loaded) {
	t.Helper()
	srv, l := openServer(t, o)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close() })
	return ts, srv, l
}

// openServer opens the file as a server (serve.New), not yet serving.
func openServer(t testing.TB, o setup) (*serve.Server, *runcmd.Loaded) {
	t.Helper()
	l, err := runcmd.OpenSinf(o.file, false)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	tmpl, terr := chat.FromTokenizerConfig(o.file, l.Meta.TokenizerConfig)
	cfg := serve.Config{Model: l, ModelID: "ts", Template: tmpl, TemplateErr: terr, AddBOS: l.Tok.AddsBOS(),
		NewBackend: func() (runcmd.Backend, error) {
			b, _, err := runcmd.NewGenerator("cpu", l, runcmd.DeviceOptions{Threads: max(1, o.threads), Context: o.context})
			if err == nil && o.wrap != nil {
				b = o.wrap(b)
			}
			return b, err
		},
		Parallel: max(1, o.parallel), Queue: o.queue, Sampling: runtime.SamplingParams{TopP: 1},
		Sparsity: runtime.Sparsity{Mode: runtime.SelectInfer, Phi: runtime.DefaultSparsity.Phi, Alpha: runtime.DefaultSparsity.Alpha},
		EOS:      l.EOS(), MaxTokens: cmp.Or(o.maxTokens, 16), APIKey: o.apiKey, MaxBodyBytes: max(o.maxBody, 1<<20), Metrics: true,
		WriteTimeout: o.writeTimeout, ReadTimeout: o.readTimeout, Host: o.host, CORSOrigin: o.corsOrigin, ContentSpecialTokens: o.contentSpecial,
		MaxTokensLimit: o.limit}
	if o.batched {
		shared := runcmd.NewBatched(l, runcmd.DeviceOptions{Threads: max(1, o.threads), Context: o.context}, max(1, o.groups))
		cfg.NewBackend = func() (runcmd.Backend, error) { return shared.Slot(), nil }
		cfg.BatchStats = shared.Stats
	}
	if o.template != "" {
		tmpl, terr = chat.New("test template", o.template, nil)
		require.NoError(t, terr)
		cfg.Template, cfg.TemplateErr = tmpl, nil
	}
	if terr != nil {
		cfg.Template = nil
	}
	srv, err := serve.New(cfg)
	require.NoError(t, err)
	return srv, l
}

func post(t *testing.T, url, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

type completion struct {
	Object  string
	Model   string
	Choices []struct {
		Text         string
		Message      struct{ Role, Content string }
		Delta        map[string]string
		FinishReason *string `json:"finish_reason"`
	}
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	Timings *struct {
		TTFT float64 `json:"ttft_ms"`
	}
}

func decode(t *testing.T, b []byte) completion {
	t.Helper()
	var c completion
	require.NoError(t, json.Unmarshal(b, &c), "%s", b)
	return c
}

// events reads a server-sent event stream: the data of each event, [DONE]
// included.
func events(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		d, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "not an SSE data line: %q", line)
		out = append(out, d)
	}
	return out
}

// reference generates greedily on a fresh session, as sinf-run does, and
// returns the ids and the text (EOS pieces left out).
func reference(t *testing.T, l *runcmd.Loaded, ids []int, maxTokens int) ([]int, string) {
	t.Helper()
	b, _, err := runcmd.NewGenerator("cpu", l, runcmd.DeviceOptions{Threads: 1})
	require.NoError(t, err)
	defer b.Close()
	dec := l.Tok.NewDecoder()
	var text strings.Builder
	eos := l.EOS()
	res, err := b.Generate(ids, runtime.GenerateOptions{MaxTokens: maxTokens, EOS: eos,
		Sparsity: runtime.Sparsity{Mode: runtime.SelectInfer, Phi: runtime.DefaultSparsity.Phi, Alpha: runtime.DefaultSparsity.Alpha},
		OnToken: func(id int) {
			for _, e := range eos {
				if id == e {
					return
				}
			}
			text.WriteString(dec.Add(id))
		}})
	require.NoError(t, err)
	text.WriteString(dec.Flush())
	return res.IDs, text.String()
}

// runcmdApp runs sinf-run's generation command line in-process, in the
// test servers' selectinfer mode.
func runcmdApp(o io.Writer) func(file, prompt string, n int) error {
	return func(file, prompt string, n int) error {
		app := &cli.App{Name: "sinf-run", Flags: runcmd.Flags(), Action: runcmd.Action(runcmd.OpenSinf), Writer: o, ErrWriter: io.Discard}
		return app.Run([]string{"sinf-run", "--model", file, "--prompt", prompt, "--max-tokens", fmt.Sprint(n), "--json", "--threads", "1", "--mode", "selectinfer"})
	}
}

// TestCompletion: a greedy completion returns the text sinf-run generates
// for the prompt, with usage counts and finish_reason length.
func TestCompletion(t *testing.T) {
	file, _ := files(t)
	ts, _, l := newServer(t, setup{file: file})
	prompt := "Once upon a time"
	ids := l.Tok.Encode(prompt, l.Tok.AddsBOS())
	want, text := reference(t, l, ids, 12)
	require.Len(t, want, 12, "the reference must not stop at EOS")
	code, _, b := post(t, ts.URL+"/v1/completions", `{"model":"ts","prompt":"Once upon a time","max_tokens":12,"temperature":0}`)
	require.Equal(t, 200, code, "%s", b)
	c := decode(t, b)
	require.Equal(t, "text_completion", c.Object)
	require.Equal(t, "ts", c.Model)
	require.Equal(t, text, c.Choices[0].Text)
	require.Equal(t, "length", *c.Choices[0].FinishReason)
	require.Equal(t, len(ids), c.Usage.PromptTokens)
	require.Equal(t, 12, c.Usage.CompletionTokens)
	require.Equal(t, len(ids)+12, c.Usage.TotalTokens)
	require.Greater(t, c.Timings.TTFT, 0.0)
	// The same text through sinf-run's own command line (--json).
	var o bytes.Buffer
	app := runcmdApp(&o)
	require.NoError(t, app(file, prompt, 12))
	var rep runcmd.Report
	require.NoError(t, json.Unmarshal(o.Bytes(), &rep))
	require.Equal(t, want, rep.IDs)
	require.Equal(t, rep.Text, c.Choices[0].Text)
}

// TestChatCompletion: messages go through the template, the rendered text
// is tokenized without BOS, and the reply is the greedy continuation; the
// streamed deltas add up to the same text, the first carries the role, the
// last the finish_reason, a usage chunk follows when asked, then [DONE].
func TestChatCompletion(t *testing.T) {
	file, _ := files(t)
	ts, _, l := newServer(t, setup{file: file})
	ids := l.Tok.Encode("user: Tell me a story\nStory:", false)
	_, text := reference(t, l, ids, 10)
	body := `{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":10}`
	code, _, b := post(t, ts.URL+"/v1/chat/completions", body)
	require.Equal(t, 200, code, "%s", b)
	c := decode(t, b)
	require.Equal(t, "chat.completion", c.Object)
	require.Equal(t, "assistant", c.Choices[0].Message.Role)
	require.Equal(t, text, c.Choices[0].Message.Content)
	require.Equal(t, len(ids), c.Usage.PromptTokens)

	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":10,"stream":true,"stream_options":{"include_usage":true}}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	ev := events(t, resp.Body)
	require.Equal(t, "[DONE]", ev[len(ev)-1])
	var streamed strings.Builder
	for i, e := range ev[:len(ev)-3] {
		ch := decode(t, []byte(e))
		require.Equal(t, "chat.completion.chunk", ch.Object)
		require.Nil(t, ch.Choices[0].FinishReason)
		if i == 0 {
			require.Equal(t, "assistant", ch.Choices[0].Delta["role"])
		} else {
			require.NotContains(t, ch.Choices[0].Delta, "role")
		}
		streamed.WriteString(ch.Choices[0].Delta["content"])
	}
	require.Equal(t, text, streamed.String())
	last := decode(t, []byte(ev[len(ev)-3]))
	require.Equal(t, "length", *last.Choices[0].FinishReason)
	u := decode(t, []byte(ev[len(ev)-2]))
	require.Empty(t, u.Choices)
	require.Equal(t, 10, u.Usage.CompletionTokens)
}

// TestStopStrings: a stop string split across two tokens ends the reply
// before it, is never sent (streamed or not), and finish_reason is stop.
func TestStopStrings(t *testing.T) {
	file, _ := files(t)
	ts, _, _ := newServer(t, setup{file: file})
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once upon a time","max_tokens":16,"stream":true}`))
	require.NoError(t, err)
	ev := events(t, resp.Body)
	resp.Body.Close()
	var pieces []string
	for _, e := range ev[:len(ev)-2] {
		pieces = append(pieces, decode(t, []byte(e)).Choices[0].Text)
	}
	full := strings.Join(pieces, "")
	// A stop string from the end of one piece and the start of the next.
	var stop string
	for i := 1; i+1 < len(pieces) && stop == ""; i++ {
		a, b := pieces[i], pieces[i+1]
		if len(a) >= 2 && len(b) >= 2 {
			stop = a[len(a)-2:] + b[:2]
		}
	}
	require.NotEmpty(t, stop, "pieces %q", pieces)
	want := full[:strings.Index(full, stop)]
	stopJSON, _ := json.Marshal([]string{"never-there", stop})
	code, _, b := post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":16,"stop":%s}`, stopJSON))
	require.Equal(t, 200, code, "%s", b)
	c := decode(t, b)
	require.Equal(t, want, c.Choices[0].Text)
	require.Equal(t, "stop", *c.Choices[0].FinishReason)
	require.Less(t, c.Usage.CompletionTokens, 16)

	resp, err = http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":16,"stream":true,"stop":%s}`, stopJSON)))
	require.NoError(t, err)
	ev = events(t, resp.Body)
	resp.Body.Close()
	var got strings.Builder
	for _, e := range ev[:len(ev)-2] {
		got.WriteString(decode(t, []byte(e)).Choices[0].Text)
	}
	require.Equal(t, want, got.String())
	require.Equal(t, "stop", *decode(t, []byte(ev[len(ev)-2])).Choices[0].FinishReason)
}

// TestBadRequests: each bad request is an OpenAI-style JSON error naming
// the problem, with the right status.
func TestBadRequests(t *testing.T) {
	file, plain := files(t)
	ts, _, _ := newServer(t, setup{file: file, context: 64, maxBody: 1 << 20})
	long := strings.Repeat("Once upon a time there was a dog. ", 20)
	for _, c := range []struct {
		path, body string
		status     int
		param      any
		want       string
	}{
		{"/v1/completions", `{"prompt":`, 400, nil, "the request body is not a JSON object: unexpected EOF"},
		{"/v1/completions", `[1,2]`, 400, nil, "the request body is not a JSON object"},
		{"/v1/completions", `{"prompt":"a"} {}`, 400, nil, "the request body holds data after its JSON object"},
		{"/v1/completions", `{"prompt":"a","n":2}`, 400, "n", "n: 2 choices asked; sinf generates one (n = 1)"},
		{"/v1/completions", `{"prompt":"a","model":"gpt-4"}`, 404, "model", `the model "gpt-4" does not exist: this server serves "ts"`},
		{"/v1/completions", `{"prompt":"a","frobnicate":1,"suffix":"x"}`, 400, "frobnicate", "unsupported field(s): frobnicate, suffix"},
		{"/v1/completions", `{"prompt":"a","presence_penalty":2.5}`, 400, "presence_penalty", "presence_penalty: 2.5: want a number in [−2, 2] (0: off)"},
		{"/v1/completions", `{"prompt":"a","min_p":1.5}`, 400, "min_p", "min_p: 1.5: want a fraction in [0, 1]"},
		{"/v1/completions", `{"prompt":"a","repeat_last_n":-2}`, 400, "repeat_last_n", "repeat_last_n: -2: want ≥ −1"},
		{"/v1/completions", `{"prompt":"a","logprobs":21}`, 400, "logprobs", "logprobs: 21, want 0 to 20"},
		{"/v1/completions", `{"prompt":"a","top_logprobs":2}`, 400, "top_logprobs", "unsupported field(s): top_logprobs"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":3}`, 400, "logprobs", "logprobs: want true or false"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_logprobs":3}`, 400, "top_logprobs", "top_logprobs needs logprobs: true"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":30}`, 400, "top_logprobs", "top_logprobs: 30, want 0 to 20"},
		{"/v1/completions", `{"prompt":"a","temperature":-1}`, 400, "temperature", "temperature: -1, want ≥ 0 (0: greedy)"},
		{"/v1/completions", `{"prompt":"a","top_p":0}`, 400, "top_p", "top_p: 0, want a probability in (0, 1]"},
		{"/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "max_tokens", "max_tokens: 0, want ≥ 1"},
		{"/v1/completions", `{"prompt":"a","max_tokens":"many"}`, 400, "max_tokens", `max_tokens: want an integer, found "many"`},
		{"/v1/completions", `{"prompt":"a","stop":[1]}`, 400, "stop", "stop: want a string or a list of strings"},
		{"/v1/completions", `{"prompt":"a","mode":"sparse"}`, 400, "mode", "mode: "},
		{"/v1/completions", `{"prompt":"a","phi":0.9}`, 400, "phi", "exceeds gamma"},
		{"/v1/completions", `{"prompt":["a","b"]}`, 400, "prompt", "prompt: a list of 2 prompts; sinf takes one per request"},
		{"/v1/completions", `{"prompt":[1,2]}`, 400, "prompt", "prompt: want a string (token-id prompts are not supported)"},
		{"/v1/completions", `{}`, 400, "prompt", "prompt: missing"},
		{"/v1/completions", `{"prompt":""}`, 400, "prompt", "prompt: empty"},
		{"/v1/completions", `{"prompt":"` + long + `"}`, 400, "prompt", "tokens, and the context is 64 positions (--context): shorten the prompt"},
		{"/v1/chat/completions", `{"messages":[]}`, 400, "messages", "messages: empty"},
		{"/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "messages[0].role", "messages[0].role: want a string"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0]", `messages[0].content[0]: a "image_url" part; sinf takes text parts only`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":{"a":1}}]}`, 400, "messages[0].content", "messages[0].content: want a string or a list of text parts"},
		{"/v1/chat/completions", `{"messages":[{"role":"wizard","content":"x"}]}`, 400, "messages[0].role", `messages[0].role: "wizard", want system, developer, user, assistant or tool`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"max_completion_tokens":2}`, 400, "max_completion_tokens", "give max_tokens or max_completion_tokens, not both"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "messages", "the context is 64 positions"},
	} {
		code, h, b := post(t, ts.URL+c.path, c.body)
		require.Equal(t, c.status, code, "%s: %s", c.body, b)
		require.Equal(t, "application/json", h.Get("Content-Type"))
		var e struct {
			Error struct {
				Message, Type string
				Param         any
			}
		}
		require.NoError(t, json.Unmarshal(b, &e), "%s", b)
		require.Contains(t, e.Error.Message, c.want, c.body)
		require.Equal(t, c.param, e.Error.Param, c.body)
		require.Equal(t, "invalid_request_error", e.Error.Type)
	}
	// Size limit, routes and methods.
	code, _, b := post(t, ts.URL+"/v1/completions", `{"prompt":"`+strings.Repeat("a", 2<<20)+`"}`)
	require.Equal(t, 413, code)
	require.Contains(t, string(b), "the request body is larger than the limit of 1048576 bytes (--max-body)")
	resp, err := http.Get(ts.URL + "/v1/completions")
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 405, resp.StatusCode)
	require.Contains(t, string(b), "/v1/completions does not take GET")
	resp, err = http.Get(ts.URL + "/v2/nothing")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 404, resp.StatusCode)
	// an escaped slash is another path, not the route under another method
	code, _, b = post(t, ts.URL+"/v1%2fcompletions", `{"prompt":"x"}`)
	require.Equal(t, 404, code, "%s", b)
	require.Contains(t, string(b), "no route POST /v1%2fcompletions")

	// A model without a template: chat requests are a 400 saying so.
	np, _, _ := newServer(t, setup{file: plain})
	code, _, b = post(t, np.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, 400, code)
	require.Contains(t, string(b), "this model has no chat template; use /v1/completions, or start the server with --chat-template FILE")
}

// TestAPIKey: with --api-key, /v1 needs the Bearer key; /health does not.
func TestAPIKey(t *testing.T) {
	file, _ := files(t)
	ts, _, _ := newServer(t, setup{file: file, apiKey: "s3cret"})
	code, _, b := post(t, ts.URL+"/v1/completions", `{"prompt":"Once","max_tokens":2}`)
	require.Equal(t, 401, code)
	require.Contains(t, string(b), `"code":"invalid_api_key"`)
	code, _, _ = post(t, ts.URL+"/v1/completions", `{"prompt":"Once","max_tokens":2}`, "Authorization", "Bearer wrong")
	require.Equal(t, 401, code)
	code, _, b = post(t, ts.URL+"/v1/completions", `{"prompt":"Once","max_tokens":2}`, "Authorization", "Bearer s3cret")
	require.Equal(t, 200, code, "%s", b)
	resp, err := http.Get(ts.URL + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
}

// TestModelsHealthMetrics: GET /v1/models lists the model, /health the
// slots, /metrics counts requests and tokens in Prometheus text.
func TestModelsHealthMetrics(t *testing.T) {
	file, _ := files(t)
	ts, _, _ := newServer(t, setup{file: file, parallel: 2, context: 128})
	get := func(path string) string {
		resp, err := http.Get(ts.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var models struct {
		Object string
		Data   []struct {
			ID, Object    string
			ContextLength int `json:"context_length"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(get("/v1/models")), &models))
	require.Equal(t, "list", models.Object)
	require.Len(t, models.Data, 1)
	require.Equal(t, "ts", models.Data[0].ID)
	require.Equal(t, "model", models.Data[0].Object)
	require.Equal(t, 128, models.Data[0].ContextLength)
	var health map[string]any
	require.NoError(t, json.Unmarshal([]byte(get("/health")), &health))
	require.Greater(t, health["rss_bytes"], 1e6)
	require.Greater(t, health["rss_anon_bytes"], 1e6)
	delete(health, "rss_bytes")
	delete(health, "rss_anon_bytes")
	require.Equal(t, map[string]any{"status": "ok", "slots": 2.0, "slots_idle": 2.0, "queued": 0.0}, health)
	code, _, _ := post(t, ts.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":5}`)
	require.Equal(t, 200, code)
	m := get("/metrics")
	require.Contains(t, m, "sinf_requests_total 1\n")
	require.Contains(t, m, "sinf_generated_tokens_total 5\n")
	require.Contains(t, m, "sinf_prompt_tokens_total 6\n")
	require.Contains(t, m, "sinf_time_to_first_token_seconds_count 1\n")
	require.Contains(t, m, "sinf_slots 2\n")
}

// TestQueueFull: with one slot busy and the queue full, a request gets 503
// with Retry-After; queued requests run once the slot frees.
func TestQueueFull(t *testing.T) {
	file, _ := files(t)
	gate := make(chan struct{})
	ts, _, _ := newServer(t, setup{file: file, parallel: 1, queue: 1, wrap: func(b runcmd.Backend) runcmd.Backend { return &hooked{Backend: b, gate: gate} }})
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once upon a time","max_tokens":3}`))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}
		}()
	}
	// Wait until both hold tickets (one running at the gate, one queued).
	require.Eventually(t, func() bool {
		resp, err := http.Get(ts.URL + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var h struct{ Queued, SlotsIdle int }
		json.NewDecoder(resp.Body).Decode(&h)
		return h.Queued == 1
	}, 5*time.Second, 5*time.Millisecond)
	code, h, b := post(t, ts.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":3}`)
	require.Equal(t, 503, code)
	require.Equal(t, "1", h.Get("Retry-After"))
	require.Contains(t, string(b), "the server is busy: 1 requests running and 1 waiting (--parallel, --queue); retry later")
	close(gate)
	wg.Wait()
	require.Equal(t, []int{200, 200}, codes)
}

// TestClientDisconnect: a client that goes away mid-stream stops its
// generation at the next token, and the slot serves the next request.
func TestClientDisconnect(t *testing.T) {
	file, _ := files(t)
	last := make(chan runtime.Result, 4)
	ts, _, _ := newServer(t, setup{file: file, wrap: func(b runcmd.Backend) runcmd.Backend {
		return &hooked{Backend: b, last: last, onToken: func(int) { time.Sleep(2 * time.Millisecond) }}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"Once upon a time","max_tokens":1200,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan()) // the first chunk
	cancel()
	resp.Body.Close()
	select {
	case r := <-last:
		require.Less(t, len(r.IDs), 200, "the generation ran on after the client left")
	case <-time.After(10 * time.Second):
		t.Fatal("the generation did not stop")
	}
	// The result is reported just before the handler lets the slot go: wait
	// for the slot (the server has no queue, so a request before would be
	// a 503).
	require.Eventually(t, func() bool {
		resp, err := http.Get(ts.URL + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var h struct {
			SlotsIdle int `json:"slots_idle"`
		}
		json.NewDecoder(resp.Body).Decode(&h)
		return h.SlotsIdle == 1
	}, 5*time.Second, 2*time.Millisecond)
	code, _, b := post(t, ts.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":3}`)
	require.Equal(t, 200, code, "%s", b)
	<-last
}

// TestShutdown: on the signal, Run stops accepting, lets a running request
// finish within the grace period, and cancels one that runs past it.
func TestShutdown(t *testing.T) {
	file, _ := files(t)
	for _, c := range []struct {
		grace    time.Duration
		complete bool
	}{{20 * time.Second, true}, {50 * time.Millisecond, false}} {
		_, srv, _ := newServer(t, setup{file: file, context: 512, wrap: func(b runcmd.Backend) runcmd.Backend {
			return &hooked{Backend: b, onToken: func(int) { time.Sleep(3 * time.Millisecond) }}
		}})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, stop := context.WithCancel(context.Background())
		var log bytes.Buffer
		ran := make(chan error, 1)
		go func() { ran <- serve.Run(ctx, ln, srv, c.grace, &log) }()
		url := "http://" + ln.Addr().String()
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once upon a time","max_tokens":150,"stream":true,"seed":1,"temperature":1}`))
		require.NoError(t, err)
		sc := bufio.NewScanner(resp.Body)
		require.True(t, sc.Scan())
		stop()
		var n int
		var tail string
		for sc.Scan() {
			if sc.Text() != "" {
				n++
				tail = sc.Text()
			}
		}
		resp.Body.Close()
		require.NoError(t, <-ran)
		if c.complete {
			require.Equal(t, "data: [DONE]", tail, "grace %v", c.grace)
		} else {
			require.NotEqual(t, "data: [DONE]", tail, "grace %v", c.grace)
			require.Contains(t, log.String(), "cancelling the requests still running")
		}
		_, err = http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
		require.Error(t, err, "the server still accepts after shutdown")
	}
}

// TestParallelSlots: 4 clients on 2 slots, each request with its own
// prompt and seed, get exactly what each gets alone: every slot keeps its
// own KV cache and neuron set (run with -race).
func TestParallelSlots(t *testing.T) {
	file, _ := files(t)
	ts, _, _ := newServer(t, setup{file: file, parallel: 2, queue: 8})
	prompts := []string{"Once upon a time", "The dog", "Lily and Tom", "One day"}
	body := func(i int) string {
		return fmt.Sprintf(`{"prompt":%q,"max_tokens":12,"temperature":0.9,"seed":%d}`, prompts[i%4], i)
	}
	alone := make([]string, 8)
	for i := range alone {
		code, _, b := post(t, ts.URL+"/v1/completions", body(i))
		require.Equal(t, 200, code)
		alone[i] = decode(t, b).Choices[0].Text
	}
	require.NotEqual(t, alone[0], alone[4], "different seeds must sample differently")
	var wg sync.WaitGroup
	var errs atomic.Int64
	got := make([]string, 8)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range []int{c, c + 4} {
				resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body(i)))
				if err != nil || resp.StatusCode != 200 {
					errs.Add(1)
					continue
				}
				var cm completion
				json.NewDecoder(resp.Body).Decode(&cm)
				resp.Body.Close()
				got[i] = cm.Choices[0].Text
			}
		}()
	}
	wg.Wait()
	require.Zero(t, errs.Load())
	require.Equal(t, alone, got)
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// chatServer serves chatFile on one slot for the chat loop.
func chatServer(t *testing.T, wrap func(runcmd.Backend) runcmd.Backend) (*serve.Server, *runcmd.Loaded) {
	file, _ := files(t)
	_, srv, l := newServer(t, setup{file: file, wrap: wrap})
	return srv, l
}

// TestChatLoop: sinf-run chat keeps the conversation (the second reply
// continues the rendered history), /reset forgets it, end of input quits.
func TestChatLoop(t *testing.T) {
	srv, l := chatServer(t, nil)
	_, r1 := reference(t, l, l.Tok.Encode("user: Tell me a story\nStory:", false), 16)
	_, r2 := reference(t, l, l.Tok.Encode("user: Tell me a story\nassistant: "+r1+"\nuser: And then?\nStory:", false), 16)
	require.NotEqual(t, r1, r2)
	var out bytes.Buffer
	in := strings.NewReader("Tell me a story\n/reset\n/help\n/frob x\nTell me a story\nAnd then?\n")
	require.NoError(t, serve.ChatLoop(srv, 1, "", in, &out, make(chan os.Signal)))
	require.Equal(t, "(Ctrl-C stops a reply; Ctrl-D or /exit quits; /reset starts over; /help)\n"+
		"> "+r1+"\n> (conversation cleared)\n> "+serve.ChatHelp+"\n> (unknown command /frob; /help lists them, and // at the start sends a line that begins with /)\n> "+
		r1+"\n> "+r2+"\n> \n", out.String())
}

// TestChatInterrupt: an interrupt during a reply stops that reply, keeps
// its text in the conversation, and the loop goes on; at the prompt it only
// says how to quit.
func TestChatInterrupt(t *testing.T) {
	intr := make(chan os.Signal, 1)
	var once sync.Once
	srv, l := chatServer(t, func(b runcmd.Backend) runcmd.Backend {
		return &hooked{Backend: b, onToken: func(n int) {
			time.Sleep(2 * time.Millisecond)
			if n == 4 {
				once.Do(func() { intr <- os.Interrupt })
			}
		}}
	})
	var out syncBuffer
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serve.ChatLoop(srv, 1, "Be kind.", pr, &out, intr) }()
	_, err := io.WriteString(pw, "Tell me a story\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), " [stopped]\n> ") }, 10*time.Second, time.Millisecond)
	first := out.String()
	partial := first[strings.Index(first, "> ")+2 : strings.Index(first, " [stopped]")]
	// The reply stopped within a token of the interrupt (the 4th token).
	require.Less(t, len(l.Tok.Encode(partial, false)), 8)
	_, r2 := reference(t, l, l.Tok.Encode("system: Be kind.\nuser: Tell me a story\nassistant: "+partial+"\nuser: And then?\nStory:", false), 16)
	_, err = io.WriteString(pw, "And then?\n")
	require.NoError(t, err)
	pw.Close()
	require.NoError(t, <-done)
	require.True(t, strings.HasSuffix(out.String(), "> "+r2+"\n> \n"), "%q", out.String())
}

// TestLoad: 4 clients × 50 requests on --parallel 2 (queue 1, so some get
// 503 and retry), the slots on pools of their own, decoding as one batch,
// and on --parallel 4 as two batches of two slots, a thread each:
// no other errors, every answer equals the single-client greedy one for its
// prompt, the RSS stays flat (no leak per request), and the batched server's
// steps computed more than one token on average (/metrics).
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	file, _ := files(t)
	for _, c := range []struct {
		batched          bool
		groups, parallel int
	}{{false, 0, 2}, {true, 1, 2}, {true, 2, 4}} {
		batched := c.batched
		t.Run(fmt.Sprintf("batched=%v/groups=%d", batched, c.groups), func(t *testing.T) {
			threads := 1 // per slot, as before the batch existed
			if batched {
				threads = 2 // the shared pools' threads
			}
			ts, _, _ := newServer(t, setup{file: file, parallel: c.parallel, queue: 1, context: 256, batched: batched, groups: c.groups, threads: threads})
			rep, err := load.Run(context.Background(), load.Options{URL: ts.URL, MaxTokens: 16, Clients: 4, Requests: 50,
				Prompts: []string{"Once upon a time", "The dog", "Lily and Tom", "One day", "The sun was"}})
			require.NoError(t, err)
			t.Logf("%+v", rep)
			require.Equal(t, 200, rep.Load.Requests)
			require.Zero(t, rep.Load.Errors, rep.Load.FirstError)
			require.Zero(t, rep.Load.Mismatches)
			require.Zero(t, rep.Single.Mismatches)
			require.Greater(t, rep.Load.CompletionTokens, 200*8)
			if rep.RSSBefore.Anon > 0 {
				// Flat: well under what 200 requests' KV caches or buffers would add
				// (the file's pages, also resident, are not the server's to free).
				require.Less(t, rep.RSSAfter.Anon-rep.RSSBefore.Anon, int64(16<<20), "anonymous RSS grew from %d to %d bytes", rep.RSSBefore.Anon, rep.RSSAfter.Anon)
			}
			resp, err := http.Get(ts.URL + "/metrics")
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			if !batched {
				require.NotContains(t, string(body), "sinf_batch_steps_total")
				return
			}
			var steps, tokens int
			for _, line := range strings.Split(string(body), "\n") {
				fmt.Sscanf(line, "sinf_batch_steps_total %d", &steps)
				fmt.Sscanf(line, "sinf_batch_tokens_total %d", &tokens)
			}
			require.Positive(t, steps, "%s", body)
			require.Greater(t, tokens, steps, "mean batch above 1")
		})
	}
}

// TestChatTemplateKwargs: chat_template_kwargs reach the template as
// variables; a template's raise_exception is a 400 quoting it.
func TestChatTemplateKwargs(t *testing.T) {
	_, plain := files(t)
	l, err := runcmd.OpenSinf(plain, false)
	require.NoError(t, err)
	defer l.Close()
	tmpl, err := chat.New("t.jinja", "{% if greeting is not defined %}{{ raise_exception('say greeting') }}{% endif %}{{ greeting }} {{ messages[0].content }}", nil)
	require.NoError(t, err)
	srv, err := serve.New(serve.Config{Model: l, ModelID: "ts", Template: tmpl, Parallel: 1, MaxTokens: 6, MaxBodyBytes: 1 << 20,
		Sparsity: runtime.Sparsity{Mode: runtime.Dense}, Sampling: runtime.SamplingParams{TopP: 1}, EOS: l.EOS(),
		NewBackend: func() (runcmd.Backend, error) {
			b, _, err := runcmd.NewGenerator("cpu", l, runcmd.DeviceOptions{Threads: 1})
			return b, err
		}})
	require.NoError(t, err)
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	code, _, b := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"a cat"}],"chat_template_kwargs":{"greeting":"Once upon a time,"}}`)
	require.Equal(t, 200, code, "%s", b)
	require.Equal(t, len(l.Tok.Encode("Once upon a time, a cat", false)), decode(t, b).Usage.PromptTokens)
	code, _, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"a cat"}]}`)
	require.Equal(t, 400, code)
	require.Contains(t, string(b), `"message":"chat template: say greeting"`)
}

// refSampled generates on a fresh session with sampler p (seed 0) and
// logprobs on, and returns the ids and each step's log probabilities.
func refSampled(t *testing.T, l *runcmd.Loaded, ids []int, maxTokens int, p runtime.SamplingParams, top int) ([]int, []runtime.Logprobs) {
	t.Helper()
	b, _, err := runcmd.NewGenerator("cpu", l, runcmd.DeviceOptions{Threads: 1})
	require.NoError(t, err)
	defer b.Close()
	s := runtime.NewSamplerParams(p, 0)
	s.Logprobs, s.TopLogprobs = true, top
	var lps []runtime.Logprobs
	res, err := b.Generate(ids, runtime.GenerateOptions{MaxTokens: maxTokens, EOS: l.EOS(), Sampler: s,
		Sparsity: runtime.Sparsity{Mode: runtime.SelectInfer, Phi: runtime.DefaultSparsity.Phi, Alpha: runtime.DefaultSparsity.Alpha},
		OnToken: func(int) {
			lp := s.Last()
			lp.Top = slices.Clone(lp.Top)
			lps = append(lps, lp)
		}})
	require.NoError(t, err)
	return res.IDs, lps
}

// TestLogprobs: /v1/completions' legacy logprobs (tokens, token_logprobs,
// top_logprobs, text_offset) and chat's (content entries with bytes and
// top_logprobs, streamed with their chunks) are the sampler's, token by
// token, as a session generating alone reports them.
func TestLogprobs(t *testing.T) {
	file, _ := files(t)
	ts, _, l := newServer(t, setup{file: file})
	ids := l.Tok.Encode("Once upon a time", l.Tok.AddsBOS())
	want, wantLP := refSampled(t, l, ids, 8, runtime.SamplingParams{TopP: 1}, 3)
	require.Len(t, want, 8)
	code, _, b := post(t, ts.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":8,"temperature":0,"logprobs":3}`)
	require.Equal(t, 200, code, "%s", b)
	var c struct {
		Choices []struct {
			Text     string
			Logprobs struct {
				Tokens        []string
				TokenLogprobs []float64            `json:"token_logprobs"`
				TopLogprobs   []map[string]float64 `json:"top_logprobs"`
				TextOffset    []int                `json:"text_offset"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(b, &c))
	lp := c.Choices[0].Logprobs
	require.Len(t, lp.Tokens, 8)
	off := 0
	for i, id := range want {
		require.Equal(t, string(l.Tok.TokenBytes(id)), lp.Tokens[i], "token %d", i)
		require.InDelta(t, wantLP[i].Chosen.Logprob, lp.TokenLogprobs[i], 1e-12, "token %d", i)
		require.Less(t, lp.TokenLogprobs[i], 0.0)
		require.Equal(t, off, lp.TextOffset[i])
		off += len(l.Tok.TokenBytes(id))
		require.Len(t, lp.TopLogprobs[i], 3, "token %d", i)
		// greedy: the chosen token is the most likely one
		require.InDelta(t, wantLP[i].Top[0].Logprob, lp.TopLogprobs[i][lp.Tokens[i]], 1e-12)
		for _, e := range wantLP[i].Top {
			require.InDelta(t, e.Logprob, lp.TopLogprobs[i][string(l.Tok.TokenBytes(e.ID))], 1e-12)
		}
	}

	// chat, streamed: each chunk carries the entries of its tokens
	chatIDs := l.Tok.Encode("user: Tell me a story\nStory:", false)
	want, wantLP = refSampled(t, l, chatIDs, 6, runtime.SamplingParams{TopP: 1}, 2)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":6,"stream":true,"logprobs":true,"top_logprobs":2}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	type entry struct {
		Token   string
		Logprob float64
		Bytes   []int
		Top     []struct {
			Token   string
			Logprob float64
		} `json:"top_logprobs"`
	}
	var got []entry
	var text strings.Builder
	for _, e := range events(t, resp.Body) {
		if e == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta    map[string]any
				Logprobs *struct{ Content []entry }
			}
		}
		require.NoError(t, json.Unmarshal([]byte(e), &ch), e)
		if len(ch.Choices) == 0 || ch.Choices[0].Logprobs == nil {
			continue
		}
		if s, ok := ch.Choices[0].Delta["content"].(string); ok {
			text.WriteString(s)
		}
		got = append(got, ch.Choices[0].Logprobs.Content...)
	}
	require.Len(t, got, len(want))
	var joined []byte
	for i, id := range want {
		bs := l.Tok.TokenBytes(id)
		joined = append(joined, bs...)
		require.Equal(t, string(bs), got[i].Token)
		require.Len(t, got[i].Bytes, len(bs))
		require.InDelta(t, wantLP[i].Chosen.Logprob, got[i].Logprob, 1e-12)
		require.Len(t, got[i].Top, 2)
		require.InDelta(t, wantLP[i].Top[1].Logprob, got[i].Top[1].Logprob, 1e-12)
	}
	// the decoder strips the text's leading space (stories' Strip); the bytes keep it
	require.Equal(t, strings.TrimPrefix(string(joined), " "), text.String())
}

// TestPenalties: a request's repeat, presence and frequency penalties and
// min_p reach the sampler: the greedy reply is a session's with the same
// settings, and differs from the unpenalized one.
func TestPenalties(t *testing.T) {
	file, _ := files(t)
	ts, _, l := newServer(t, setup{file: file})
	ids := l.Tok.Encode("Once upon a time", l.Tok.AddsBOS())
	plain, _ := refSampled(t, l, ids, 16, runtime.SamplingParams{TopP: 1}, 0)
	p := runtime.SamplingParams{TopP: 1, RepeatPenalty: 1.5, PresencePenalty: 0.5, FrequencyPenalty: 0.25, PenaltyLastN: 16}
	want, _ := refSampled(t, l, ids, 16, p, 0)
	require.NotEqual(t, plain, want, "the penalties change this reply")
	dec := l.Tok.NewDecoder()
	var text strings.Builder
	for _, id := range want {
		if !slices.Contains(l.EOS(), id) {
			text.WriteString(dec.Add(id))
		}
	}
	text.WriteString(dec.Flush())
	code, _, b := post(t, ts.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":16,"temperature":0,
		"repeat_penalty":1.5,"presence_penalty":0.5,"frequency_penalty":0.25,"repeat_last_n":16,"min_p":0.1}`)
	require.Equal(t, 200, code, "%s", b)
	require.Equal(t, text.String(), decode(t, b).Choices[0].Text)
}

// TestStructuredOutput: response_format json_schema makes even this tiny
// story model's greedy reply a document that parses and validates (the
// schema bounds its length: no free strings), streamed or not, on both
// endpoints; json_object starts an object; an unsupported keyword is a 400.
func TestStructuredOutput(t *testing.T) {
	files(t)
	ts, _, _ := newServer(t, setup{file: jsonFile})
	schema := `{"type":"object","properties":{"color":{"enum":["red","blue"]},"n":{"type":"integer"},"ok":{"type":"boolean"},
		"xs":{"type":"array","items":{"enum":[1,2,null]},"maxItems":3},"pt":{"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}},
		"required":["color","n","ok","xs","pt"],"additionalProperties":false}`
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("s.json", doc))
	val, err := c.Compile("s.json")
	require.NoError(t, err)
	rf := `"response_format":{"type":"json_schema","json_schema":{"name":"t","strict":true,"schema":` + schema + `}}`
	check := func(text string) {
		t.Helper()
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		require.NoError(t, err, "%q", text)
		require.NoError(t, val.Validate(inst), "%s", text)
	}
	code, _, b := post(t, ts.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":1200,"temperature":0,`+rf+`}`)
	require.Equal(t, 200, code, "%s", b)
	out := decode(t, b)
	require.Equal(t, "stop", *out.Choices[0].FinishReason, "%s", b)
	check(out.Choices[0].Text)
	// sampled, through the chat template
	code, _, b = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"JSON please"}],"max_tokens":1200,"temperature":1,"seed":3,`+rf+`}`)
	require.Equal(t, 200, code, "%s", b)
	out = decode(t, b)
	require.Equal(t, "stop", *out.Choices[0].FinishReason, "%s", b)
	check(out.Choices[0].Message.Content)

	code, _, b = post(t, ts.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":30,"temperature":0,"response_format":{"type":"json_object"}}`)
	require.Equal(t, 200, code, "%s", b)
	require.True(t, strings.HasPrefix(strings.TrimLeft(decode(t, b).Choices[0].Text, " \n\t\r"), "{"), "%s", b)

	code, _, b = post(t, ts.URL+"/v1/completions", `{"prompt":"a","response_format":{"type":"json_schema","json_schema":{"name":"t","schema":{"type":"string","pattern":"x"}}}}`)
	require.Equal(t, 400, code)
	require.Contains(t, string(b), `response_format.json_schema.schema: keyword \"pattern\" is not supported`)
	plain, _, _ := newServer(t, setup{file: chatFile})
	code, _, b = post(t, plain.URL+"/v1/completions", `{"prompt":"a","response_format":{"type":"json_object"}}`)
	require.Equal(t, 400, code)
	require.Contains(t, string(b), `response_format: this model's vocabulary has no token for \"{}[]\", so it cannot write JSON`)
	code, _, b = post(t, ts.URL+"/v1/completions", `{"prompt":"a","response_format":{"type":"xml"}}`)
	require.Equal(t, 400, code)
	require.Contains(t, string(b), `response_format.type: \"xml\", want text, json_object or json_schema`)
}

// TestContentPartsRolesLimit: text content parts are joined into the
// message's string and developer is the system role (the same reply as the
// plain form); max_tokens above --max-tokens-limit stops at the limit.
func TestContentPartsRolesLimit(t *testing.T) {
	file, _ := files(t)
	ts, _, _ := newServer(t, setup{file: file, limit: 5})
	plain := `{"messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"Tell me a story"}],"max_tokens":4}`
	parts := `{"messages":[{"role":"developer","content":[{"type":"text","text":"Be kind."}]},{"role":"user","content":[{"type":"text","text":"Tell me "},{"type":"text","text":"a story"}]}],"max_tokens":4}`
	code, _, a := post(t, ts.URL+"/v1/chat/completions", plain)
	require.Equal(t, 200, code, "%s", a)
	code, _, b := post(t, ts.URL+"/v1/chat/completions", parts)
	require.Equal(t, 200, code, "%s", b)
	ca, cb := decode(t, a), decode(t, b)
	require.Equal(t, ca.Choices[0].Message.Content, cb.Choices[0].Message.Content)
	require.Equal(t, ca.Usage.PromptTokens, cb.Usage.PromptTokens)
	code, _, b = post(t, ts.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":100000000}`)
	require.Equal(t, 200, code, "%s", b)
	c := decode(t, b)
	require.Equal(t, 5, c.Usage.CompletionTokens)
	require.Equal(t, "length", *c.Choices[0].FinishReason)
}

// TestDropOldestTurns: a conversation past the context is a 400, or with
// drop_oldest_turns the reply to its newest turns, the dropped messages
// counted in the response and its header; the chat loop drops turns too,
// says so once, and goes on.
func TestDropOldestTurns(t *testing.T) {
	file, _ := files(t)
	ts, _, l := newServer(t, setup{file: file, context: 64, maxTokens: 8})
	turn := `{"role":"user","content":"Once upon a time there was a dog named Max."},{"role":"assistant","content":"He liked to play in the park."}`
	long := `{"messages":[{"role":"system","content":"Be kind."},` + strings.Repeat(turn+",", 3) + `{"role":"user","content":"And then?"}],"max_tokens":8`
	code, _, b := post(t, ts.URL+"/v1/chat/completions", long+`}`)
	require.Equal(t, 400, code, "%s", b)
	require.Contains(t, string(b), "context_length_exceeded")
	code, h, b := post(t, ts.URL+"/v1/chat/completions", long+`,"drop_oldest_turns":true}`)
	require.Equal(t, 200, code, "%s", b)
	var resp struct {
		Dropped int `json:"dropped_messages"`
		Usage   struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &resp))
	require.Equal(t, h.Get("X-Sinf-Dropped-Messages"), fmt.Sprint(resp.Dropped))
	require.Equal(t, 0, resp.Dropped%2, "whole turns go")
	kept := 3 - resp.Dropped/2
	prompt := "system: Be kind.\n" + strings.Repeat("user: Once upon a time there was a dog named Max.\nassistant: He liked to play in the park.\n", kept) + "user: And then?\nStory:"
	require.Equal(t, len(l.Tok.Encode(prompt, false)), resp.Usage.PromptTokens)
	require.LessOrEqual(t, resp.Usage.PromptTokens, 64-8)
	more := "system: Be kind.\n" + strings.Repeat("user: Once upon a time there was a dog named Max.\nassistant: He liked to play in the park.\n", kept+1) + "user: And then?\nStory:"
	require.Greater(t, len(l.Tok.Encode(more, false)), 64-8, "no more turns than needed go")

	// the chat loop: each line adds a turn; past the context, old turns go
	_, srv, _ := newServer(t, setup{file: file, context: 48, maxTokens: 6})
	var out bytes.Buffer
	in := strings.NewReader(strings.Repeat("Once upon a time there was a dog named Max.\n", 6))
	require.NoError(t, serve.ChatLoop(srv, 1, "Be kind.", in, &out, make(chan os.Signal)))
	require.Equal(t, 1, strings.Count(out.String(), "(the conversation outgrew the context of 48 positions: its oldest turns are dropped from now on, the system message kept)"), out.String())
	require.NotContains(t, out.String(), "error:")
	require.Equal(t, 7, strings.Count(out.String(), "> "), out.String())
}

// hermesTemplate renders tools and tool calls as Qwen's templates do, in
// few words.
const hermesTemplate = "{% if tools %}tools:{% for t in tools %} {{ t.function.name }}{% endfor %}{{ '\\n' }}{% endif %}" +
	"{% for m in messages %}{{ m.role }}: {% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ '\\n' }}" +
	"{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}{{ '\\n' }}</tool_call>{% endfor %}" +
	"{% else %}{{ m.content }}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}Story:{% endif %}"

// TestTools: a named tool_choice makes even the story model's reply a call
// of that tool whose arguments validate against its parameters, as
// tool_calls with finish_reason tool_calls, streamed or not; with "auto"
// the tools reach the template and a reply that is no call is content; a
// round trip (the assistant's call, the tool's result) renders; a template
// without a tool format is a 400.
func TestTools(t *testing.T) {
	files(t)
	ts, _, l := newServer(t, setup{file: jsonFile, template: hermesTemplate})
	tools := `[{"type":"function","function":{"name":"get_weather","description":"the weather","parameters":{"type":"object",
		"properties":{"city":{"enum":["Oslo","Paris"]},"days":{"type":"integer"}},"required":["city","days"],"additionalProperties":false}}},
		{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}]`
	user := `"messages":[{"role":"user","content":"Weather in Oslo?"}]`
	named := `{` + user + `,"tools":` + tools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"max_tokens":600,"temperature":0}`
	code, _, b := post(t, ts.URL+"/v1/chat/completions", named)
	require.Equal(t, 200, code, "%s", b)
	var r struct {
		Choices []struct {
			Message struct {
				Content   *string
				ToolCalls []struct {
					ID, Type string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &r))
	ch := r.Choices[0]
	require.Equal(t, "tool_calls", ch.FinishReason, "%s", b)
	require.Nil(t, ch.Message.Content)
	require.Len(t, ch.Message.ToolCalls, 1)
	call := ch.Message.ToolCalls[0]
	require.Equal(t, "function", call.Type)
	require.True(t, strings.HasPrefix(call.ID, "call_"))
	require.Equal(t, "get_weather", call.Function.Name)
	var args struct {
		City string
		Days *int
	}
	require.NoError(t, json.Unmarshal([]byte(call.Function.Arguments), &args), call.Function.Arguments)
	require.Contains(t, []string{"Oslo", "Paris"}, args.City)
	require.NotNil(t, args.Days)
	withTools := r.Usage.PromptTokens
	require.Equal(t, len(l.Tok.Encode("tools: get_weather get_time\nuser: Weather in Oslo?\nStory:", false)), withTools)

	// streamed as OpenAI streams a call: a delta with its index, id, type
	// and name (arguments ""), one with its arguments, then finish_reason
	// tool_calls
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(strings.Replace(named, `"temperature":0`, `"temperature":0,"stream":true`, 1)))
	require.NoError(t, err)
	ev := events(t, resp.Body)
	resp.Body.Close()
	require.Equal(t, "[DONE]", ev[len(ev)-1])
	type streamedCall struct {
		Index    int
		ID, Type string
		Function struct {
			Name      string
			Arguments *string
		}
	}
	type chunk struct {
		Choices []struct {
			Delta struct {
				Role      string
				Content   *string
				ToolCalls []streamedCall `json:"tool_calls"`
			}
			FinishReason *string `json:"finish_reason"`
		}
	}
	var deltas []chunk
	for _, e := range ev[:len(ev)-1] {
		var one chunk
		require.NoError(t, json.Unmarshal([]byte(e), &one), e)
		deltas = append(deltas, one)
	}
	require.Equal(t, "assistant", deltas[0].Choices[0].Delta.Role)
	var calls []streamedCall
	for _, d := range deltas {
		calls = append(calls, d.Choices[0].Delta.ToolCalls...)
	}
	require.Len(t, calls, 2, "%q", ev)
	require.Equal(t, streamedCall{Index: 0, ID: calls[0].ID, Type: "function"}, streamedCall{Index: calls[0].Index, ID: calls[0].ID, Type: calls[0].Type})
	require.True(t, strings.HasPrefix(calls[0].ID, "call_"))
	require.Equal(t, "get_weather", calls[0].Function.Name)
	require.Equal(t, "", *calls[0].Function.Arguments)
	require.Equal(t, 0, calls[1].Index)
	require.Equal(t, call.Function.Arguments, *calls[1].Function.Arguments, "greedy: the same call")
	require.Equal(t, "tool_calls", *deltas[len(deltas)-1].Choices[0].FinishReason)

	// streamed auto: a reply that is no call streams as content, delta by
	// delta, the same text as unstreamed
	autoReq := `{` + user + `,"tools":` + tools + `,"max_tokens":6,"temperature":0}`
	resp, err = http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(strings.Replace(autoReq, `"temperature":0`, `"temperature":0,"stream":true`, 1)))
	require.NoError(t, err)
	ev = events(t, resp.Body)
	resp.Body.Close()
	var streamed strings.Builder
	pieces := 0
	for _, e := range ev[:len(ev)-1] {
		var one chunk
		require.NoError(t, json.Unmarshal([]byte(e), &one), e)
		if len(one.Choices) > 0 && one.Choices[0].Delta.Content != nil && *one.Choices[0].Delta.Content != "" {
			streamed.WriteString(*one.Choices[0].Delta.Content)
			pieces++
		}
		require.True(t, len(one.Choices) == 0 || one.Choices[0].Delta.ToolCalls == nil, e)
	}
	require.Greater(t, pieces, 1, "content streamed as generated: %q", ev)

	// auto: the model writes no call here, so the reply is content
	code, _, b = post(t, ts.URL+"/v1/chat/completions", autoReq)
	require.Equal(t, 200, code, "%s", b)
	r.Choices = nil
	require.NoError(t, json.Unmarshal(b, &r))
	require.NotNil(t, r.Choices[0].Message.Content)
	require.Empty(t, r.Choices[0].Message.ToolCalls)
	require.Equal(t, withTools, r.Usage.PromptTokens)
	require.Equal(t, *r.Choices[0].Message.Content, streamed.String())

	// the round trip: the call (arguments a JSON string) and the tool's answer
	trip := `{"messages":[{"role":"user","content":"Weather in Oslo?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
		"function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\",\"days\":1}"}}]},{"role":"tool","tool_call_id":"call_1","content":"sunny"}],
		"tools":` + tools + `,"max_tokens":4}`
	code, _, b = post(t, ts.URL+"/v1/chat/completions", trip)
	require.Equal(t, 200, code, "%s", b)
	r.Choices = nil
	require.NoError(t, json.Unmarshal(b, &r))
	prompt := "tools: get_weather get_time\nuser: Weather in Oslo?\nassistant: <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 1}}\n</tool_call>\ntool: sunny\nStory:"
	require.Equal(t, len(l.Tok.Encode(prompt, false)), r.Usage.PromptTokens)

	plain, _, _ := newServer(t, setup{file: jsonFile})
	code, _, b = post(t, plain.URL+"/v1/chat/completions", `{`+user+`,"tools":`+tools+`}`)
	require.Equal(t, 400, code)
	require.Contains(t, string(b), "no tool-call format sinf knows")
	code, _, b = post(t, ts.URL+"/v1/chat/completions", `{`+user+`,"tools":`+tools+`,"tool_choice":{"type":"function","function":{"name":"nope"}}}`)
	require.Equal(t, 400, code)
	require.Contains(t, string(b), `tool_choice: no tool named \"nope\"`)
}
