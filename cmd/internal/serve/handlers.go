package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/selectinfer/sinf/runtime/chat"
)

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// completions serves POST /v1/completions.
func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	f, e := s.readBody(w, r)
	if e == nil {
		e = checkFields(f, "prompt")
	}
	var req request
	if e == nil {
		req, e = s.parseCommon(f)
	}
	var prompt string
	if e == nil {
		prompt, e = completionPrompt(f)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	encode := func() ([]int, *apiError) { return s.encode("prompt", prompt, s.cfg.AddBOS, nil) }
	s.run(w, r, arrived, encode, req, "cmpl-", "text_completion",
		func(text string) any {
			return map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": nil}
		},
		func(text, finish string) any {
			return map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}
		}, nil)
}

// chatCompletions serves POST /v1/chat/completions: the messages go through
// the model's chat template (add_generation_prompt true; the extension field
// chat_template_kwargs adds template variables such as enable_thinking),
// and the rendered text is tokenized without adding BOS (the template
// writes it), as HF's apply_chat_template does, except that control tokens
// written in the request's strings are encoded as text (encodeChat).
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	f, e := s.readBody(w, r)
	if e == nil {
		e = checkFields(f, "messages", "max_completion_tokens", "chat_template_kwargs")
	}
	if e == nil && f.has("max_completion_tokens") {
		if f.has("max_tokens") {
			e = badRequest("max_completion_tokens", "give max_tokens or max_completion_tokens, not both")
		} else {
			f["max_tokens"] = f["max_completion_tokens"]
		}
	}
	var req request
	if e == nil {
		req, e = s.parseCommon(f)
	}
	var msgs json.RawMessage
	if e == nil {
		msgs, e = chatMessages(f)
	}
	vars := map[string]json.RawMessage{}
	if e == nil && f.has("chat_template_kwargs") {
		if err := json.Unmarshal(f["chat_template_kwargs"], &vars); err != nil {
			e = badRequest("chat_template_kwargs", "chat_template_kwargs: want an object of template variables")
		}
	}
	if e == nil && s.cfg.Template == nil {
		msg := "this model has no chat template; use /v1/completions, or start the server with --chat-template FILE"
		if s.cfg.TemplateErr != nil && !errors.Is(s.cfg.TemplateErr, chat.ErrNoTemplate) {
			msg = s.cfg.TemplateErr.Error()
		}
		e = badRequest("messages", "%s", msg)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	encode := func() ([]int, *apiError) { return s.encodeChat("messages", msgs, vars) }
	first := true
	s.run(w, r, arrived, encode, req, "chatcmpl-", "chat.completion",
		func(text string) any {
			d := map[string]any{"content": text}
			if first {
				d["role"], first = "assistant", false
			}
			return map[string]any{"index": 0, "delta": d, "logprobs": nil, "finish_reason": nil}
		},
		func(text, finish string) any {
			return map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "logprobs": nil, "finish_reason": finish}
		},
		func(finish string) any {
			d := map[string]any{}
			if first {
				d["role"], d["content"] = "assistant", ""
			}
			return map[string]any{"index": 0, "delta": d, "logprobs": nil, "finish_reason": finish}
		})
}

// run admits a parsed request, then encodes its prompt (encode: the
// template rendered and the text tokenized only once the request holds its
// place), generates, and writes the response: one JSON object, or with
// stream: true server-sent chunks (object+".chunk" for chat), a last chunk
// with finish_reason, a usage chunk when stream_options.include_usage, and
// [DONE]. chunk builds a streamed choice, whole the non-streamed one, last
// (chat) the final streamed choice.
func (s *Server) run(w http.ResponseWriter, r *http.Request, arrived time.Time, encode func() ([]int, *apiError), req request, prefix, object string,
	chunk func(text string) any, whole func(text, finish string) any, last func(finish string) any) {
	if e := s.admit(); e != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, e)
		return
	}
	defer s.release()
	ids, e := encode()
	if e != nil {
		writeError(w, e)
		return
	}
	if s.cfg.WriteTimeout > 0 {
		// What is still buffered when the handler returns is written within
		// the timeout too (guard lifts the deadline for the next request).
		defer func() { _ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) }()
	}
	id, created, model := newID(prefix), time.Now().Unix(), s.cfg.ModelID
	if !req.stream {
		var text bytes.Buffer
		o, err := s.generate(r.Context(), arrived, ids, req, func(t string) error { text.WriteString(t); return nil })
		if err != nil {
			if !errors.Is(err, errCancelled) {
				writeError(w, &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"})
			} else if r.Context().Err() == nil {
				writeError(w, &apiError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down", Type: "server_error"})
			}
			return
		}
		if s.cfg.WriteTimeout > 0 {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": object, "created": created, "model": model,
			"choices": []any{whole(text.String(), o.finish)}, "usage": o.usage, "timings": o.timings})
		return
	}
	chunkObject := object
	if object == "chat.completion" {
		chunkObject += ".chunk"
	}
	ev := startSSE(w, s.cfg.WriteTimeout)
	frame := func(choices []any) map[string]any {
		return map[string]any{"id": id, "object": chunkObject, "created": created, "model": model, "choices": choices}
	}
	o, err := s.generate(r.Context(), arrived, ids, req, func(t string) error { return ev.send(frame([]any{chunk(t)})) })
	if errors.Is(err, errCancelled) {
		return
	}
	if err != nil {
		_ = ev.send(map[string]any{"error": &apiError{Message: err.Error(), Type: "server_error"}})
		ev.done()
		return
	}
	final := frame(nil)
	if last != nil {
		final["choices"] = []any{last(o.finish)}
	} else {
		final["choices"] = []any{map[string]any{"index": 0, "text": "", "logprobs": nil, "finish_reason": o.finish}}
	}
	final["timings"] = o.timings
	_ = ev.send(final)
	if req.includeUsage {
		u := frame([]any{})
		u["usage"] = o.usage
		_ = ev.send(u)
	}
	ev.done()
}
