package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/internal/sharedtest"
)

// TestChatTemplateCommand: sinf chat-template prints the golden rendering
// exactly (no newline added), honours --add-generation-prompt=false and
// --var, and names what is wrong.
func TestChatTemplateCommand(t *testing.T) {
	dir := t.TempDir()
	msgs := filepath.Join(dir, "m.json")
	require.NoError(t, os.WriteFile(msgs, []byte(`[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France?"}]`), 0o644))
	out, err := run(t, "chat-template", "--model", sharedtest.Path(t, "tokenizers", "llama3"), "--messages", msgs)
	require.NoError(t, err)
	require.Equal(t, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", out)

	one := filepath.Join(dir, "one.json")
	require.NoError(t, os.WriteFile(one, []byte(`[{"role":"user","content":"Hi"}]`), 0o644))
	qwen := sharedtest.Path(t, "tokenizers", "qwen3")
	out, err = run(t, "chat-template", "--model", qwen, "--messages", one, "--add-generation-prompt=false")
	require.NoError(t, err)
	require.Equal(t, "<|im_start|>user\nHi<|im_end|>\n", out)
	// enable_thinking=false: the case "no-thinking" of runtime/chat/testdata/tools.json.
	var g struct {
		Templates map[string][]struct{ Name, Rendered string }
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "runtime", "chat", "testdata", "tools.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &g))
	var want string
	for _, c := range g.Templates["qwen3"] {
		if c.Name == "no-thinking" {
			want = c.Rendered
		}
	}
	require.Contains(t, want, "<think>")
	out, err = run(t, "chat-template", "--model", qwen, "--messages", one, "--var", "enable_thinking=false", "--var", `tools=[]`)
	require.NoError(t, err)
	require.Equal(t, want, out)

	// --chat-template: a file's template, with the model's bos_token
	tf := filepath.Join(dir, "t.jinja")
	require.NoError(t, os.WriteFile(tf, []byte(`{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}|{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}`), 0o644))
	out, err = run(t, "chat-template", "--chat-template", tf, "--model", sharedtest.Path(t, "tokenizers", "llama3"), "--messages", one)
	require.NoError(t, err)
	require.Equal(t, "<|begin_of_text|>[user] Hi|[assistant]", out)
	out, err = run(t, "chat-template", "--chat-template", tf, "--messages", one, "--add-generation-prompt=false")
	require.NoError(t, err)
	require.Equal(t, "[user] Hi|", out)

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`[{"role":`), 0o644))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", qwen, "--messages", bad}, "--messages " + bad + ": not valid JSON"},
		{[]string{"--messages", one}, "give --model (its chat template) or --chat-template FILE"},
		{[]string{"--chat-template", filepath.Join(dir, "none.jinja"), "--messages", one}, "--chat-template: open"},
		{[]string{"--model", qwen, "--messages", one, "--var", "enable_thinking=no"}, `--var enable_thinking: "no" is not a JSON value (a string needs quotes: enable_thinking='"text"')`},
		{[]string{"--model", qwen, "--messages", one, "--var", "x"}, `--var "x": want NAME=JSON`},
		{[]string{"--model", sharedtest.Path(t, "models", "tinystories-656k"), "--messages", one}, "tokenizer_config.json: no chat_template: the model has no chat template"},
	} {
		_, err := run(t, append([]string{"chat-template"}, c.args...)...)
		require.Error(t, err, "%v", c.args)
		require.Contains(t, err.Error(), c.want)
	}
}
