package chat_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/internal/sharedtest"
	"github.com/selectinfer/sinf/runtime/chat"
)

type golden struct {
	Templates map[string][]struct {
		Name                string                     `json:"name"`
		Messages            json.RawMessage            `json:"messages"`
		AddGenerationPrompt bool                       `json:"add_generation_prompt"`
		Extra               map[string]json.RawMessage `json:"extra"`
		Rendered            string                     `json:"rendered"`
	} `json:"templates"`
}

// checkGolden renders every case of a golden file with the template of its
// tokenizer folder and compares the text byte for byte.
func checkGolden(t *testing.T, path string) {
	var g golden
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &g))
	n := 0
	for tok, cases := range g.Templates {
		cfgPath := sharedtest.Path(t, "tokenizers", tok, "tokenizer_config.json")
		cfg, err := os.ReadFile(cfgPath)
		require.NoError(t, err)
		tmpl, err := chat.FromTokenizerConfig(cfgPath, cfg)
		require.NoError(t, err)
		special := tokenizerOf(t, tok).SpecialTokens()
		for _, c := range cases {
			got, err := tmpl.Render(c.Messages, c.AddGenerationPrompt, c.Extra, chat.Options{})
			require.NoError(t, err, "%s %s", tok, c.Name)
			require.Equal(t, c.Rendered, got, "%s %s", tok, c.Name)
			// Keeping control tokens out of the request's strings changes
			// nothing where they hold none.
			p, err := tmpl.RenderPrompt(c.Messages, c.AddGenerationPrompt, c.Extra, chat.Options{KeepAsText: special})
			require.NoError(t, err, "%s %s", tok, c.Name)
			require.Equal(t, c.Rendered, p.Text, "%s %s", tok, c.Name)
			require.Empty(t, p.Plain, "%s %s", tok, c.Name)
			n++
		}
	}
	require.Greater(t, n, 7)
}

// TestGoldenRenderings reproduces ../shared/golden/chat-templates.json
// (Python jinja2 renderings of the Llama-3 and Qwen3 templates) exactly.
func TestGoldenRenderings(t *testing.T) {
	checkGolden(t, sharedtest.Path(t, "golden", "chat-templates.json"))
}

// TestToolRenderings reproduces testdata/tools.json (tools, tool calls,
// enable_thinking, reasoning, non-ASCII text; written by
// tools/chat-template-golden.py with Python jinja2): tojson's separators and
// the key order of the request's objects must survive.
func TestToolRenderings(t *testing.T) {
	sharedtest.Root(t)
	checkGolden(t, filepath.Join("testdata", "tools.json"))
}

// TestTemplateFeatures: raise_exception, loop controls, namespace, slicing,
// string methods; bounds and errors.
func TestTemplateFeatures(t *testing.T) {
	cfg := `{"bos_token":{"content":"<s>","lstrip":false},"eos_token":"</s>","pad_token":null,"chat_template":` +
		`"{% if messages[0].role != 'user' %}{{ raise_exception('first message must be the user\\'s') }}{% endif %}` +
		`{% set ns = namespace(n=0) %}{{ bos_token }}{% for m in messages %}{% if loop.index > 3 %}{% break %}{% endif %}` +
		`{% if m.role == 'skip' %}{% continue %}{% endif %}{% set ns.n = ns.n + 1 %}[{{ m.role | upper }}:{{ m.content.strip()[:5] }}]{% endfor %}` +
		`{{ ns.n }}{% if add_generation_prompt %}>{% endif %}{{ eos_token }}{{ tools | tojson if tools is defined }}{{ pad_token is defined }}"}`
	tmpl, err := chat.FromTokenizerConfig("tc.json", []byte(cfg))
	require.NoError(t, err)
	out, err := tmpl.Render(json.RawMessage(`[{"role":"user","content":"  hello world "},{"role":"skip","content":"x"},{"role":"assistant","content":"ok"},{"role":"user","content":"never"}]`), true,
		map[string]json.RawMessage{"tools": json.RawMessage(`[{"b":1,"a":"é"}]`)}, chat.Options{})
	require.NoError(t, err)
	require.Equal(t, `<s>[USER:hello][ASSISTANT:ok]2></s>[{"b": 1, "a": "é"}]False`, out)

	_, err = tmpl.Render(json.RawMessage(`[{"role":"assistant","content":"hi"}]`), false, nil, chat.Options{})
	require.EqualError(t, err, "chat template: first message must be the user's")
	_, err = tmpl.Render(json.RawMessage(`{"role":"user"}`), false, nil, chat.Options{})
	require.EqualError(t, err, "messages: want a JSON array of message objects")
	_, err = tmpl.Render(json.RawMessage(`[{"role":"user",`), false, nil, chat.Options{})
	require.ErrorContains(t, err, "messages: ")
	_, err = tmpl.Render(json.RawMessage(`[]`), false, map[string]json.RawMessage{"messages": json.RawMessage(`1`)}, chat.Options{})
	require.EqualError(t, err, "variable messages: set by the request itself, not as a variable")

	_, err = chat.FromTokenizerConfig("tc.json", []byte(`{"eos_token":"</s>"}`))
	require.ErrorIs(t, err, chat.ErrNoTemplate)
	require.EqualError(t, err, "tc.json: no chat_template")
	_, err = chat.FromTokenizerConfig("tc.json", []byte(`{"chat_template":"{% for %}"}`))
	require.ErrorContains(t, err, "tc.json: chat_template: jinja parse")

	big, err := chat.New("t", "{% for i in range(1000) %}0123456789{% endfor %}", nil)
	require.NoError(t, err)
	_, err = big.Render(json.RawMessage(`[]`), false, nil, chat.Options{MaxBytes: 5000})
	require.EqualError(t, err, "chat template: the rendered prompt is 10000 bytes, more than the limit 5000")
	// About 0.1 s natively (the second Render below must still find it
	// running), seconds under qemu-aarch64 (CI's arm64 job).
	slow, err := chat.New("t", "{% for i in range(800) %}{% for j in range(800) %}{% endfor %}{% endfor %}", nil)
	require.NoError(t, err)
	_, err = slow.Render(json.RawMessage(`[]`), false, nil, chat.Options{Timeout: time.Millisecond})
	require.EqualError(t, err, "chat template: rendering took longer than 1ms")
	// The engine cannot be stopped: while the overdue render runs, no other
	// starts (one goroutine per runaway template, not one per request); once
	// it ends, renders go on.
	_, err = slow.Render(json.RawMessage(`[]`), false, nil, chat.Options{})
	require.EqualError(t, err, "chat template: an earlier rendering is still running past the 2s limit, so no other starts until it ends")
	// (A minute each: under qemu a render of slow itself takes seconds.)
	require.Eventually(t, func() bool {
		_, err := slow.Render(json.RawMessage(`[]`), false, nil, chat.Options{Timeout: time.Minute})
		return err == nil
	}, 3*time.Minute, 10*time.Millisecond)
	// range() makes at most chat.MaxRange elements (range(10**8) held
	// gigabytes before its first iteration); Python's forms otherwise.
	ranges, err := chat.New("t", "{{ range(3) | list }}{{ range(2, 5) | list }}{{ range(5, 0, -2) | list }}{{ range(0, 7, 3) | list }}{{ range(4, 2) | list }}", nil)
	require.NoError(t, err)
	out, err = ranges.Render(json.RawMessage(`[]`), false, nil, chat.Options{})
	require.NoError(t, err)
	require.Equal(t, "[0, 1, 2][2, 3, 4][5, 3, 1][0, 3, 6][]", out)
	for src, msg := range map[string]string{
		"{% for i in range(100000000) %}{{ i }}{% endfor %}":     "range: 100000000 elements, more than the 65536 a chat template may make",
		"{{ range(-9223372036854775807, 9223372036854775807) }}": "range: 18446744073709551614 elements, more than the 65536 a chat template may make",
		"{{ range(1, 2, 0) }}":                                   "range: step must not be zero",
		"{{ range('a') }}":                                       "range: argument 1 is 'a', not an integer",
	} {
		tl, err := chat.New("t", src, nil)
		require.NoError(t, err)
		_, err = tl.Render(json.RawMessage(`[]`), false, nil, chat.Options{})
		require.ErrorContains(t, err, msg, src)
	}

	// HF's named templates: tool_use for a request with tools.
	named, err := chat.FromTokenizerConfig("tc.json", []byte(`{"chat_template":[{"name":"default","template":"D"},{"name":"tool_use","template":"T{{ tools[0] }}"}]}`))
	require.NoError(t, err)
	out, err = named.Render(json.RawMessage(`[]`), false, nil, chat.Options{})
	require.NoError(t, err)
	require.Equal(t, "D", out)
	out, err = named.Render(json.RawMessage(`[]`), false, map[string]json.RawMessage{"tools": json.RawMessage(`["x"]`)}, chat.Options{})
	require.NoError(t, err)
	require.Equal(t, "Tx", out)
}

// TestSpecialTokens: a tokenizer_config.json without a chat template still
// gives its special tokens (what a --chat-template FILE renders with), a
// string or an AddedToken object, null left out.
func TestSpecialTokens(t *testing.T) {
	cfg := []byte(`{"bos_token":"<s>","eos_token":{"content":"</s>","lstrip":false},"pad_token":null}`)
	sp, err := chat.SpecialTokens("cfg", cfg)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"bos_token": "<s>", "eos_token": "</s>"}, sp)
	_, err = chat.FromTokenizerConfig("cfg", cfg)
	require.ErrorIs(t, err, chat.ErrNoTemplate)
	tmpl, err := chat.New("t.jinja", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}", sp)
	require.NoError(t, err)
	out, err := tmpl.Render([]byte(`[{"role":"user","content":"hi"}]`), false, nil, chat.Options{})
	require.NoError(t, err)
	require.Equal(t, "<s>hi</s>", out)
}
