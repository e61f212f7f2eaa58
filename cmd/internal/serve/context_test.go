package serve

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime/chat"
)

// TestFitTurns: whole turns go oldest first (a user message with the
// replies and tool messages after it), the system messages and the last
// message stay, and a conversation that cannot fit is an error; the fewest
// turns that fit are found by bisection (the whole list, then only the last
// turn, then halves), so 3000 turns take 14 renderings, not 3000; a
// cancelled request stops before the next rendering.
func TestFitTurns(t *testing.T) {
	var msgs []json.RawMessage
	for _, m := range []string{`{"role":"system","content":"S"}`, `{"role":"user","content":"u1"}`, `{"role":"assistant","content":"a1"}`,
		`{"role":"tool","content":"t1"}`, `{"role":"user","content":"u2"}`, `{"role":"assistant","content":"a2"}`, `{"role":"user","content":"u3"}`} {
		msgs = append(msgs, json.RawMessage(m))
	}
	var seen []string
	// one "token" per message content
	encode := func(raw json.RawMessage) ([]int, bool, error) {
		var list []struct{ Content string }
		require.NoError(t, json.Unmarshal(raw, &list))
		var names []string
		for _, m := range list {
			names = append(names, m.Content)
		}
		seen = append(seen, strings.Join(names, " "))
		return make([]int, len(list)), true, nil
	}
	ctx := context.Background()
	ids, dropped, err := fitTurns(ctx, msgs, 7, encode)
	require.NoError(t, err)
	require.Equal(t, 0, dropped)
	require.Len(t, ids, 7)
	seen = nil
	ids, dropped, err = fitTurns(ctx, msgs, 3, encode)
	require.NoError(t, err)
	require.Equal(t, 5, dropped)
	require.Len(t, ids, 2)
	require.Equal(t, []string{"S u1 a1 t1 u2 a2 u3", "S u3", "S u2 a2 u3"}, seen)
	_, _, err = fitTurns(ctx, msgs, 1, encode)
	require.ErrorContains(t, err, "2 tokens with only the system messages and the last message kept, and the context leaves 1 for them")
	// no system message: the first turn goes first
	seen = nil
	_, dropped, err = fitTurns(ctx, msgs[1:], 3, encode)
	require.NoError(t, err)
	require.Equal(t, 3, dropped)
	require.Equal(t, []string{"u1 a1 t1 u2 a2 u3", "u3", "u2 a2 u3"}, seen)

	// 3000 turns of a user message and a reply, then a last user message:
	// the fewest that leave at most 202 messages (the system one, 100
	// turns, the last) are 2900 turns, 5800 messages; 102 leave 50 turns.
	long := []json.RawMessage{msgs[0]}
	for range 3000 {
		long = append(long, msgs[1], msgs[2])
	}
	long = append(long, msgs[6])
	ids, dropped, err = fitTurns(ctx, long, 102, encode)
	require.NoError(t, err)
	require.Equal(t, 5900, dropped)
	require.Len(t, ids, 102)
	seen = nil
	ids, dropped, err = fitTurns(ctx, long, 202, encode)
	require.NoError(t, err)
	require.Equal(t, 5800, dropped)
	require.Len(t, ids, 202)
	require.LessOrEqual(t, len(seen), 14, "renderings")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	seen = nil
	_, _, err = fitTurns(cancelled, long, 202, encode)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, seen)
}

// TestParseToolCalls: Hermes blocks (several, text around them the content,
// a last block cut before its closing tag) and Llama 3.1 JSON (after
// <|python_tag|>, several separated by ';', "parameters" or "arguments")
// become calls with compact JSON arguments; an unknown name or broken JSON
// leaves the reply as text.
func TestParseToolCalls(t *testing.T) {
	var specs []toolSpec
	require.NoError(t, json.Unmarshal([]byte(`[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]`), &specs))
	h := &toolRequest{specs: specs, format: toolsHermes}
	calls, content := h.parseToolCalls("Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}")
	require.Len(t, calls, 2)
	require.Equal(t, "a", calls[0].Function.Name)
	require.Equal(t, `{"x":1}`, calls[0].Function.Arguments)
	require.Equal(t, "b", calls[1].Function.Name)
	require.Equal(t, "Let me look.", content)
	for _, text := range []string{"no call", "<tool_call>{\"name\": \"zz\", \"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"a\", </tool_call>"} {
		calls, content = h.parseToolCalls(text)
		require.Nil(t, calls, text)
		require.Equal(t, text, content)
	}
	l := &toolRequest{specs: specs, format: toolsLlama3}
	calls, content = l.parseToolCalls(` {"name": "a", "parameters": {"y": "z"}}; {"name": "b", "arguments": {"k": [1, 2]}}`)
	require.Len(t, calls, 2)
	require.Equal(t, `{"y":"z"}`, calls[0].Function.Arguments)
	require.Equal(t, `{"k":[1,2]}`, calls[1].Function.Arguments)
	require.Empty(t, content)
	calls, _ = l.parseToolCalls(`The answer is {"name": "a"}`)
	require.Nil(t, calls)
	require.Equal(t, toolsHermes, detectToolFormat(`... <tool_call>\n ...`))
	require.Equal(t, toolsLlama3, detectToolFormat(`Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.`))
	require.Equal(t, toolsUnsupported, detectToolFormat(`{{ messages }}`))
}

// TestQwenTemplateTools: the shared Qwen3 template is Hermes-format, renders
// the request's tools, and renders an assistant call with OpenAI's string
// arguments as the object (templateToolCalls).
func TestQwenTemplateTools(t *testing.T) {
	p := filepath.Join(sharedtest.Path(t, "tokenizers", "qwen3"), "tokenizer_config.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	tm, err := chat.FromTokenizerConfig(p, b)
	require.NoError(t, err)
	require.Equal(t, toolsHermes, detectToolFormat(tm.Source))
	f := fields{"messages": json.RawMessage(`[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"w","arguments":"{\"city\":\"Oslo\"}"}}]},{"role":"tool","content":"sunny"}]`)}
	msgs, e := chatMessages(f)
	require.Nil(t, e)
	out, err := tm.Render(msgs, true, map[string]json.RawMessage{"tools": json.RawMessage(`[{"type":"function","function":{"name":"w","parameters":{"type":"object"}}}]`)}, chat.Options{})
	require.NoError(t, err)
	require.Contains(t, out, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"w\"")
	require.Contains(t, out, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>")
	require.Contains(t, out, "<tool_response>\nsunny\n</tool_response>")
}
