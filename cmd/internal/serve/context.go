package serve

import (
	"context"
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

// fitTurns drops the fewest oldest turns of msgs for which encode gives at
// most limit tokens (encode's ok false: more than the context), and returns
// those ids and how many messages went. The count is found by bisection
// (fewer turns kept, fewer tokens), so a conversation of n turns costs
// O(log n) renderings, each O(n), not n of them. An error is encode's,
// ctx's (the client went away), or that even the system messages and the
// last message do not fit.
func fitTurns(ctx context.Context, msgs []json.RawMessage, limit int, encode func(json.RawMessage) (ids []int, ok bool, err error)) ([]int, int, error) {
	first := 0
	for first < len(msgs)-1 && isRole(msgs[first], "system") {
		first++
	}
	// starts[t] is where the kept messages resume once t turns went: a
	// turn is its first message and the ones up to the next user message;
	// the last message always stays.
	starts := []int{first}
	for s := first; s < len(msgs)-1; {
		end := s + 1
		for end < len(msgs)-1 && !isRole(msgs[end], "user") {
			end++
		}
		starts = append(starts, end)
		s = end
	}
	try := func(t int) ([]int, bool, error) {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		kept := append(append(make([]json.RawMessage, 0, first+len(msgs)-starts[t]), msgs[:first]...), msgs[starts[t]:]...)
		raw, err := json.Marshal(kept)
		if err != nil {
			return nil, false, err
		}
		ids, ok, err := encode(raw)
		return ids, ok && len(ids) <= limit, err
	}
	ids, fits, err := try(0)
	if err != nil || fits {
		return ids, 0, err
	}
	last := len(starts) - 1
	if last > 0 {
		if ids, fits, err = try(last); err != nil {
			return nil, 0, err
		}
	}
	if !fits {
		if ids != nil {
			return nil, 0, fmt.Errorf("%d tokens with only the system messages and the last message kept, and the context leaves %d for them", len(ids), limit)
		}
		return nil, 0, fmt.Errorf("more tokens than the context holds with only the system messages and the last message kept, and the context leaves %d for them", limit)
	}
	// try(lo) does not fit, try(hi) does
	lo, hi, best := 0, last, ids
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		ids, fits, err := try(mid)
		if err != nil {
			return nil, 0, err
		}
		if fits {
			hi, best = mid, ids
		} else {
			lo = mid
		}
	}
	return best, starts[hi] - first, nil
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
func (s *Server) fitChat(ctx context.Context, msgs json.RawMessage, vars map[string]json.RawMessage, maxTokens int) ([]int, int, *apiError) {
	var list []json.RawMessage
	if err := json.Unmarshal(msgs, &list); err != nil {
		return nil, 0, badRequest("messages", "messages: %v", err)
	}
	return s.fitList(ctx, "messages", list, vars, maxTokens)
}

// fitList encodes list (encodeChat: content as text) with its oldest turns
// dropped (fitTurns) so that the reply has replyRoom; an error of the
// rendering or encoding is answered as it is.
func (s *Server) fitList(rctx context.Context, param string, list []json.RawMessage, vars map[string]json.RawMessage, maxTokens int) ([]int, int, *apiError) {
	ctx := s.Context()
	var failed *apiError
	ids, dropped, err := fitTurns(rctx, list, ctx-replyRoom(maxTokens, ctx), func(raw json.RawMessage) ([]int, bool, error) {
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
	if rctx.Err() != nil {
		return nil, 0, badRequest(param, "%s: the request ended while its oldest turns were dropped: %v", param, rctx.Err())
	}
	if err != nil {
		e := badRequest(param, "%s: %v (the context is %d positions, --context)", param, err, ctx)
		e.Code = "context_length_exceeded"
		return nil, 0, e
	}
	return ids, dropped, nil
}
