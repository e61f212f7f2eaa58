package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/convert"
	"github.com/selectinfer/sinf/convert/hf"
	"github.com/selectinfer/sinf/internal/sharedtest"
)

// TestCommandErrors: the subcommands refuse what would be unsafe or cannot
// work, with a message saying what to do.
func TestCommandErrors(t *testing.T) {
	ck, err := hf.Open(sharedtest.Path(t, "models", "tinystories-656k"))
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "ts.sinf")
	_, err = convert.Convert(ck, file, convert.Options{Gamma: 1, FirstLayer: 0, LastLayer: 2, ExplicitRange: true, Random: true})
	ck.Close()
	require.NoError(t, err)
	// --chat-template gives a model without one a template: chat runs.
	tmpl := filepath.Join(t.TempDir(), "t.jinja")
	require.NoError(t, os.WriteFile(tmpl, []byte("{% for m in messages %}{{ m.content }}{% endfor %}"), 0o644))
	app := newApp()
	var o bytes.Buffer
	app.Writer, app.ErrWriter, app.Reader = &o, io.Discard, strings.NewReader("Once upon a time\n")
	require.NoError(t, app.Run([]string{"sinf-run", "chat", "--model", file, "--chat-template", tmpl, "--max-tokens", "4", "--threads", "1"}))
	require.Regexp(t, `^\(Ctrl-C stops a reply; Ctrl-D or /exit quits; /reset starts over; /help\)\n> .+\n> \n$`, o.String())

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, `Required flag "model" not set (or run a command: serve, chat)`},
		{[]string{"serve", "--model", file, "--host", "0.0.0.0"}, "--host 0.0.0.0: listening beyond this machine needs --api-key KEY (or $SINF_API_KEY)"},
		{[]string{"serve", "--model", file, "--parallel", "0"}, "--parallel 0: want 1 to 1024"},
		{[]string{"serve", "--model", file, "--parallel", "4", "--batch-groups", "2"}, "--batch-groups 2: want ≥ 1, and more than 1 only with --batch"},
		{[]string{"serve", "--model", file, "--max-body", "10"}, "--max-body 10: want ≥ 1024 bytes"},
		{[]string{"serve", "--model", file, "--top-p", "2"}, "--top-p 2: want a probability in (0, 1]"},
		{[]string{"chat", "--model", file}, "no chat_template: this model has no chat template; give one with --chat-template FILE (or use sinf-run --prompt)"},
		{[]string{"chat", "--model", file, "--chat-template", filepath.Join(t.TempDir(), "none.jinja")}, "none.jinja: no such file"},
	} {
		app := newApp()
		var o, e bytes.Buffer
		app.Writer, app.ErrWriter, app.Reader = &o, &e, strings.NewReader("")
		err := app.Run(append([]string{"sinf-run"}, c.args...))
		require.Error(t, err, "%v", c.args)
		require.Contains(t, err.Error(), c.want, "%v", c.args)
	}
}
