package serve

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Context management: a conversation longer than the context loses its
// oldest turns. The leading system (and developer) messages stay, and so
// does the last message; from the first other message on, whole turns go:
// a user message and everything up to the next user message (the
// assistant's reply, tool calls and results), oldest first, until the
// rendering leaves room for the reply. Each try renders the shortened list
// through the template again, so the prompt is what the template makes of
// the kept messages (sinf's sessions start each request from an empty KV
// cache, so no prefix is reused).

// replyRoom is the context a conversation leaves for the reply when turns
// are dropped: max_tokens, at most a quarter of the context.
func replyRoom(maxTokens, ctx int) int { return max(1, min(maxTokens, ctx/4)) }

// fitTurns drops the oldest turns of msgs until encode gives at most limit
// tokens (encode's ok false: more than the context), and returns those ids
// and how many messages went. An error is encode's, or that even the
// system messages and the last message do not fit.
func fitTurns(msgs []json.RawMessage, limit int, encode func(json.RawMessage) (ids []int, ok bool, err error)) ([]int, int, error) {
	first := 0
	for first < len(msgs)-1 && isRole(msgs[first], "system") {
		first++
	}
	kept := msgs
	for dropped := 0; ; {
		raw, err := json.Marshal(kept)
		if err != nil {
			return nil, 0, err
		}
		ids, ok, err := encode(raw)
		if err != nil {
			return nil, 0, err
		}
		if ok && len(ids) <= limit {
			return ids, dropped, nil
		}
		// the turn at first: its message and the ones up to the next user message
		end := first + 1
		for end < len(kept)-1 && !isRole(kept[end], "user") {
			end++
		}
		if first >= len(kept)-1 || end > len(kept)-1 {
			if ok {
				return nil, 0, fmt.Errorf("%d tokens with only the system messages and the last message kept, and the context leaves %d for them", len(ids), limit)
			}
			return nil, 0, fmt.Errorf("more tokens than the context holds with only the system messages and the last message kept, and the context leaves %d for them", limit)
		}
		kept = append(append([]json.RawMessage(nil), kept[:first]...), kept[end:]...)
		dropped += end - first
	}
}

func isRole(m json.RawMessage, role string) bool {
	var v struct {
		Role string `json:"role"`
	}
	return json.Unmarshal(m, &v) == nil && v.Role == role
}

// fitChat renders messages with their oldest turns dropped (fitList); the
// count of dropped messages is reported in the response
// (dropped_messages, X-Sinf-Dropped-Messages).
func (s *Server) fitChat(msgs json.RawMessage, vars map[string]json.RawMessage, maxTokens int) ([]int, int, *apiError) {
	var list []json.RawMessage
	if err := json.Unmarshal(msgs, &list); err != nil {
		return nil, 0, badRequest("messages", "messages: %v", err)
	}
	return s.fitList("messages", list, vars, maxTokens)
}

// fitList encodes list (encodeChat: content as text) with its oldest turns
// dropped (fitTurns) so that the reply has replyRoom; an error of the
// rendering or encoding is answered as it is.
func (s *Server) fitList(param string, list []json.RawMessage, vars map[string]json.RawMessage, maxTokens int) ([]int, int, *apiError) {
	ctx := s.Context()
	var failed *apiError
	ids, dropped, err := fitTurns(list, ctx-replyRoom(maxTokens, ctx), func(raw json.RawMessage) ([]int, bool, error) {
		ids, e := s.encodeChat(param, raw, vars)
		switch {
		case e != nil && e.Code == "context_length_exceeded":
			return nil, false, nil
		case e != nil:
			failed = e
			return nil, false, errors.New(e.Message)
		}
		return ids, true, nil
	})
	if failed != nil {
		return nil, 0, failed
	}
	if err != nil {
		e := badRequest(param, "%s: %v (the context is %d positions, --context)", param, err, ctx)
		e.Code = "context_length_exceeded"
		return nil, 0, e
	}
	return ids, dropped, nil
}
