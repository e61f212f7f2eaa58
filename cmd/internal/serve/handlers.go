package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
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
	encode := func() ([]int, int, *apiError) {
		ids, e := s.encode("prompt", prompt, s.cfg.AddBOS, nil)
		return ids, 0, e
	}
	offset := 0
	s.run(w, r, arrived, encode, req, "cmpl-", "text_completion",
		func(text string, lps []tokenLogprob) any {
			return map[string]any{"index": 0, "text": text, "logprobs": completionLogprobs(req, lps, &offset), "finish_reason": nil}
		},
		func(text, finish string, lps []tokenLogprob) any {
			return map[string]any{"index": 0, "text": text, "logprobs": completionLogprobs(req, lps, &offset), "finish_reason": finish}
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
		e = checkFields(f, "messages", "max_completion_tokens", "chat_template_kwargs", "top_logprobs", "drop_oldest_turns", "tools", "tool_choice")
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
	if e == nil {
		if req.tools, e = s.parseTools(f); e == nil && req.tools != nil {
			vars["tools"] = req.tools.raw
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
	// The template is rendered and the prompt encoded once the request
	// holds its place (run); past the context, with drop_oldest_turns, the
	// oldest turns go (fitChat).
	encode := func() ([]int, int, *apiError) {
		ids, e := s.encodeChat("messages", msgs, vars)
		if req.dropOldest && (e != nil && e.Code == "context_length_exceeded" || e == nil && len(ids) > s.Context()-replyRoom(req.maxTokens, s.Context())) {
			return s.fitChat(r.Context(), msgs, vars, req.maxTokens)
		}
		return ids, 0, e
	}
	if req.tools != nil {
		s.runTools(w, r, arrived, encode, req, req.tools)
		return
	}
	first := true
	s.run(w, r, arrived, encode, req, "chatcmpl-", "chat.completion",
		func(text string, lps []tokenLogprob) any {
			d := map[string]any{"content": text}
			if first {
				d["role"], first = "assistant", false
			}
			return map[string]any{"index": 0, "delta": d, "logprobs": chatLogprobs(req, lps), "finish_reason": nil}
		},
		func(text, finish string, lps []tokenLogprob) any {
			return map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "logprobs": chatLogprobs(req, lps), "finish_reason": finish}
		},
		func(finish string) map[string]any {
			d := map[string]any{}
			if first {
				d["role"], d["content"] = "assistant", ""
			}
			return map[string]any{"index": 0, "delta": d, "logprobs": nil, "finish_reason": finish}
		})
}

// promptFunc renders and encodes a request's prompt once it holds its
// place: the ids, how many messages were dropped to fit (fitChat), or the
// error to answer.
type promptFunc func() (ids []int, dropped int, e *apiError)

// admitEncode admits a request (or answers 503), then encodes its prompt
// (or answers the encoding's error). On true the caller holds a place and
// must s.release it.
func (s *Server) admitEncode(w http.ResponseWriter, encode promptFunc) ([]int, int, bool) {
	if e := s.admit(); e != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, e)
		return nil, 0, false
	}
	ids, dropped, e := encode()
	if e != nil {
		s.release()
		writeError(w, e)
		return nil, 0, false
	}
	return ids, dropped, true
}

// generateWhole generates the whole reply of a request that is not
// streamed: its text and log probabilities; on false the error (500, or
// 503 when the server shuts down; nothing for a client that left) is
// written and the caller returns.
func (s *Server) generateWhole(w http.ResponseWriter, r *http.Request, arrived time.Time, ids []int, req request) (string, []tokenLogprob, outcome, bool) {
	var text strings.Builder
	var lps []tokenLogprob
	o, err := s.generate(r.Context(), arrived, ids, req, func(t string, l []tokenLogprob) error {
		text.WriteString(t)
		lps = append(lps, l...)
		return nil
	})
	if err != nil {
		if !errors.Is(err, errCancelled) {
			writeError(w, &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"})
		} else if r.Context().Err() == nil {
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down", Type: "server_error"})
		}
		return "", nil, o, false
	}
	return text.String(), lps, o, true
}

// run admits a parsed request, then encodes its prompt (encode: the
// template rendered and the text tokenized only once the request holds its
// place), generates, and writes the response: one JSON object, or with
// stream: true server-sent chunks (object+".chunk" for chat), a last chunk
// with finish_reason, a usage chunk when stream_options.include_usage, and
// [DONE]. chunk builds a streamed choice, whole the non-streamed one, last
// (chat) the final streamed choice.
func (s *Server) run(w http.ResponseWriter, r *http.Request, arrived time.Time, encode promptFunc, req request, prefix, object string,
	chunk func(text string, lps []tokenLogprob) any, whole func(text, finish string, lps []tokenLogprob) any, last func(finish string) map[string]any) {
	ids, dropped, ok := s.admitEncode(w, encode)
	if !ok {
		return
	}
	defer s.release()
	req.dropped = dropped
	if s.cfg.WriteTimeout > 0 {
		// What is still buffered when the handler returns is written within
		// the timeout too (guard lifts the deadline for the next request).
		defer func() { _ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) }()
	}
	id, created, model := newID(prefix), time.Now().Unix(), s.cfg.ModelID
	if req.dropped > 0 {
		w.Header().Set("X-Sinf-Dropped-Messages", strconv.Itoa(req.dropped))
	}
	if !req.stream {
		text, lps, o, ok := s.generateWhole(w, r, arrived, ids, req)
		if !ok {
			return
		}
		if s.cfg.WriteTimeout > 0 {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		}
		resp := map[string]any{"id": id, "object": object, "created": created, "model": model,
			"choices": []any{whole(text, o.finish, lps)}, "usage": o.usage, "timings": o.timings}
		if req.dropped > 0 {
			resp["dropped_messages"] = req.dropped
		}
		writeJSON(w, http.StatusOK, resp)
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
	o, err := s.generate(r.Context(), arrived, ids, req, func(t string, l []tokenLogprob) error { return ev.send(frame([]any{chunk(t, l)})) })
	if !streamFailed(ev, err) {
		final := map[string]any{"index": 0, "text": "", "logprobs": nil, "finish_reason": o.finish}
		if last != nil {
			final = last(o.finish)
		}
		endStream(ev, frame, final, o, req)
	}
}

// streamFailed ends a stream whose generation failed: nothing more after a
// cancel (the client left, or the server stops), an error event and [DONE]
// after another error. It reports whether err was one.
func streamFailed(ev *sse, err error) bool {
	if errors.Is(err, errCancelled) {
		return true
	}
	if err != nil {
		_ = ev.send(map[string]any{"error": &apiError{Message: err.Error(), Type: "server_error"}})
		ev.done()
		return true
	}
	return false
}

// endStream sends a finished stream's last chunk (choice, with the timings
// and dropped_messages), the usage chunk when the request asked, and [DONE].
func endStream(ev *sse, frame func([]any) map[string]any, choice map[string]any, o outcome, req request) {
	final := frame([]any{choice})
	final["timings"] = o.timings
	if req.dropped > 0 {
		final["dropped_messages"] = req.dropped
	}
	_ = ev.send(final)
	if req.includeUsage {
		u := frame([]any{})
		u["usage"] = o.usage
		_ = ev.send(u)
	}
	ev.done()
}

// chatLogprobs is a chat choice's logprobs: {"content": [...], "refusal":
// null}, or null when the request did not ask.
func chatLogprobs(req request, lps []tokenLogprob) any {
	if !req.logprobs {
		return nil
	}
	if lps == nil {
		lps = []tokenLogprob{}
	}
	return map[string]any{"content": lps, "refusal": nil}
}

// completionLogprobs is a completions choice's logprobs in OpenAI's legacy
// form: tokens, token_logprobs, top_logprobs (token → logprob, the
// request's logprobs most likely) and text_offset (each token's byte offset
// in the completion, counted on from *offset across streamed chunks); null
// when the request did not ask.
func completionLogprobs(req request, lps []tokenLogprob, offset *int) any {
	if !req.logprobs {
		return nil
	}
	tokens, lp, top, off := []string{}, []float64{}, []map[string]float64{}, []int{}
	for _, e := range lps {
		tokens, lp, off = append(tokens, e.Token), append(lp, e.Logprob), append(off, *offset)
		*offset += len(e.Bytes)
		m := map[string]float64{}
		for _, t := range e.Top {
			if _, dup := m[t.Token]; !dup {
				m[t.Token] = t.Logprob
			}
		}
		top = append(top, m)
	}
	return map[string]any{"tokens": tokens, "token_logprobs": lp, "top_logprobs": top, "text_offset": off}
}
