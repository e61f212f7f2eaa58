package serve

import "testing"

// TestHeldFrom: what a streamed reply with tools may send as content as it
// grows, per tool-call format.
func TestHeldFrom(t *testing.T) {
	hermes, llama := &toolRequest{format: toolsHermes}, &toolRequest{format: toolsLlama3}
	for _, c := range []struct {
		t    *toolRequest
		text string
		want int
	}{
		{hermes, "", 0},
		{hermes, "Sunny", 5},
		{hermes, "Sunny <", 6},          // "<" may begin a call
		{hermes, "Sunny <tool_", 6},     // so may "<tool_"
		{hermes, "Sunny <tool>", 12},    // not this
		{hermes, "a <tool_call>\n{", 2}, // a call: held from its tag
		{hermes, "a <tool_call>\n{}\n</tool_call> b", 2},
		{llama, "  ", 0},
		{llama, " {\"name\"", 0},          // the reply may be a call
		{llama, "\nOnce upon", 10},        // it is content
		{llama, "Once {\"name\": 1}", 16}, // and stays so
		{&toolRequest{}, "x", 0},
	} {
		if got := c.t.heldFrom(c.text); got != c.want {
			t.Errorf("format %d, %q: %d, want %d", c.t.format, c.text, got, c.want)
		}
	}
}
