package tokenizer

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/selectinfer/sinf/internal/sharedtest"
)

// The shared tokenizers are large (Llama-3's tokenizer.json is 9 MB), so
// each is loaded once for all tests.
var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// load returns the tokenizer in shared/<rel...>, loaded once.
func load(t testing.TB, rel ...string) *Tokenizer {
	t.Helper()
	dir := sharedtest.Path(t, rel...)
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tk, ok := loaded[dir]; ok {
		return tk
	}
	tk, err := Load(dir)
	require.NoError(t, err)
	loaded[dir] = tk
	return tk
}

func llama3(t testing.TB) *Tokenizer { return load(t, "tokenizers", "llama3") }
func qwen3(t testing.TB) *Tokenizer  { return load(t, "tokenizers", "qwen3") }

// goldenCase is one case of shared/golden/tokenizers.json.
type goldenCase struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

func goldenTokenizers(t *testing.T) map[string][]goldenCase {
	t.Helper()
	data, err := os.ReadFile(sharedtest.Path(t, "golden", "tokenizers.json"))
	require.NoError(t, err)
	var g struct {
		Cases map[string][]goldenCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &g))
	require.NotEmpty(t, g.Cases["llama3"])
	require.NotEmpty(t, g.Cases["qwen3"])
	return g.Cases
}

func byName(t *testing.T, name string) *Tokenizer {
	switch name {
	case "llama3":
		return llama3(t)
	case "qwen3":
		return qwen3(t)
	}
	t.Fatalf("no tokenizer %q", name)
	return nil
}

func TestGoldenEncode(t *testing.T) {
	for name, cases := range goldenTokenizers(t) {
		tk := byName(t, name)
		for _, c := range cases {
			require.Equal(t, c.IDs, tk.Encode(c.Text, false), "%s: %q", name, c.Text)
		}
	}
}

func TestGoldenDecodeRoundTrip(t *testing.T) {
	for name, cases := range goldenTokenizers(t) {
		tk := byName(t, name)
		for _, c := range cases {
			want := c.Text
			if name == "llama3" {
				// <|begin_of_text|> is special, so Decode skips it.
				want = strings.ReplaceAll(want, "<|begin_of_text|>", "")
			}
			require.Equal(t, want, tk.Decode(c.IDs), "%s: %q", name, c.Text)
			require.Equal(t, want, streamDecode(tk, c.IDs), "%s stream: %q", name, c.Text)
		}
	}
}

// streamDecode decodes ids one at a time, checking that every piece is
// whole UTF-8.
func streamDecode(tk *Tokenizer, ids []int) string {
	d := tk.NewDecoder()
	var b strings.Builder
	for _, id := range ids {
		s := d.Add(id)
		if !utf8.ValidString(s) {
			panic("Decoder.Add returned a split UTF-8 character")
		}
		b.WriteString(s)
	}
	b.WriteString(d.Flush())
	return b.String()
}

func TestModelPromptIDs(t *testing.T) {
	data, err := os.ReadFile(sharedtest.Path(t, "golden", "models.json"))
	require.NoError(t, err)
	var g struct {
		Prompt string `json:"prompt"`
		Models map[string]struct {
			PromptIDs []int `json:"prompt_ids"`
		} `json:"models"`
	}
	require.NoError(t, json.Unmarshal(data, &g))
	for _, name := range []string{"tinystories-656k", "stories260k", "babyllama-936k"} {
		m, ok := g.Models[name]
		require.True(t, ok, name)
		tk := load(t, "models", name)
		require.True(t, tk.AddsBOS(), name)
		require.Equal(t, 1, tk.BOS(), name)
		require.Equal(t, m.PromptIDs, tk.Encode(g.Prompt, tk.AddsBOS()), name)
		require.Equal(t, g.Prompt, tk.Decode(m.PromptIDs), name)
		require.Equal(t, g.Prompt, streamDecode(tk, m.PromptIDs), name)
	}
}

func TestSpecialIDs(t *testing.T) {
	l := llama3(t)
	require.False(t, l.AddsBOS()) // this tokenizer.json's post_processor is ByteLevel only
	require.Equal(t, 128000, l.BOS())
	require.Equal(t, []int{128001}, l.EOS())
	require.Equal(t, 128256, l.VocabSize())
	require.Equal(t, []int{128000, 9906}, l.Encode("Hello", true))
	require.Equal(t, "<|begin_of_text|>", l.Token(128000))
	require.Equal(t, "ĠHello", l.Token(22691))
	require.Equal(t, "", l.Token(-1))
	require.Equal(t, "", l.Token(1<<20))

	q := qwen3(t)
	require.False(t, q.AddsBOS())
	require.Equal(t, -1, q.BOS())
	require.Equal(t, []int{151645}, q.EOS())
	require.Equal(t, 151669, q.VocabSize())
	require.Equal(t, q.Encode("Hello", false), q.Encode("Hello", true))

	s := load(t, "models", "stories260k")
	require.Equal(t, []int{2}, s.EOS())
	require.Equal(t, 512, s.VocabSize())

	r := load(t, "models", "tiny-random-qwen2")
	require.True(t, r.AddsBOS())
	require.Equal(t, 1, r.BOS())
	require.Equal(t, []int{2}, r.EOS())
	require.Equal(t, 2048, r.VocabSize())
	require.Equal(t, []int{1, 80, 147, 201, 282, 57}, r.Encode("Once upon a time", true))
}

// Cases beyond the golden file, whose ids come from the HF tokenizers crate
// (its Node.js binding, version 0.23.2), encode(text, add_special_tokens=false).
var hfCases = []struct {
	dir  []string
	text string
	ids  []int
}{
	// Added tokens in the normalized text: the normalized form of
	// "<|start_story|>" is "▁<|start_story|>", found only after a space.
	{[]string{"models", "tinystories-656k"}, "a<|start_story|>b", []int{85, 208, 212, 210, 54}},
	{[]string{"models", "tinystories-656k"}, "a <|start_story|>b", []int{85, 1, 54}},
	{[]string{"models", "tinystories-656k"}, "<|start_story|>b", []int{1, 54}},
	// No byte tokens in this vocabulary: unknown characters become <unk>.
	{[]string{"models", "tinystories-656k"}, "naïve café 🙂", []int{80, 557, 0, 218, 295, 58, 0, 80, 0}},
	{[]string{"models", "tinystories-656k"}, "Hello  world", []int{80, 1288, 139, 80, 410, 555}},
	// Non-normalized added tokens split the raw text; each side gets its "▁".
	{[]string{"models", "stories260k"}, "a<s>b", []int{261, 1, 268}},
	{[]string{"models", "stories260k"}, "naïve café 🙂", []int{297, 412, 198, 178, 360, 280, 412, 431, 485, 410, 243, 162, 156, 133}},
	// fuse_unk without byte fallback.
	{[]string{"models", "babyllama-936k"}, "naïve café 🙂 Zz", []int{3, 9, 5, 0, 28, 4, 3, 22, 5, 24, 78, 3, 0, 3, 62, 44}},
	{[]string{"tokenizers", "llama3"}, "<|begin_of_text|><|end_of_text|>a", []int{128000, 128001, 64}},
	{[]string{"tokenizers", "llama3"}, "IT'S", []int{964, 13575}},
}

func TestHFCases(t *testing.T) {
	for _, c := range hfCases {
		tk := load(t, c.dir...)
		require.Equal(t, c.ids, tk.Encode(c.text, false), "%v %q", c.dir, c.text)
	}
}

func TestByteFallbackDecode(t *testing.T) {
	tk := load(t, "models", "stories260k")
	for _, text := range []string{"naïve café 🙂", "日本語 text", "a\u00a0b", "  two spaces", "end 🙂"} {
		ids := tk.Encode(text, true)
		require.Equal(t, text, tk.Decode(ids), "%q", text)
		require.Equal(t, text, streamDecode(tk, ids), "%q", text)
	}
	// An invalid run: every byte of it becomes U+FFFD (HF ByteFallback).
	b := tk.model.byteIDs
	ids := []int{b[0xF0], b[0x9F], b[0x41]}
	require.Equal(t, "\uFFFD\uFFFD\uFFFD", tk.Decode(ids))
	require.Equal(t, tk.Decode(ids), streamDecode(tk, ids))
}

func TestByteLevelLossyDecode(t *testing.T) {
	tk := llama3(t)
	// Byte-level tokens for the bytes F0 9F (a cut emoji) then "A": Rust's
	// from_utf8_lossy gives one U+FFFD for the two bytes.
	id := func(b byte) int { return tk.model.vocab[string(byteToRune[b])] }
	ids := []int{id(0xF0), id(0x9F), id('A'), id(0xFF), id(0xE2), id(0x82)}
	require.Equal(t, "\uFFFDA\uFFFD\uFFFD", tk.Decode(ids))
	require.Equal(t, tk.Decode(ids), streamDecode(tk, ids))
}

func TestStreamMatchesDecodeRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, tk := range []*Tokenizer{
		llama3(t), qwen3(t),
		load(t, "models", "stories260k"),
		load(t, "models", "tinystories-656k"),
		load(t, "models", "babyllama-936k"),
	} {
		for range 200 {
			ids := make([]int, rng.Intn(12))
			for i := range ids {
				switch rng.Intn(3) {
				case 0: // byte tokens and their neighbours are the hard part
					ids[i] = rng.Intn(min(300, tk.VocabSize()))
				default:
					ids[i] = rng.Intn(tk.VocabSize()+2) - 1
				}
			}
			require.Equal(t, tk.Decode(ids), streamDecode(tk, ids), "%v", ids)
		}
	}
}

func TestEncodeInvalidUTF8(t *testing.T) {
	tk := llama3(t)
	// Each maximal invalid sequence becomes one U+FFFD.
	require.Equal(t, tk.Encode("a\uFFFDb\uFFFD\uFFFD", false), tk.Encode("a\xF0\x9Fb\xFF\xFE", false))
	require.Equal(t, "a\uFFFDb", tk.Decode(tk.Encode("a\xE2\x82b", false)))
	s := load(t, "models", "stories260k")
	require.Equal(t, "x\uFFFD", s.Decode(s.Encode("x\xC3", true)))
}

func TestLongWord(t *testing.T) {
	// With no pre-tokenizer a whole text is one BPE word: merging must not
	// be quadratic.
	tk := load(t, "models", "tinystories-656k")
	text := strings.Repeat("Once upon a time there was a little girl. ", 2000)
	ids := tk.Encode(text, false)
	require.Equal(t, text, tk.Decode(ids))
	tl := llama3(t)
	long := strings.Repeat("a", 100000)
	require.Equal(t, long, tl.Decode(tl.Encode(long, false)))
	spaces := strings.Repeat(" ", 50000) + "x"
	require.Equal(t, spaces, tl.Decode(tl.Encode(spaces, false)))
}

func TestErrors(t *testing.T) {
	_, err := Load(t.TempDir())
	require.ErrorContains(t, err, "tokenizer.json")
	require.ErrorIs(t, err, os.ErrNotExist)

	_, err = New("bad", []byte("{not json"), nil)
	require.ErrorContains(t, err, "tokenizer.json")
	require.ErrorContains(t, err, "bad JSON")

	var e *Error
	_, err = New("wp", []byte(`{"model": {"type": "WordPiece", "vocab": {}}}`), nil)
	require.ErrorAs(t, err, &e)
	require.Equal(t, "tokenizer.json", e.File)
	require.Equal(t, "model.type", e.Field)
	require.ErrorContains(t, err, "WordPiece")

	_, err = New("uni", []byte(`{"model": {"type": "Unigram", "vocab": []}}`), nil)
	require.ErrorAs(t, err, &e)
	require.Equal(t, "model.type", e.Field)

	const model = `"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}`
	_, err = New("norm", []byte(`{"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}, `+model+`}`), nil)
	require.ErrorAs(t, err, &e)
	require.Equal(t, "normalizer.normalizers[1].type", e.Field)

	_, err = New("pre", []byte(`{"pre_tokenizer": {"type": "BertPreTokenizer"}, `+model+`}`), nil)
	require.ErrorAs(t, err, &e)
	require.Equal(t, "pre_tokenizer.type", e.Field)

	_, err = New("merge", []byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]}}`), nil)
	require.ErrorAs(t, err, &e)
	require.Equal(t, "model.merges[0]", e.Field)

	_, err = New("cfg", []byte(`{`+model+`}`), []byte(`{"eos_token": "</s>"}`))
	require.ErrorAs(t, err, &e)
	require.Equal(t, "tokenizer_config.json", e.File)
	require.Equal(t, "eos_token", e.Field)

	_, err = New("cfg", []byte(`{`+model+`}`), []byte(`[1,2]`))
	require.ErrorAs(t, err, &e)
	require.Equal(t, "tokenizer_config.json", e.File)
}

func TestMinimalBPE(t *testing.T) {
	// Pair-form merges, no normalizer, pre-tokenizer or decoder: HF joins
	// decoded tokens with spaces when there is no decoder.
	tk, err := New("mini", []byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "abb": 3}, "merges": [["a", "b"], ["ab", "b"]]}}`), nil)
	require.NoError(t, err)
	require.Equal(t, []int{3, 2, 0}, tk.Encode("abbaba", false))
	require.Equal(t, "abb ab a", tk.Decode([]int{3, 2, 0}))
	require.Equal(t, "abb ab a", streamDecode(tk, []int{3, 2, 0}))
	require.False(t, tk.AddsBOS())
	require.Equal(t, -1, tk.BOS())
	require.Empty(t, tk.EOS())
	require.Equal(t, 4, tk.VocabSize())
	require.Empty(t, tk.Encode("", false))
	require.Equal(t, "", tk.Decode(nil))
}

// variant returns stories260k's tokenizer with some components replaced
// (JSON values by top-level key).
func variant(t *testing.T, parts map[string]string) *Tokenizer {
	t.Helper()
	data, err := os.ReadFile(sharedtest.Path(t, "models", "stories260k", "tokenizer.json"))
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &m))
	for k, v := range parts {
		m[k] = json.RawMessage(v)
	}
	data, err = json.Marshal(m)
	require.NoError(t, err)
	tk, err := New("variant", data, nil)
	require.NoError(t, err)
	return tk
}

// Components the shared files do not use, checked against the HF
// tokenizers crate (Node.js binding 0.23.2) on stories260k's model with the
// components swapped.
func TestComponentVariants(t *testing.T) {
	type tc struct {
		text string
		ids  []int
		dec  string
	}
	metaspace := func(scheme string, split bool) map[string]string {
		ms := fmt.Sprintf(`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": %q, "split": %v}`, scheme, split)
		return map[string]string{
			"normalizer":    "null",
			"pre_tokenizer": ms,
			"decoder":       `{"type": "Sequence", "decoders": [{"type": "ByteFallback"}, ` + ms + `]}`,
		}
	}
	for _, v := range []struct {
		name  string
		parts map[string]string
		cases []tc
	}{
		{"metaspace first split", metaspace("first", true), []tc{
			{"Hello world", []int{346, 306, 414, 263, 304, 341}, "Hello world"},
			{"  two  spaces ", []int{410, 259, 424, 414, 410, 262, 427, 412, 331, 419, 410}, " two  spaces "},
			{"<s>a b", []int{1, 412, 268}, "a b"},
			{"a<s> b", []int{261, 1, 268}, "a b"},
			{"naïve 🙂", []int{297, 412, 198, 178, 360, 410, 243, 162, 156, 133}, "naïve 🙂"},
		}},
		{"metaspace always", metaspace("always", false), []tc{
			{"<s>a b", []int{1, 261, 268}, "a b"},
		}},
		{"metaspace never split", metaspace("never", true), []tc{
			{"Hello world", []int{440, 411, 306, 414, 263, 304, 341}, "Hello world"},
			{"  two  spaces ", []int{410, 259, 424, 414, 410, 262, 427, 412, 331, 419, 410}, "  two  spaces "},
			{"a<s> b", []int{412, 1, 268}, "a b"},
		}},
		{"strip start and stop after fuse", map[string]string{
			"decoder": `{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 2, "stop": 1}]}`,
		}, []tc{
			{"  two  spaces ", []int{410, 410, 259, 424, 414, 410, 262, 427, 412, 331, 419, 410}, " two  spaces"},
			{"a<s> b", []int{261, 1, 410, 268}, "a  b"},
		}},
		{"mixed decoder", map[string]string{
			"decoder": `{"type": "Sequence", "decoders": [{"type": "Strip", "content": "▁", "start": 1, "stop": 0}, {"type": "ByteFallback"}, {"type": "Replace", "pattern": {"Regex": "[aeiou]+"}, "content": "_"}, {"type": "Fuse"}, {"type": "Replace", "pattern": {"String": "▁th"}, "content": "TH"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}]}`,
		}, []tc{
			{"Hello world", []int{346, 306, 414, 263, 304, 341}, "H_ll_w_rld"},
			{"  two  spaces ", []int{410, 410, 259, 424, 414, 410, 262, 427, 412, 331, 419, 410}, "tw_sp_c_s"},
			{"naïve 🙂", []int{297, 412, 198, 178, 360, 410, 243, 162, 156, 133}, "n_ïv_🙂"},
		}},
	} {
		tk := variant(t, v.parts)
		for _, c := range v.cases {
			require.Equal(t, c.ids, tk.Encode(c.text, false), "%s: %q", v.name, c.text)
			require.Equal(t, c.dec, tk.Decode(c.ids), "%s: %q", v.name, c.text)
			require.Equal(t, c.dec, streamDecode(tk, c.ids), "%s: %q", v.name, c.text)
		}
	}
}

// FuzzEncode checks that encoding never panics, that byte-level BPE
// (Llama-3) and byte-fallback BPE (stories260k) decode back to the text,
// and EncodeWith's limit and plain ranges on Llama-3.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"Hello world", "  x\r\n\n\ty", "日本語🙂", "<|begin_of_text|>a", "\xff\xfe", "don't 123456", "a\xe2\x82"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := s
		if !utf8.ValidString(s) {
			want, _ = lossyUTF8([]byte(s), true)
		}
		tk := llama3(t)
		ids := tk.Encode(s, false)
		if !strings.Contains(want, "<|") { // no written special tokens
			require.Equal(t, want, tk.Decode(ids))
		}
		require.Equal(t, tk.Decode(ids), streamDecode(tk, ids))
		// The token limit keeps exactly the ids within it; a text that is
		// all plain decodes back to itself, written special tokens too.
		if len(ids) > 0 {
			got, err := tk.EncodeWith(s, EncodeOptions{MaxTokens: len(ids)})
			require.NoError(t, err)
			require.Equal(t, ids, got)
			_, err = tk.EncodeWith(s, EncodeOptions{MaxTokens: len(ids) - 1})
			if len(ids) > 1 {
				var long *TooLongError
				require.ErrorAs(t, err, &long)
			}
		}
		plain, err := tk.EncodeWith(s, EncodeOptions{Plain: []Span{{0, len(s)}}})
		require.NoError(t, err)
		require.Equal(t, want, tk.Decode(plain))

		sp := load(t, "models", "stories260k")
		ids = sp.Encode(s, true)
		if !strings.Contains(want, "<s>") && !strings.Contains(want, "</s>") && !strings.Contains(want, "<unk>") &&
			!strings.ContainsRune(want, '▁') {
			require.Equal(t, want, sp.Decode(ids))
		}
		require.Equal(t, sp.Decode(ids), streamDecode(sp, ids))
	})
}

// TestMergelessWarning (issue 23 item 5): a BPE vocabulary with tokens of
// several characters and no merges encodes character by character, as HF
// does, with a warning that the file is probably broken; a sound file, or
// one whose long tokens are reachable without merges, gets none.
func TestMergelessWarning(t *testing.T) {
	broken := `{"added_tokens": [{"id": 5, "content": "<s>", "special": true}],
		"model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0, "b": 1, "ab": 2, "ba": 3, "<unk>": 4, "<s>": 5, "<0x41>": 6, "abb": 7}, "merges": []}}`
	tk, err := New("x", []byte(broken), nil)
	require.NoError(t, err)
	require.Equal(t, []string{`tokenizer x: tokenizer.json: model.merges is empty, but model.vocab has 3 tokens of more than one character (such as "ab", "abb", "ba"), which only merges build: text is encoded character by character (as HF does), so the file is probably broken (were its merges lost?)`}, tk.Warnings())
	require.Equal(t, []int{0, 1}, tk.Encode("ab", false), "character by character, as HF")

	for name, sound := range map[string]string{
		"merges":        `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`,
		"ignore_merges": `{"model": {"type": "BPE", "ignore_merges": true, "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": []}}`,
		"affixes": `{"model": {"type": "BPE", "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>",
			"vocab": {"a": 0, "##b": 1, "b</w>": 2, "##b</w>": 3, "<0x0a>": 4}, "merges": []}}`,
	} {
		tk, err := New("x", []byte(sound), nil)
		require.NoError(t, err, name)
		require.Empty(t, tk.Warnings(), name)
	}
	for _, tk := range []*Tokenizer{llama3(t), qwen3(t), load(t, "models", "stories260k"), load(t, "models", "tinystories-656k")} {
		require.Empty(t, tk.Warnings())
	}
}

// TestTokenBytes: the tokens' bytes, joined, are the decoded text (byte
// level: Llama-3, Qwen3; ▁ and byte fallback: stories260k, whose decoder's
// Strip cuts the leading space of the text, which TokenBytes keeps), and a
// special token has none.
func TestTokenBytes(t *testing.T) {
	text := "Hello, world! ünï 😀 {\"a\": [1, 2.5e3]}\n\tend"
	for name, tk := range map[string]*Tokenizer{"llama3": llama3(t), "qwen3": qwen3(t), "stories260k": load(t, "models", "stories260k")} {
		ids := tk.Encode(text, false)
		var got []byte
		for _, id := range ids {
			got = append(got, tk.TokenBytes(id)...)
		}
		want := tk.Decode(ids)
		if name == "stories260k" {
			want = " " + want
		}
		require.Equal(t, want, string(got), name)
	}
	tk := llama3(t)
	require.Nil(t, tk.TokenBytes(tk.EOS()[0]))
	require.Nil(t, tk.TokenBytes(-1))
}
