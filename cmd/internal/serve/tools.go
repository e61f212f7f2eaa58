package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/selectinfer/sinf/runtime/constrain"
)

// Tools: a chat request's tools go to the template as its "tools" variable
// (the OpenAI form, which HF templates read), and the reply is parsed back
// into tool_calls in the template's format:
//   - Hermes (Qwen2.5, Qwen3): <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
//     one block per call, text around them the content;
//   - Llama 3.1/3.2: the whole reply a JSON object {"name": ..., "parameters": {...}}
//     (after <|python_tag|>, a special token the decoder drops).
//
// tool_choice "auto" (the default) lets the model choose; "none" renders no
// tools; "required" or {"type": "function", "function": {"name": ...}}
// constrains the reply to one call (runtime/constrain): a named function's
// arguments validate against its parameters schema; with "required" and
// several tools the name is one of theirs and the arguments any object.

type toolFormat int

const (
	toolsUnsupported toolFormat = iota
	toolsHermes
	toolsLlama3
)

// detectToolFormat tells a template's tool-call format from its source.
func detectToolFormat(src string) toolFormat {
	switch {
	case strings.Contains(src, "<tool_call>"):
		return toolsHermes
	case strings.Contains(src, `"parameters": dictionary`), strings.Contains(src, "<|python_tag|>"):
		return toolsLlama3
	}
	return toolsUnsupported
}

// toolSpec is one request tool.
type toolSpec struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// toolRequest is a chat request's tools, parsed.
type toolRequest struct {
	raw    json.RawMessage // the tools as sent, for the template
	specs  []toolSpec
	format toolFormat
	node   *constrain.Node // tool_choice required or named: the call's object (nil: auto)
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// parseTools reads tools and tool_choice; nil without tools or with
// tool_choice "none".
func (s *Server) parseTools(f fields) (*toolRequest, *apiError) {
	if !f.has("tools") {
		if f.has("tool_choice") {
			var c string
			if json.Unmarshal(f["tool_choice"], &c) != nil || c != "none" && c != "auto" {
				return nil, badRequest("tool_choice", "tool_choice without tools")
			}
		}
		return nil, nil
	}
	t := &toolRequest{raw: f["tools"]}
	if err := json.Unmarshal(f["tools"], &t.specs); err != nil || len(t.specs) == 0 {
		return nil, badRequest("tools", "tools: want a non-empty array of {\"type\": \"function\", \"function\": {\"name\", \"parameters\", ...}}")
	}
	for i, sp := range t.specs {
		if sp.Type != "function" || sp.Function.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: want {\"type\": \"function\", \"function\": {\"name\": ...}}", i)
		}
	}
	choice := "auto"
	var named string
	if f.has("tool_choice") {
		var c struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(f["tool_choice"], &choice) == nil:
			if choice != "auto" && choice != "none" && choice != "required" {
				return nil, badRequest("tool_choice", "tool_choice: %q, want auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}", choice)
			}
		case json.Unmarshal(f["tool_choice"], &c) == nil && c.Type == "function" && c.Function.Name != "":
			choice, named = "named", c.Function.Name
		default:
			return nil, badRequest("tool_choice", "tool_choice: want auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
		}
	}
	if choice == "none" {
		return nil, nil
	}
	if s.cfg.Template != nil {
		t.format = detectToolFormat(s.cfg.Template.Source)
	}
	if t.format == toolsUnsupported {
		return nil, badRequest("tools", "tools: this model's chat template has no tool-call format sinf knows (Hermes <tool_call> or Llama 3.1 JSON)")
	}
	if choice == "auto" {
		return t, nil
	}
	// constrained: the call's object
	argsKey := "arguments"
	if t.format == toolsLlama3 {
		argsKey = "parameters"
	}
	var names []string
	args := constrain.JSONObject()
	for i, sp := range t.specs {
		names = append(names, sp.Function.Name)
		if sp.Function.Name == named || len(t.specs) == 1 && choice == "required" {
			if len(sp.Function.Parameters) > 0 {
				n, err := constrain.Compile(fmt.Sprintf("tools[%d].function.parameters", i), sp.Function.Parameters)
				if err != nil {
					return nil, badRequest(fmt.Sprintf("tools[%d].function.parameters", i), "%v", err)
				}
				args = n
			}
		}
	}
	if choice == "named" {
		found := false
		for _, n := range names {
			found = found || n == named
		}
		if !found {
			return nil, badRequest("tool_choice", "tool_choice: no tool named %q", named)
		}
		names = []string{named}
	}
	if m := s.vocab().MissingFrom("{}[]\":,-.0123456789truefalsn <tool_call>/\n"); m != "" {
		return nil, badRequest("tool_choice", "tool_choice: this model's vocabulary has no token for %q, so it cannot write a call", m)
	}
	t.node = constrain.Object([]string{"name", argsKey}, []*constrain.Node{constrain.Enum(names...), args})
	return t, nil
}

// constraint returns a fresh matcher of a forced call, nil for auto.
func (s *Server) toolConstraint(t *toolRequest) *constrain.Matcher {
	if t == nil || t.node == nil {
		return nil
	}
	if t.format == toolsHermes {
		return constrain.NewMatcherAround("<tool_call>\n", t.node, "\n</tool_call>", s.vocab(), s.cfg.EOS)
	}
	return constrain.NewMatcher(t.node, s.vocab(), s.cfg.EOS)
}

// parseToolCalls finds the calls of the reply text; content is the text
// around them. No call found: nil and the text.
func (t *toolRequest) parseToolCalls(text string) ([]toolCall, string) {
	known := map[string]bool{}
	for _, sp := range t.specs {
		known[sp.Function.Name] = true
	}
	var calls []toolCall
	add := func(obj []byte, argsKey string) bool {
		var c map[string]json.RawMessage
		if json.Unmarshal(obj, &c) != nil {
			return false
		}
		var name string
		if json.Unmarshal(c["name"], &name) != nil || !known[name] {
			return false
		}
		args := c[argsKey]
		if args == nil && argsKey == "parameters" {
			args = c["arguments"]
		}
		if args == nil {
			args = json.RawMessage("{}")
		}
		var b bytes.Buffer
		if json.Compact(&b, args) != nil {
			return false
		}
		tc := toolCall{ID: newID("call_"), Type: "function"}
		tc.Function.Name, tc.Function.Arguments = name, b.String()
		calls = append(calls, tc)
		return true
	}
	switch t.format {
	case toolsHermes:
		var content strings.Builder
		rest := text
		for {
			i := strings.Index(rest, "<tool_call>")
			if i < 0 {
				content.WriteString(rest)
				break
			}
			content.WriteString(rest[:i])
			body := rest[i+len("<tool_call>"):]
			j := strings.Index(body, "</tool_call>")
			end := len(body)
			if j >= 0 {
				end = j
			}
			if !add([]byte(strings.TrimSpace(body[:end])), "arguments") {
				return nil, text
			}
			if j < 0 {
				rest = ""
			} else {
				rest = body[j+len("</tool_call>"):]
			}
		}
		if calls == nil {
			return nil, text
		}
		return calls, strings.TrimSpace(content.String())
	case toolsLlama3:
		body := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "<|python_tag|>"))
		if !strings.HasPrefix(body, "{") {
			return nil, text
		}
		dec := json.NewDecoder(strings.NewReader(body))
		for {
			var obj json.RawMessage
			if err := dec.Decode(&obj); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, text
			}
			if !add(obj, "parameters") {
				return nil, text
			}
			// calls may be separated by ';'
			rest := strings.TrimLeft(body[dec.InputOffset():], " \n\t;")
			body = rest
			dec = json.NewDecoder(strings.NewReader(rest))
			if rest == "" {
				break
			}
		}
		return calls, ""
	}
	return nil, text
}

// runTools generates a chat reply with tools and writes it: in one JSON
// object, the reply parsed into content and tool_calls (finish_reason
// "tool_calls" when it holds a call), or streamed (streamTools).
func (s *Server) runTools(w http.ResponseWriter, r *http.Request, arrived time.Time, encode promptFunc, req request, tools *toolRequest) {
	ids, dropped, ok := s.admitEncode(w, encode)
	if !ok {
		return
	}
	defer s.release()
	req.dropped = dropped
	if req.dropped > 0 {
		w.Header().Set("X-Sinf-Dropped-Messages", strconv.Itoa(req.dropped))
	}
	if s.cfg.WriteTimeout > 0 {
		defer func() { _ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) }()
	}
	id, created, model := newID("chatcmpl-"), time.Now().Unix(), s.cfg.ModelID
	if req.stream {
		s.streamTools(w, r, arrived, ids, req, tools, id, created, model)
		return
	}
	text, lps, o, ok := s.generateWhole(w, r, arrived, ids, req)
	if !ok {
		return
	}
	calls, content := tools.parseToolCalls(text)
	msg := map[string]any{"role": "assistant", "content": content}
	finish := o.finish
	if calls != nil {
		msg["tool_calls"] = calls
		if content == "" {
			msg["content"] = nil
		}
		finish = "tool_calls"
	}
	resp := map[string]any{"id": id, "object": "chat.completion", "created": created, "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": chatLogprobs(req, lps), "finish_reason": finish}},
		"usage":   o.usage, "timings": o.timings}
	if req.dropped > 0 {
		resp["dropped_messages"] = req.dropped
	}
	if s.cfg.WriteTimeout > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	}
	writeJSON(w, http.StatusOK, resp)
}

// streamTools streams a reply with tools as OpenAI streams one: content as it
// is generated, up to where a call might begin (heldFrom: the text from there
// is held back until the reply ends), then the held text parsed, its content
// as a delta and each call as a delta with its index, id, type and name and
// one with its arguments, the last chunk with finish_reason tool_calls, a
// usage chunk when asked, and [DONE]. Logprobs go with the delta that sends
// their text (a held token's with the first delta after the reply).
func (s *Server) streamTools(w http.ResponseWriter, r *http.Request, arrived time.Time, ids []int, req request, tools *toolRequest,
	id string, created int64, model string) {
	ev := startSSE(w, s.cfg.WriteTimeout)
	frame := func(choices []any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
	}
	first := true
	delta := func(d map[string]any, lps []tokenLogprob) error {
		if first {
			d["role"], first = "assistant", false
		}
		return ev.send(frame([]any{map[string]any{"index": 0, "delta": d, "logprobs": chatLogprobs(req, lps), "finish_reason": nil}}))
	}
	var text strings.Builder
	var pending []tokenLogprob
	sent := 0
	o, err := s.generate(r.Context(), arrived, ids, req, func(t string, l []tokenLogprob) error {
		text.WriteString(t)
		pending = append(pending, l...)
		if end := tools.heldFrom(text.String()); end > sent {
			lps := pending
			pending = nil
			err := delta(map[string]any{"content": text.String()[sent:end]}, lps)
			sent = end
			return err
		}
		return nil
	})
	if streamFailed(ev, err) {
		return
	}
	calls, content := tools.parseToolCalls(text.String()[sent:])
	finish := o.finish
	if content != "" || first {
		_ = delta(map[string]any{"content": content}, pending)
		pending = nil
	}
	for i, c := range calls {
		_ = delta(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Function.Name, "arguments": ""}}}}, pending)
		pending = nil
		_ = delta(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": c.Function.Arguments}}}}, nil)
		finish = "tool_calls"
	}
	endStream(ev, frame, map[string]any{"index": 0, "delta": map[string]any{}, "logprobs": nil, "finish_reason": finish}, o, req)
}

// heldFrom returns how much of a reply's text so far is surely content: all
// of it but what a call may begin with. Hermes: the text before a
// "<tool_call>", or before a suffix that may grow into one. Llama 3.1: a
// call is the whole reply, a JSON object, so nothing until the first
// non-space character, then all of it unless that is "{". It never
// decreases as the text grows.
func (t *toolRequest) heldFrom(text string) int {
	switch t.format {
	case toolsHermes:
		const tag = "<tool_call>"
		if i := strings.Index(text, tag); i >= 0 {
			return i
		}
		for k := min(len(text), len(tag)-1); k > 0; k-- {
			if strings.HasSuffix(text, tag[:k]) {
				return len(text) - k
			}
		}
		return len(text)
	case toolsLlama3:
		body := strings.TrimLeft(text, " \t\r\n")
		if body == "" || body[0] == '{' {
			return 0
		}
		return len(text)
	}
	return 0
}
