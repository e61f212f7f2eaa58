// Package chat renders a model's chat template (tokenizer_config.json's
// chat_template) into the prompt text an instruct model was trained on, as
// HF transformers' apply_chat_template does (tokenization_utils_base.py,
// render_jinja_template): Jinja2 with trim_blocks and lstrip_blocks,
// loop controls, raise_exception, tojson without ASCII escaping, and the
// tokenizer's special tokens (bos_token, eos_token, ...) as variables.
//
// Templates are compiled and rendered by github.com/ardanlabs/jinja, a
// pure-Go Jinja engine with HF's defaults built in and no file loader (a
// template cannot include or import anything, so nothing reaches the
// filesystem). It was picked over github.com/nikolalohinski/gonja/v2 on the
// real Llama-3 and Qwen3 templates: both render the plain conversations of
// ../shared/golden/chat-templates.json exactly, but only ardanlabs/jinja
// writes tojson with Python's separators (", ", ": "), which Qwen's tool
// prompts need; with messages and variables decoded in key order (Value),
// it also matches Python jinja2's tool-call renderings byte for byte.
//
// RenderPrompt also reports where the request's own strings wrote control
// tokens (Options.KeepAsText), so that the server and sinf-run chat encode
// them as text: only the template writes control tokens.
//
// A render is bounded: Options.Timeout (the goroutine of a template that
// runs past it is abandoned, not stopped) and Options.MaxBytes of output.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/selectinfer/sinf/format"
)

// ErrNoTemplate is returned by FromTokenizerConfig when the file has no
// chat_template.
var ErrNoTemplate = errors.New("no chat_template")

// Template is a compiled chat template with its tokenizer's special tokens.
// It is safe for concurrent use.
type Template struct {
	Source  string // the Jinja source
	tools   *jinja.Template
	def     *jinja.Template
	special map[string]string // bos_token, eos_token, unk_token, pad_token present in the config
	// overdue counts renders that outlived their Options.Timeout and are
	// still running (the engine cannot be stopped): while one is, render
	// refuses to start another, so that a template that never ends holds
	// one goroutine, not one per request.
	overdue atomic.Int32
}

// Options bound a render.
type Options struct {
	Timeout  time.Duration // 0: DefaultTimeout
	MaxBytes int           // output bytes at most; 0: DefaultMaxBytes
	// KeepAsText lists control-token strings (the tokenizer's special
	// tokens) that the request's own strings (message contents, roles,
	// tool calls, variables) may not turn into control tokens: RenderPrompt
	// reports where such a string's copies land in the prompt, so that they
	// are encoded as text.
	KeepAsText []string
}

// Render bounds when Options leave them zero.
const (
	DefaultTimeout  = 2 * time.Second
	DefaultMaxBytes = 4 << 20
)

// New compiles a chat template's Jinja source. special holds the special
// token variables (bos_token, eos_token, ...) the template may read; name
// labels errors.
func New(name, source string, special map[string]string) (*Template, error) {
	t, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("%s: chat_template: %w", name, err)
	}
	return &Template{Source: source, def: t, special: special}, nil
}

// SpecialTokens returns tokenizer_config.json's bos_token, eos_token,
// unk_token and pad_token by those names, for a template's variables: a
// string or an AddedToken object {"content": ...}; null and absent ones are
// left out, as HF leaves them out of special_tokens_map. Empty data gives
// none. name labels errors.
func SpecialTokens(name string, data []byte) (map[string]string, error) {
	special := map[string]string{}
	if len(data) == 0 {
		return special, nil
	}
	var c struct {
		BOS json.RawMessage `json:"bos_token"`
		EOS json.RawMessage `json:"eos_token"`
		UNK json.RawMessage `json:"unk_token"`
		PAD json.RawMessage `json:"pad_token"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for _, f := range []struct {
		key string
		raw json.RawMessage
	}{{"bos_token", c.BOS}, {"eos_token", c.EOS}, {"unk_token", c.UNK}, {"pad_token", c.PAD}} {
		if s, ok, err := tokenString(f.raw); err != nil {
			return nil, fmt.Errorf("%s: field %s: %w", name, f.key, err)
		} else if ok {
			special[f.key] = s
		}
	}
	return special, nil
}

// FromTokenizerConfig reads tokenizer_config.json's chat_template (a string,
// or HF's list of {"name", "template"}: "default", and "tool_use" for
// requests with tools) and its special tokens (a string or an AddedToken
// object {"content": ...}; null is left out, as HF leaves it out of
// special_tokens_map). name labels errors (the file path, or
// "FILE.sinf: metadata field tokenizer_config"). A config without a
// template gives an error wrapping ErrNoTemplate.
func FromTokenizerConfig(name string, data []byte) (*Template, error) {
	var c struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%s: no tokenizer_config.json: %w", name, ErrNoTemplate)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	special, err := SpecialTokens(name, data)
	if err != nil {
		return nil, err
	}
	var one string
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	switch {
	case len(c.ChatTemplate) == 0 || string(c.ChatTemplate) == "null":
		return nil, fmt.Errorf("%s: %w", name, ErrNoTemplate)
	case json.Unmarshal(c.ChatTemplate, &one) == nil:
		return New(name, one, special)
	case json.Unmarshal(c.ChatTemplate, &named) == nil:
	default:
		return nil, fmt.Errorf("%s: field chat_template: want a string or a list of {name, template}", name)
	}
	t := &Template{special: special}
	for _, n := range named {
		ct, err := jinja.Compile(n.Template)
		if err != nil {
			return nil, fmt.Errorf("%s: chat_template %q: %w", name, n.Name, err)
		}
		switch n.Name {
		case "default":
			t.def, t.Source = ct, n.Template
		case "tool_use":
			t.tools = ct
		}
	}
	if t.def == nil {
		return nil, fmt.Errorf("%s: field chat_template: no template named \"default\": %w", name, ErrNoTemplate)
	}
	return t, nil
}

// tokenString reads a special token: a string, an AddedToken object, or
// null/absent (ok false).
func tokenString(raw json.RawMessage) (string, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, fmt.Errorf("want a string or {\"content\": ...}, found %.60s", raw)
	}
	return *obj.Content, true, nil
}

// Render renders messages (a JSON array of {"role", "content", ...}
// objects, passed to the template in key order) with add_generation_prompt
// and the extra variables vars (JSON values by name: tools, documents,
// enable_thinking, ...), which may not replace messages. It returns the
// prompt text exactly as the template writes it. Errors: a template's
// raise_exception message ("chat template: ..."), a render past the
// Options bounds, malformed JSON.
func (t *Template) Render(messages json.RawMessage, addGenerationPrompt bool, vars map[string]json.RawMessage, o Options) (string, error) {
	o.KeepAsText = nil
	p, err := t.RenderPrompt(messages, addGenerationPrompt, vars, o)
	return p.Text, err
}

// Prompt is a rendered chat prompt.
type Prompt struct {
	Text string
	// Plain holds the byte ranges [start, end) of Text where a string of
	// the request wrote one of Options.KeepAsText: encode them as text
	// (tokenizer.EncodeOptions.Plain), not as control tokens.
	Plain [][2]int
}

// RenderPrompt is Render that also finds where the request's strings put
// control-token text (Options.KeepAsText). Each such occurrence in a string
// of messages or vars is swapped, before rendering, for a placeholder that
// no request can write (a private-use character, a random nonce, the
// token's index, a private-use character), and swapped back in the output,
// its range recorded in Prompt.Plain. The template sees the request's
// strings unchanged wherever they hold no control token, so the text is
// Render's byte for byte; a template that cuts a string inside a
// placeholder gets an error.
func (t *Template) RenderPrompt(messages json.RawMessage, addGenerationPrompt bool, vars map[string]json.RawMessage, o Options) (Prompt, error) {
	p, err := newProtector(o.KeepAsText)
	if err != nil {
		return Prompt{}, err
	}
	s, err := t.render(messages, addGenerationPrompt, vars, o, p)
	if err != nil {
		return Prompt{}, err
	}
	if p == nil {
		return Prompt{Text: s}, nil
	}
	return p.restore(s)
}

func (t *Template) render(messages json.RawMessage, addGenerationPrompt bool, vars map[string]json.RawMessage, o Options, p *protector) (string, error) {
	data := map[string]jinja.Value{}
	for k, v := range t.special {
		data[k] = jinja.NewString(v)
	}
	msgs, err := p.value(messages)
	if err != nil {
		return "", fmt.Errorf("messages: %w", err)
	}
	if !msgs.IsList() {
		return "", errors.New("messages: want a JSON array of message objects")
	}
	tmpl := t.def
	for k, raw := range vars {
		if k == "messages" || k == "add_generation_prompt" {
			return "", fmt.Errorf("variable %s: set by the request itself, not as a variable", k)
		}
		v, err := p.value(raw)
		if err != nil {
			return "", fmt.Errorf("variable %s: %w", k, err)
		}
		data[k] = v
		if k == "tools" && t.tools != nil && v.IsTruthy() {
			tmpl = t.tools
		}
	}
	data["messages"] = msgs
	data["add_generation_prompt"] = jinja.NewBool(addGenerationPrompt)
	data["range"] = boundedRange
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if t.overdue.Load() > 0 {
		return "", fmt.Errorf("chat template: an earlier rendering is still running past the %v limit, so no other starts until it ends", o.Timeout)
	}
	type result struct {
		s   string
		err error
	}
	done := make(chan result, 1)
	var mu sync.Mutex
	var finished, abandoned bool
	go func() {
		defer func() {
			mu.Lock()
			finished = true
			if abandoned {
				t.overdue.Add(-1)
			}
			mu.Unlock()
		}()
		// A panic in the engine on this goroutine would end the process
		// (a server's handlers recover only their own): make it an error.
		defer func() {
			if r := recover(); r != nil {
				done <- result{err: fmt.Errorf("the template engine failed: %v", r)}
			}
		}()
		s, err := tmpl.RenderValues(data)
		done <- result{s, err}
	}()
	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			return "", fmt.Errorf("chat template: %w", r.err)
		}
		if len(r.s) > o.MaxBytes {
			return "", fmt.Errorf("chat template: the rendered prompt is %d bytes, more than the limit %d", len(r.s), o.MaxBytes)
		}
		return r.s, nil
	case <-timer.C:
		mu.Lock()
		if !finished {
			abandoned = true
			t.overdue.Add(1)
		}
		mu.Unlock()
		return "", fmt.Errorf("chat template: rendering took longer than %v", o.Timeout)
	}
}

// MaxRange is the most elements a template's range() may make: HF chat
// templates range over messages and tools, and range(10**8) would hold
// gigabytes as a list before a single one is written.
const MaxRange = 1 << 16

// boundedRange is Jinja's range (Python's: range(stop), range(start, stop),
// range(start, stop, step), integers) refusing more than MaxRange elements;
// it replaces the engine's builtin in every render.
var boundedRange = jinja.NewCallable("range", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	var n [3]int64
	if len(args) < 1 || len(args) > 3 {
		return jinja.Undefined(), fmt.Errorf("range: expected 1-3 arguments, got %d", len(args))
	}
	for i, a := range args {
		switch {
		case a.IsInt():
			n[i] = a.AsInt()
		case a.IsBool() && a.AsBool():
			n[i] = 1
		case a.IsBool():
		default:
			return jinja.Undefined(), fmt.Errorf("range: argument %d is %v, not an integer", i+1, a)
		}
	}
	start, stop, step := int64(0), n[0], int64(1)
	if len(args) > 1 {
		start, stop = n[0], n[1]
	}
	if len(args) == 3 {
		step = n[2]
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("range: step must not be zero")
	}
	var count uint64 // ⌈|stop − start| / |step|⌉ when step goes from start toward stop
	switch {
	case step > 0 && stop > start:
		count = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	case step < 0 && stop < start:
		count = (uint64(start)-uint64(stop)-1)/(-uint64(step)) + 1
	}
	if count > MaxRange {
		return jinja.Undefined(), fmt.Errorf("range: %d elements, more than the %d a chat template may make", count, MaxRange)
	}
	items := make([]jinja.Value, count)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
})

// Value decodes one JSON value into a template value, keeping object keys in
// their order (as Python's json.loads does, so tojson writes them back in
// that order) and integers as integers.
func Value(raw []byte) (jinja.Value, error) {
	var p *protector
	return p.value(raw)
}

// value is Value with the protector's placeholders in every string (p nil:
// none).
func (p *protector) value(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, p)
	if err != nil {
		return v, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return v, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, p *protector) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec, p)
				if err != nil {
					return v, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			if items == nil {
				items = []jinja.Value{}
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				v, err := decodeValue(dec, p)
				if err != nil {
					return v, err
				}
				d.AsDict().Set(p.protect(kt.(string)), v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", x)
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(p.protect(x)), nil
	case json.Number:
		return jinja.FromGoValue(x), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// Load reads the chat template of a model: a folder holding
// tokenizer_config.json (nothing else is needed), or a .sinf file, whose
// metadata embeds it (spec/sinf.md §4).
func Load(path string) (*Template, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		p := filepath.Join(path, "tokenizer_config.json")
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		return FromTokenizerConfig(p, b)
	}
	f, err := format.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return FromTokenizerConfig(path+": metadata field tokenizer_config", f.Metadata().TokenizerConfig)
}

// ParseVar splits a NAME=JSON assignment (the --var flag) into the name and
// its JSON value, which must be valid JSON: --var enable_thinking=false,
// --var 'tools=[...]'.
func ParseVar(s string) (string, json.RawMessage, error) {
	name, val, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return "", nil, fmt.Errorf("--var %q: want NAME=JSON", s)
	}
	if !json.Valid([]byte(val)) {
		return "", nil, fmt.Errorf("--var %s: %q is not a JSON value (a string needs quotes: %s='\"text\"')", name, val, name)
	}
	return name, json.RawMessage(val), nil
}

// Special returns the special token variables the template is given
// (bos_token, eos_token, unk_token, pad_token, those the config sets).
func (t *Template) Special() map[string]string { return maps.Clone(t.special) }
