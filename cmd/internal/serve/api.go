package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"

	"github.com/selectinfer/sinf/runtime"
	"github.com/selectinfer/sinf/runtime/constrain"
)

// apiError is an OpenAI-style error: {"error": {"message", "type", "param",
// "code"}} with an HTTP status.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"` // string or null
	Code    any    `json:"code"`  // string or null
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, format string, args ...any) *apiError {
	e := &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = param
	}
	return e
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, map[string]any{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fields is a request body's top-level object, read field by field so that
// each bad or unsupported field gets an error naming it.
type fields map[string]json.RawMessage

func parseBody(body []byte) (fields, *apiError) {
	var f fields
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&f); err != nil || f == nil {
		msg := "the request body is not a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		return nil, badRequest("", "%s", msg)
	}
	if dec.More() {
		return nil, badRequest("", "the request body holds data after its JSON object")
	}
	return f, nil
}

func (f fields) has(k string) bool {
	v, ok := f[k]
	return ok && string(v) != "null"
}

func (f fields) float(k string, dst *float64) *apiError {
	if !f.has(k) {
		return nil
	}
	if err := json.Unmarshal(f[k], dst); err != nil || math.IsNaN(*dst) || math.IsInf(*dst, 0) {
		return badRequest(k, "%s: want a number, found %.40s", k, f[k])
	}
	return nil
}

func (f fields) int(k string, dst *int) *apiError {
	if !f.has(k) {
		return nil
	}
	if err := json.Unmarshal(f[k], dst); err != nil {
		return badRequest(k, "%s: want an integer, found %.40s", k, f[k])
	}
	return nil
}

func (f fields) bool(k string, dst *bool) *apiError {
	if !f.has(k) {
		return nil
	}
	if err := json.Unmarshal(f[k], dst); err != nil {
		return badRequest(k, "%s: want true or false, found %.40s", k, f[k])
	}
	return nil
}

func (f fields) string(k string, dst *string) *apiError {
	if !f.has(k) {
		return nil
	}
	if err := json.Unmarshal(f[k], dst); err != nil {
		return badRequest(k, "%s: want a string, found %.40s", k, f[k])
	}
	return nil
}

// Fields every endpoint reads; the endpoint adds prompt or messages.
var commonFields = []string{"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream",
	"stream_options", "n", "user", "mode", "phi", "alpha",
	"min_p", "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty", "logprobs", "response_format"}

// neutralFields are OpenAI fields accepted only at the value that changes
// nothing (sinf does not implement them otherwise).
var neutralFields = map[string]string{
	"echo": "false", "best_of": "1",
	"logit_bias": "{}", "parallel_tool_calls": "true",
}

// request is a parsed generation request, either endpoint.
type request struct {
	maxTokens    int
	sampling     runtime.SamplingParams
	seed         uint64
	seeded       bool
	sparsity     runtime.Sparsity
	stop         []string
	stream       bool
	includeUsage bool
	logprobs     bool // report each token's log probability
	topLogprobs  int  // and the most likely ones' (0–20)
	// format is response_format's document (nil: free text)
	format *constrain.Node
	// dropOldest: a conversation past the context loses its oldest turns
	// (drop_oldest_turns, default --drop-oldest-turns); dropped counts them.
	dropOldest bool
	dropped    int
	tools      *toolRequest // chat: tools and tool_choice (tools.go); nil: none
}

// checkFields rejects fields the endpoint does not know (naming them), and
// neutral ones at any other value.
func checkFields(f fields, endpointFields ...string) *apiError {
	known := map[string]bool{}
	for _, k := range append(commonFields, endpointFields...) {
		known[k] = true
	}
	var unknown []string
	for k, v := range f {
		if known[k] {
			continue
		}
		if n, ok := neutralFields[k]; ok {
			if c := compactJSON(v); c == n || c == "null" || (n == "0" && c == "0.0") {
				continue
			}
			return badRequest(k, "%s: not supported by sinf (only %s is accepted)", k, n)
		}
		unknown = append(unknown, k)
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return badRequest(unknown[0], "unsupported field(s): %s", strings.Join(unknown, ", "))
	}
	return nil
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// parseCommon reads the fields shared by both endpoints over the server's
// defaults.
func (s *Server) parseCommon(f fields) (request, *apiError) {
	r := request{maxTokens: s.cfg.MaxTokens, sampling: s.cfg.Sampling, sparsity: s.cfg.Sparsity, dropOldest: s.cfg.DropOldestTurns}
	if e := f.bool("drop_oldest_turns", &r.dropOldest); e != nil {
		return r, e
	}
	if f.has("model") {
		var m string
		if e := f.string("model", &m); e != nil {
			return r, e
		}
		if m != s.cfg.ModelID {
			return r, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("the model %q does not exist: this server serves %q", m, s.cfg.ModelID),
				Type: "invalid_request_error", Param: "model", Code: "model_not_found"}
		}
	}
	n := 1
	if e := f.int("n", &n); e != nil {
		return r, e
	}
	if n != 1 {
		return r, badRequest("n", "n: %d choices asked; sinf generates one (n = 1)", n)
	}
	if e := f.int("max_tokens", &r.maxTokens); e != nil {
		return r, e
	}
	if r.maxTokens < 1 {
		return r, badRequest("max_tokens", "max_tokens: %d, want ≥ 1", r.maxTokens)
	}
	if e := f.float("temperature", &r.sampling.Temperature); e != nil {
		return r, e
	}
	if r.sampling.Temperature < 0 {
		return r, badRequest("temperature", "temperature: %g, want ≥ 0 (0: greedy)", r.sampling.Temperature)
	}
	if e := f.float("top_p", &r.sampling.TopP); e != nil {
		return r, e
	}
	if !(r.sampling.TopP > 0 && r.sampling.TopP <= 1) {
		return r, badRequest("top_p", "top_p: %g, want a probability in (0, 1]", r.sampling.TopP)
	}
	if e := f.int("top_k", &r.sampling.TopK); e != nil {
		return r, e
	}
	if r.sampling.TopK < 0 {
		return r, badRequest("top_k", "top_k: %d, want ≥ 0 (0: no cut)", r.sampling.TopK)
	}
	if e := r.parseSampling(f); e != nil {
		return r, e
	}
	if f.has("response_format") {
		var e *apiError
		if r.format, e = responseFormat(f["response_format"]); e != nil {
			return r, e
		}
		if m := s.vocab().Missing(); r.format != nil && m != "" {
			return r, badRequest("response_format", "response_format: this model's vocabulary has no token for %q, so it cannot write JSON", m)
		}
	}
	if f.has("seed") {
		var seed int64
		if e := f.int64("seed", &seed); e != nil {
			return r, e
		}
		r.seed, r.seeded = uint64(seed), true
	}
	if f.has("stop") {
		var one string
		if json.Unmarshal(f["stop"], &one) == nil {
			r.stop = []string{one}
		} else if json.Unmarshal(f["stop"], &r.stop) != nil {
			return r, badRequest("stop", "stop: want a string or a list of strings")
		}
		if len(r.stop) > 16 {
			return r, badRequest("stop", "stop: %d strings, at most 16", len(r.stop))
		}
		for _, st := range r.stop {
			if st == "" {
				return r, badRequest("stop", "stop: an empty string")
			}
		}
	}
	if e := f.bool("stream", &r.stream); e != nil {
		return r, e
	}
	if f.has("stream_options") {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := json.Unmarshal(f["stream_options"], &so); err != nil {
			return r, badRequest("stream_options", "stream_options: want {\"include_usage\": bool}")
		}
		r.includeUsage = so.IncludeUsage
	}
	var user string
	if e := f.string("user", &user); e != nil {
		return r, e
	}
	if f.has("mode") {
		var mode string
		if e := f.string("mode", &mode); e != nil {
			return r, e
		}
		m, err := runtime.ParseMode(mode)
		if err != nil {
			return r, badRequest("mode", "mode: %v", err)
		}
		r.sparsity.Mode = m
		if !f.has("phi") && s.cfg.ModePhi != nil {
			r.sparsity.Phi = s.cfg.ModePhi(m)
		}
	}
	if e := f.float("phi", &r.sparsity.Phi); e != nil {
		return r, e
	}
	if e := f.float("alpha", &r.sparsity.Alpha); e != nil {
		return r, e
	}
	if err := r.sparsity.Validate(s.cfg.Model.Model); err != nil {
		param := "phi"
		if strings.Contains(err.Error(), "alpha") {
			param = "alpha"
		}
		return r, badRequest(param, "%v", err)
	}
	return r, nil
}

// parseSampling reads the penalties, min_p and the logprobs fields (the
// Sampler's doc gives their formulas): logprobs is true or false on
// /v1/chat/completions, with top_logprobs 0–20, and an integer 0–20 (the
// top tokens) on /v1/completions, as OpenAI's two APIs spell it.
func (r *request) parseSampling(f fields) *apiError {
	for _, p := range []struct {
		k   string
		dst *float64
	}{{"min_p", &r.sampling.MinP}, {"repeat_penalty", &r.sampling.RepeatPenalty},
		{"presence_penalty", &r.sampling.PresencePenalty}, {"frequency_penalty", &r.sampling.FrequencyPenalty}} {
		if e := f.float(p.k, p.dst); e != nil {
			return e
		}
	}
	if e := f.int("repeat_last_n", &r.sampling.PenaltyLastN); e != nil {
		return e
	}
	if err := r.sampling.Check(func(field string) string { return field + ":" }); err != nil {
		param, _, _ := strings.Cut(err.Error(), ":")
		return badRequest(param, "%v", err)
	}
	if f.has("logprobs") {
		var n int
		if json.Unmarshal(f["logprobs"], &r.logprobs) == nil {
		} else if json.Unmarshal(f["logprobs"], &n) == nil && f.has("prompt") {
			if n < 0 || n > maxTopLogprobs {
				return badRequest("logprobs", "logprobs: %d, want 0 to %d (the most likely tokens reported per position)", n, maxTopLogprobs)
			}
			r.logprobs, r.topLogprobs = true, n
		} else if f.has("prompt") {
			return badRequest("logprobs", "logprobs: want an integer 0 to %d", maxTopLogprobs)
		} else {
			return badRequest("logprobs", "logprobs: want true or false (and top_logprobs for the most likely tokens)")
		}
	}
	if f.has("top_logprobs") {
		if e := f.int("top_logprobs", &r.topLogprobs); e != nil {
			return e
		}
		if r.topLogprobs < 0 || r.topLogprobs > maxTopLogprobs {
			return badRequest("top_logprobs", "top_logprobs: %d, want 0 to %d", r.topLogprobs, maxTopLogprobs)
		}
		if !r.logprobs {
			return badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
	}
	return nil
}

// responseFormat reads response_format: {"type": "text"} (free text),
// {"type": "json_object"} (a JSON object) or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict"}} (a document validating
// against schema, of the subset constrain.Compile takes), as OpenAI's API
// spells them; the document is enforced while sampling (runtime/constrain).
func responseFormat(raw json.RawMessage) (*constrain.Node, *apiError) {
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, badRequest("response_format", "response_format: want {\"type\": \"text\", \"json_object\" or \"json_schema\"}: %v", err)
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return constrain.JSONObject(), nil
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			return nil, badRequest("response_format.json_schema.schema", "response_format.json_schema.schema: missing")
		}
		n, err := constrain.Compile("response_format.json_schema.schema", rf.JSONSchema.Schema)
		if err != nil {
			return nil, badRequest("response_format.json_schema.schema", "%v", err)
		}
		return n, nil
	}
	return nil, badRequest("response_format.type", "response_format.type: %q, want text, json_object or json_schema", rf.Type)
}

// templateToolCalls gives an assistant message's tool_calls to the template
// with each function.arguments (a JSON string in OpenAI's API) as the object
// it encodes, as HF templates read it (Llama 3.1's writes it with tojson).
func templateToolCalls(raw json.RawMessage, i int) (json.RawMessage, *apiError) {
	var calls []map[string]any
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "messages[%d].tool_calls: want an array of calls", i)
	}
	for j, c := range calls {
		fn, _ := c["function"].(map[string]any)
		if fn == nil {
			return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls[%d].function", i, j), "messages[%d].tool_calls[%d].function: missing", i, j)
		}
		if a, ok := fn["arguments"].(string); ok {
			var v any
			if err := json.Unmarshal([]byte(a), &v); err != nil {
				return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j), "messages[%d].tool_calls[%d].function.arguments: not JSON: %v", i, j, err)
			}
			fn["arguments"] = v
		}
	}
	b, err := json.Marshal(calls)
	if err != nil {
		return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "%v", err)
	}
	return b, nil
}

// maxTopLogprobs is the most top tokens a request may ask for (OpenAI's
// chat limit).
const maxTopLogprobs = 20

func (f fields) int64(k string, dst *int64) *apiError {
	if err := json.Unmarshal(f[k], dst); err != nil {
		return badRequest(k, "%s: want an integer, found %.40s", k, f[k])
	}
	return nil
}

// completionPrompt reads /v1/completions' prompt: a string, or a list of one
// string.
func completionPrompt(f fields) (string, *apiError) {
	if !f.has("prompt") {
		return "", badRequest("prompt", "prompt: missing")
	}
	var p string
	var list []string
	switch {
	case json.Unmarshal(f["prompt"], &p) == nil:
	case json.Unmarshal(f["prompt"], &list) == nil:
		if len(list) != 1 {
			return "", badRequest("prompt", "prompt: a list of %d prompts; sinf takes one per request", len(list))
		}
		p = list[0]
	default:
		return "", badRequest("prompt", "prompt: want a string (token-id prompts are not supported)")
	}
	if p == "" {
		return "", badRequest("prompt", "prompt: empty")
	}
	return p, nil
}

// chatMessages checks /v1/chat/completions' messages: a non-empty array of
// objects with a role of system, developer (given to the template as
// system, as OpenAI treats it), user, assistant or tool, and a content that
// is a string, a list of text parts ({"type": "text", "text": ...}, joined
// into one string for the template), or null with tool_calls. The rest of
// each message goes to the template as sent.
func chatMessages(f fields) (json.RawMessage, *apiError) {
	if !f.has("messages") {
		return nil, badRequest("messages", "messages: missing")
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(f["messages"], &list); err != nil {
		return nil, badRequest("messages", "messages: want an array of message objects")
	}
	if len(list) == 0 {
		return nil, badRequest("messages", "messages: empty")
	}
	rewrite := false
	for i, m := range list {
		var role string
		if err := json.Unmarshal(m["role"], &role); err != nil || role == "" {
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role: want a string", i)
		}
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			m["role"], rewrite = json.RawMessage(`"system"`), true
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role: %q, want system, developer, user, assistant or tool", i, role)
		}
		if tc, ok := m["tool_calls"]; ok && string(tc) != "null" {
			b, e := templateToolCalls(tc, i)
			if e != nil {
				return nil, e
			}
			m["tool_calls"], rewrite = b, true
		}
		c, ok := m["content"]
		var content string
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		switch {
		case !ok || string(c) == "null":
			if _, calls := m["tool_calls"]; !calls {
				return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: missing", i)
			}
		case json.Unmarshal(c, &content) == nil:
		case json.Unmarshal(c, &parts) == nil:
			var text strings.Builder
			for j, p := range parts {
				if p.Type != "text" || p.Text == nil {
					return nil, badRequest(fmt.Sprintf("messages[%d].content[%d]", i, j), "messages[%d].content[%d]: a %q part; sinf takes text parts only ({\"type\": \"text\", \"text\": ...})", i, j, p.Type)
				}
				text.WriteString(*p.Text)
			}
			b, _ := json.Marshal(text.String())
			m["content"], rewrite = b, true
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: want a string or a list of text parts", i)
		}
	}
	if rewrite {
		b, err := json.Marshal(list)
		if err != nil {
			return nil, badRequest("messages", "messages: %v", err)
		}
		return b, nil
	}
	return f["messages"], nil
}
