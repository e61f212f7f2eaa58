package serve

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFitTurns: whole turns go oldest first (a user message with the
// replies and tool messages after it), the system messages and the last
// message stay, and a conversation that cannot fit is an error.
func TestFitTurns(t *testing.T) {
	var msgs []json.RawMessage
	for _, m := range []string{`{"role":"system","content":"S"}`, `{"role":"user","content":"u1"}`, `{"role":"assistant","content":"a1"}`,
		`{"role":"tool","content":"t1"}`, `{"role":"user","content":"u2"}`, `{"role":"assistant","content":"a2"}`, `{"role":"user","content":"u3"}`} {
		msgs = append(msgs, json.RawMessage(m))
	}
	var seen []string
	// one "token" per message content
	encode := func(raw json.RawMessage) ([]int, error) {
		var list []struct{ Content string }
		require.NoError(t, json.Unmarshal(raw, &list))
		var names []string
		for _, m := range list {
			names = append(names, m.Content)
		}
		seen = append(seen, strings.Join(names, " "))
		return make([]int, len(list)), nil
	}
	ids, dropped, err := fitTurns(msgs, 7, encode)
	require.NoError(t, err)
	require.Equal(t, 0, dropped)
	require.Len(t, ids, 7)
	seen = nil
	ids, dropped, err = fitTurns(msgs, 3, encode)
	require.NoError(t, err)
	require.Equal(t, 5, dropped)
	require.Len(t, ids, 2)
	require.Equal(t, []string{"S u1 a1 t1 u2 a2 u3", "S u2 a2 u3", "S u3"}, seen)
	_, _, err = fitTurns(msgs, 1, encode)
	require.ErrorContains(t, err, "2 tokens with only the system messages and the last message kept, and the context leaves 1 for them")
	// no system message: the first turn goes first
	seen = nil
	_, dropped, err = fitTurns(msgs[1:], 3, encode)
	require.NoError(t, err)
	require.Equal(t, 3, dropped)
	require.Equal(t, []string{"u1 a1 t1 u2 a2 u3", "u2 a2 u3"}, seen)
}
