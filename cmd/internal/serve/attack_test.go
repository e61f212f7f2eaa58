package serve_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/selectinfer/sinf/cmd/internal/runcmd"
	"github.com/selectinfer/sinf/cmd/internal/serve"
	"github.com/selectinfer/sinf/runtime"
)

// This file drives servers the way an attacker would, each on 127.0.0.1,
// with a bounded number of requests and deadlines, stopped at the test's
// end: `sinf-run serve` itself (the serve command in-process, its flags
// and their defaults) where no backend hook is needed, serve.Run with a
// hooked backend where one is.

var addrRE = regexp.MustCompile(`on http://(\S+) \(`)

// startServe runs `sinf-run serve --model file --port 0 --threads 1 args...`
// and returns its address; the server is stopped (as by SIGTERM) when the
// test ends.
func startServe(t *testing.T, file string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var log syncBuffer
	app := &cli.App{Name: "sinf-run", Commands: []*cli.Command{serve.Command()}, Writer: io.Discard, ErrWriter: &log}
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, append([]string{"sinf-run", "serve", "--model", file, "--port", "0", "--threads", "1", "--shutdown-timeout", "100ms"}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, log.String())
		case <-time.After(30 * time.Second):
			t.Error("the server did not stop")
		}
	})
	var addr string
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, log.String())
		default:
		}
		m := addrRE.FindStringSubmatch(log.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 30*time.Second, 5*time.Millisecond)
	return addr
}

// runServer serves an opened server with serve.Run on 127.0.0.1 (its
// accepted connections wrapped by accept when set) until the test ends.
func runServer(t *testing.T, o setup, accept func(net.Conn)) string {
	t.Helper()
	srv, _ := openServer(t, o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	var l net.Listener = ln
	if accept != nil {
		l = hookListener{ln, accept}
	}
	go func() { ran <- serve.Run(ctx, l, srv, 100*time.Millisecond, io.Discard) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-ran:
		case <-time.After(30 * time.Second):
			t.Error("the server did not stop")
		}
		srv.Close()
	})
	return ln.Addr().String()
}

type hookListener struct {
	net.Listener
	accept func(net.Conn)
}

func (l hookListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accept(c)
	}
	return c, err
}

// rawRequest writes raw bytes on a new connection and returns it.
func rawRequest(t *testing.T, addr, data string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	if data != "" {
		_, err = io.WriteString(c, data)
		require.NoError(t, err)
	}
	return c
}

// closedBy reads c until the server closes it, within limit: it returns
// what was read, and fails if the server kept it open.
func closedBy(t *testing.T, c net.Conn, limit time.Duration) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(limit)))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open past %v (read %q)", limit, b)
	}
	return string(b)
}

func health(t *testing.T, base string) (idle int) {
	resp, err := http.Get(base + "/health")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var h struct {
		SlotsIdle int `json:"slots_idle"`
	}
	json.NewDecoder(resp.Body).Decode(&h)
	return h.SlotsIdle
}

// TestAdmissionBeforeEncoding: with the only slot busy and no queue, a
// request is refused (503) before its prompt is tokenized or its template
// rendered: a prompt far past the context gets 503, not the 400 that
// encoding it would give (before: 400, encoding first); once the slot is
// free the same prompt is a 400 naming the limit the encoding stopped at.
func TestAdmissionBeforeEncoding(t *testing.T) {
	file, _ := files(t)
	gate := make(chan struct{})
	addr := runServer(t, setup{file: file, context: 64, wrap: func(b runcmd.Backend) runcmd.Backend { return &hooked{Backend: b, gate: gate} }}, nil)
	base := "http://" + addr
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once upon a time","max_tokens":2}`))
		if err != nil {
			first <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return health(t, base) == 0 }, 10*time.Second, 5*time.Millisecond)
	long := strings.Repeat("Once upon a time there was a dog. ", 20000) // 680 kB
	code, _, b := post(t, base+"/v1/completions", `{"prompt":"`+long+`"}`)
	require.Equal(t, 503, code, "%s", b)
	code, _, b = post(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"`+long+`"}]}`)
	require.Equal(t, 503, code, "%s", b)
	close(gate)
	require.Equal(t, 200, <-first)
	code, _, b = post(t, base+"/v1/completions", `{"prompt":"`+long+`"}`)
	require.Equal(t, 400, code)
	require.Contains(t, string(b), `"prompt: more than 63 tokens, and the context is 64 positions (--context): shorten the prompt"`)
	require.Contains(t, string(b), `"code":"context_length_exceeded"`)
}

// TestWriteDeadline: a streaming client that stops reading (small socket
// buffers on both ends, so that writes block after a hundred chunks or so)
// is dropped after the write timeout and its slot freed while it still
// holds the connection open (before: the slot stayed busy until the client
// closed, and every other request got 503).
func TestWriteDeadline(t *testing.T) {
	file, _ := files(t)
	addr := runServer(t, setup{file: file, context: 512, writeTimeout: 300 * time.Millisecond,
		wrap: func(b runcmd.Backend) runcmd.Backend { return &hooked{Backend: b, noEOS: true} }},
		func(c net.Conn) { c.(*net.TCPConn).SetWriteBuffer(4096) })
	base := "http://" + addr
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.(*net.TCPConn).SetReadBuffer(4096))
	body := `{"prompt":"Once upon a time","max_tokens":500,"stream":true,"temperature":1,"seed":3}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	start := time.Now()
	require.Eventually(t, func() bool { return health(t, base) == 0 }, 10*time.Second, time.Millisecond, "the generation never started")
	require.Eventually(t, func() bool { return health(t, base) == 1 }, 30*time.Second, 10*time.Millisecond, "the slot stayed busy")
	t.Logf("slot freed %v after the request (the client never read, its connection open)", time.Since(start).Round(time.Millisecond))
	code, _, b := post(t, base+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":3}`)
	require.Equal(t, 200, code, "%s", b)
}

// TestReadTimeoutSparesGeneration: --read-timeout bounds reading the
// request, not the answer: a generation that runs past it completes
// (net/http lifts the read deadline once the body is read; were it kept,
// its background read would cancel the request at the deadline).
func TestReadTimeoutSparesGeneration(t *testing.T) {
	file, _ := files(t)
	addr := runServer(t, setup{file: file, context: 512, readTimeout: 200 * time.Millisecond,
		wrap: func(b runcmd.Backend) runcmd.Backend {
			return &hooked{Backend: b, noEOS: true, onToken: func(int) { time.Sleep(5 * time.Millisecond) }}
		}}, nil)
	start := time.Now()
	code, _, b := post(t, "http://"+addr+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":100}`)
	require.Equal(t, 200, code, "%s", b)
	require.Equal(t, 100, decode(t, b).Usage.CompletionTokens)
	require.Greater(t, time.Since(start), 400*time.Millisecond, "the generation must outlast the read timeout for the test to mean anything")
}

// TestRequestLimits drives `sinf-run serve` with short read timeouts: a
// Content-Length above --max-body is a 413 before any of the body is sent
// (before: the server waited for the body); half-sent headers, a half-sent
// body and an idle keep-alive after a 401 are closed by the server (before:
// open for as long as the client liked).
func TestRequestLimits(t *testing.T) {
	file, _ := files(t)
	addr := startServe(t, file, "--max-body", "4096", "--read-header-timeout", "300ms", "--read-timeout", "500ms", "--idle-timeout", "500ms", "--api-key", "k")

	c := rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "no answer to a too-large Content-Length before its body")
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, 413, resp.StatusCode, "%s", b)
	require.Contains(t, string(b), "the request body is larger than the limit of 4096 bytes (--max-body)")

	c = rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
	closedBy(t, c, 5*time.Second)

	c = rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer k\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
	closedBy(t, c, 5*time.Second)

	c = rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
	got := closedBy(t, c, 5*time.Second)
	require.True(t, strings.HasPrefix(got, "HTTP/1.1 401 "), "%q", got)
}

// TestConnectionCap: with --max-conns 3, three idle connections hold every
// place: a fourth is not served until one of them closes (before: no cap).
func TestConnectionCap(t *testing.T) {
	file, _ := files(t)
	addr := startServe(t, file, "--max-conns", "3", "--queue", "1")
	var idle []net.Conn
	for range 3 {
		idle = append(idle, rawRequest(t, addr, ""))
	}
	time.Sleep(100 * time.Millisecond) // let the server accept them (it takes backlog order)
	c := rawRequest(t, addr, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
	_, err := http.ReadResponse(bufio.NewReader(c), nil)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a fourth connection was served: %v", err)
	idle[0].Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
}

// TestHostAndOrigin: without --api-key only loopback Host names and --host
// are served (a DNS-rebinding request, Host: attacker.example, is a 403;
// before: 200); a cross-origin request is a 403 unless it comes from
// --cors-origin, whose preflight is answered.
func TestHostAndOrigin(t *testing.T) {
	file, _ := files(t)
	ts, _, _ := newServer(t, setup{file: file, host: "box.lan", corsOrigin: "http://localhost:3000"})
	do := func(method, host string, header ...string) (int, http.Header, string) {
		t.Helper()
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(`{"prompt":"Once","max_tokens":1}`)
		}
		req, err := http.NewRequest(method, ts.URL+"/v1/completions", body)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	code, _, b := do("POST", "attacker.example")
	require.Equal(t, 403, code, b)
	require.Contains(t, b, `Host \"attacker.example\" is not a name of this server: without --api-key only loopback names (localhost, 127.0.0.1, [::1]) and --host are served`)
	code, _, _ = do("POST", "attacker.example:8080")
	require.Equal(t, 403, code)
	for _, h := range []string{"", "localhost:8080", "LOCALHOST", "127.0.0.2", "[::1]:8080", "box.lan:8080", "app.localhost"} {
		code, _, b = do("POST", h)
		require.Equal(t, 200, code, "Host %q: %s", h, b)
	}
	code, _, b = do("POST", "", "Origin", "http://evil.example", "Content-Type", "text/plain")
	require.Equal(t, 403, code, b)
	require.Contains(t, b, `cross-origin request from \"http://evil.example\" refused: start the server with --cors-origin http://evil.example to allow it`)
	code, _, _ = do("POST", "", "Origin", "null")
	require.Equal(t, 403, code)
	code, _, _ = do("POST", "", "Origin", "http://"+strings.TrimPrefix(ts.URL, "http://"))
	require.Equal(t, 200, code, "same origin")
	code, h, _ := do("OPTIONS", "", "Origin", "http://localhost:3000", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type")
	require.Equal(t, 204, code)
	require.Equal(t, "http://localhost:3000", h.Get("Access-Control-Allow-Origin"))
	require.Contains(t, h.Get("Access-Control-Allow-Methods"), "POST")
	require.Contains(t, h.Get("Access-Control-Allow-Headers"), "Content-Type")
	code, h, b = do("POST", "", "Origin", "http://localhost:3000")
	require.Equal(t, 200, code, b)
	require.Equal(t, "http://localhost:3000", h.Get("Access-Control-Allow-Origin"))
	code, _, _ = do("OPTIONS", "", "Origin", "http://localhost:3001", "Access-Control-Request-Method", "POST")
	require.Equal(t, 403, code)

	// With an API key the server may have any name; the key guards it.
	ks, _, _ := newServer(t, setup{file: file, apiKey: "k"})
	req, _ := http.NewRequest("POST", ks.URL+"/v1/completions", strings.NewReader(`{"prompt":"Once","max_tokens":1}`))
	req.Host = "api.example.com"
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	require.NoError(t, serve.CheckOrigin("http://localhost:3000"))
	for _, bad := range []string{"*", "localhost:3000", "http://localhost:3000/", "http://a/b", "ftp://x"} {
		require.Error(t, serve.CheckOrigin(bad), bad)
	}
}

// TestChatContentIsText: a message that writes the model's control tokens
// (TinyStories' <|end_story|>, its EOS) reaches the model as text, through
// /v1/chat/completions and through sinf-run chat alike (before: as the EOS
// id); --content-special-tokens gives the old encoding.
func TestChatContentIsText(t *testing.T) {
	file, _ := files(t)
	// TinyStories' added tokens are matched after its normalizer, which
	// writes ▁ for a space: a space before each makes them match.
	const content = "Once <|end_story|> upon <|start_story|>"
	body := `{"messages":[{"role":"user","content":"` + content + `"}],"max_tokens":2}`
	for _, special := range []bool{false, true} {
		prompts := make(chan []int, 4)
		o := setup{file: file, contentSpecial: special, wrap: func(b runcmd.Backend) runcmd.Backend { return &hooked{Backend: b, prompts: prompts} }}
		ts, srv, l := newServer(t, o)
		control := func(ids []int) int {
			n := 0
			for _, id := range ids {
				if id == l.Tok.BOS() || slices.Contains(l.EOS(), id) {
					n++
				}
			}
			return n
		}
		code, _, b := post(t, ts.URL+"/v1/chat/completions", body)
		require.Equal(t, 200, code, "%s", b)
		ids := <-prompts
		require.Equal(t, len(ids), decode(t, b).Usage.PromptTokens)
		var out bytes.Buffer
		require.NoError(t, serve.ChatLoop(srv, 1, "", strings.NewReader(content+"\n"), &out, make(chan os.Signal)))
		chatIDs := <-prompts
		require.Equal(t, ids, chatIDs, "sinf-run chat encodes as the server does")
		if special {
			require.Equal(t, 2, control(ids), "ids %v", ids)
			continue
		}
		require.Zero(t, control(ids), "ids %v", ids)
		require.Contains(t, l.Tok.Decode(ids), content)
	}
}

// TestContextEnd: at context 8 with a 7-token prompt, sinf-run and the
// server generate the same number of tokens, runtime.MaxNewTokens(8, 7, …)
// = 2: the prompt fills 7 positions, the first token the 8th, the second is
// sampled and not fed (before: the server stopped at 1).
func TestContextEnd(t *testing.T) {
	file, _ := files(t)
	ts, _, l := newServer(t, setup{file: file, context: 8})
	var prompt string
	for _, p := range []string{"Once upon a time there", "Once upon a time there was", "One day a little", "The dog ran to the park", "Lily and Tom went to"} {
		if len(l.Tok.Encode(p, l.Tok.AddsBOS())) == 7 {
			prompt = p
			break
		}
	}
	require.NotEmpty(t, prompt, "no 7-token prompt among the candidates")
	require.Equal(t, 2, runtime.MaxNewTokens(8, 7, 100))
	code, _, b := post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":100}`, prompt))
	require.Equal(t, 200, code, "%s", b)
	c := decode(t, b)
	rep := runReport(t, file, prompt, "--max-tokens", "100", "--context", "8", "--mode", "selectinfer")
	require.Len(t, rep.IDs, 2, "sinf-run")
	require.Equal(t, "context", rep.FinishReason)
	require.Equal(t, 2, c.Usage.CompletionTokens, "the server")
	require.Equal(t, "length", *c.Choices[0].FinishReason)
}

// TestServeKVCacheF16: `sinf-run serve --kv-cache f16 --parallel 2 --batch`
// serves a greedy completion whose text is the float32 cache's here
// (runtime's TestKVCacheF16 bounds the logits).
func TestServeKVCacheF16(t *testing.T) {
	file, _ := files(t)
	texts := map[string]string{}
	for _, kv := range []string{"f32", "f16"} {
		addr := startServe(t, file, "--kv-cache", kv, "--parallel", "2", "--batch")
		resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once upon a time","max_tokens":8,"temperature":0}`))
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode, string(b))
		var r struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		require.Len(t, r.Choices, 1)
		texts[kv] = r.Choices[0].Text
	}
	require.NotEmpty(t, texts["f32"])
	require.Equal(t, texts["f32"], texts["f16"])
}

// TestServeModePhi: on a γ=0.7 file, served in its default mode
// (GateFirst, φ 0.25), a request naming "mode":"selectinfer" and no phi
// runs at selectinfer's own φ (0.4), as `sinf-run --mode selectinfer` does,
// with the same greedy tokens (before: GateFirst's φ, a 400 blaming phi); a
// phi the request gives is still checked.
func TestServeModePhi(t *testing.T) {
	file, _ := files(t)
	addr := startServe(t, file)
	const prompt = "Once upon a time"
	code, _, b := post(t, "http://"+addr+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":8,"temperature":0,"mode":"selectinfer"}`, prompt))
	require.Equal(t, 200, code, "%s", b)
	c := decode(t, b)
	rep := runReport(t, file, prompt, "--max-tokens", "8", "--mode", "selectinfer", "--temperature", "0")
	require.NotEmpty(t, rep.Text)
	require.Equal(t, rep.Text, c.Choices[0].Text, "the server's selectinfer and sinf-run's")
	code, _, b = post(t, "http://"+addr+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":8,"mode":"selectinfer","phi":0.25}`, prompt))
	require.Equal(t, 400, code, "%s", b)
	require.Contains(t, string(b), `"param":"phi"`)
}

// TestServeParallelLimit: --parallel above 1024 is refused by name, and so
// are slots whose KV caches and buffers exceed the machine's memory, before
// any is allocated (before: --parallel 100000 grew the process until the
// machine ran out of memory).
func TestServeParallelLimit(t *testing.T) {
	file, _ := files(t)
	app := &cli.App{Name: "sinf-run", Commands: []*cli.Command{serve.Command()}, Writer: io.Discard, ErrWriter: io.Discard}
	err := app.Run([]string{"sinf-run", "serve", "--model", file, "--port", "0", "--parallel", fmt.Sprint(serve.MaxParallel + 1)})
	require.ErrorContains(t, err, fmt.Sprintf("--parallel %d: want 1 to %d", serve.MaxParallel+1, serve.MaxParallel))

	l, err := runcmd.OpenSinf(file, false)
	require.NoError(t, err)
	defer l.Close()
	c := l.Model.Config
	ctx := min(c.MaxContext(), runtime.DefaultContext)
	mem := runtime.EstimateMemory(c, 0, 0, ctx, 1, 1)
	slot := mem.KV + mem.Buffers
	require.Positive(t, mem.KV)
	require.NoError(t, serve.CheckSlotMemory(l.Model, 0, 10, 10*slot))
	require.ErrorContains(t, serve.CheckSlotMemory(l.Model, 0, 10, 10*slot-1), "--parallel 10: the slots' KV caches and buffers")
	require.NoError(t, serve.CheckSlotMemory(l.Model, 0, 10, 0), "unknown memory: no check")
}

// runReport runs `sinf-run --model file --prompt prompt --json --threads 1
// args...` in process and returns its report.
func runReport(t *testing.T, file, prompt string, args ...string) runcmd.Report {
	t.Helper()
	var o bytes.Buffer
	app := &cli.App{Name: "sinf-run", Flags: runcmd.Flags(), Action: runcmd.Action(runcmd.OpenSinf), Writer: &o, ErrWriter: io.Discard}
	require.NoError(t, app.Run(append([]string{"sinf-run", "--model", file, "--prompt", prompt, "--json", "--threads", "1"}, args...)))
	var rep runcmd.Report
	require.NoError(t, json.Unmarshal(o.Bytes(), &rep))
	return rep
}
